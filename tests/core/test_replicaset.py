"""The replica-set core driven bare: what a member decides about its set."""

from __future__ import annotations

import pytest

from replicaset.core import replicaset as rs
from replicaset.core.replicaset import Phase, Refusal, ReplicaSet, Status, View

PEERS = frozenset({"a", "b"})


def view(following: frozenset[str] = frozenset(), members: int = 3, holders: frozenset[int] = frozenset(),
         caught_up: bool = True) -> View:
    return View(members=members, upstreams=PEERS, following=following, registration_holders=holders,
                caught_up=caught_up)


def core(**kw) -> ReplicaSet:
    return ReplicaSet(instance_id=3, configured_quorum=kw.pop("quorum", None), connect_deadline_s=10.0, **kw)


def test_every_phase_transition_is_in_the_table_and_running_is_final():
    reached = {rs.PHASE_TRANSITIONS[key] for key in rs.PHASE_TRANSITIONS}
    assert reached == {Phase.CONNECTING, Phase.REGISTERING, Phase.RUNNING}
    assert not [key for key in rs.PHASE_TRANSITIONS if key[0] is Phase.RUNNING]


def test_a_member_is_loading_until_the_connect_quorum_then_orphan_after_the_timeout():
    member = core()
    assert member.connect_quorum() == 0  # no view yet: no peer known
    member.observe(0.0, view())
    assert member.connect_quorum() == 1, "a majority of 3 members counting ourselves"
    assert member.status(5.0) is Status.LOADING and member.status(10.0) is Status.ORPHAN
    assert "fewer than replication_connect_quorum = 1" in member.write_refusal(10.0)
    assert member.observe(11.0, view(frozenset({"a"}))) == [rs.QuorumReached(quorum=1)]
    assert member.status(11.0) is Status.RUNNING and member.write_refusal(11.0) is None
    assert member.observe(12.0, view()) == [] and member.status(12.0) is Status.RUNNING, "running is for good"


def test_a_configured_quorum_counts_peers_not_members():
    member = core(quorum=5)
    member.observe(0.0, view(frozenset({"a"})))
    assert member.connect_quorum() == 2 and member.phase is Phase.CONNECTING


def test_recovery_waits_for_every_peer_to_answer_or_to_fail_before_answering():
    member = core(recovering=True)
    assert member.observe(0.0, view(frozenset({"a"}))) == []
    assert member.status(0.0) is Status.ORPHAN and "recovering rows of its own origin" in member.write_refusal(0.0)
    actions = member.upstream_failed(1.0, "b")
    assert actions[0] == rs.RecoveryGaveUp(upstream="b")
    assert rs.RecoveryDone(not_answered=("b",)) in actions and rs.QuorumReached(quorum=1) in actions
    assert member.phase is Phase.RUNNING


def test_a_recovery_given_up_on_one_peer_before_any_view_does_not_finish():
    """Found by the trace check once one driver ran the simulator: a restarted member's
    link failed before its driver had shown the core the set, and the recovery finished
    without the other peer's answer, as if the member had no peer at all."""
    member = core(recovering=True)
    assert member.upstream_failed(1.0, "b") == [rs.RecoveryGaveUp(upstream="b")]
    assert member.phase is Phase.RECOVERING
    assert member.observe(1.1, view()) == [] and member.phase is Phase.RECOVERING, "a still has to answer"
    assert rs.RecoveryDone(not_answered=("b",)) in member.observe(1.2, view(frozenset({"a"})))


def test_a_peer_that_answered_and_then_failed_is_not_given_up_on():
    member = core(recovering=True)
    member.observe(0.0, view(frozenset({"a"})))
    assert member.upstream_failed(1.0, "a") == []
    assert member.phase is Phase.RECOVERING


def test_a_joiner_takes_writes_only_once_a_majority_including_itself_holds_its_registration():
    member = core(registration=rs.PendingRegistration(origin=2, lsn=7, barrier={}))
    member.observe(0.0, view(frozenset({"a"}), holders=frozenset({1, 2})))
    assert member.phase is Phase.REGISTERING, "we must hold our row too"
    assert "(instance 2, lsn 7) is known to be held by 2 of 3 members" in member.write_refusal(0.0)
    (held,) = member.observe(1.0, view(frozenset({"a"}), holders=frozenset({1, 3})))
    assert held == rs.RegistrationHeld(holders=(1, 3), members=3)
    assert member.registration is None and member.status(1.0) is Status.RUNNING
    member.check_invariants()


def test_a_joiner_takes_writes_only_once_it_holds_what_its_registration_voters_held():
    """MembershipQuorum R3: the barrier, as the driver finds it (`caught_up`)."""
    member = core(registration=rs.PendingRegistration(origin=2, lsn=7, barrier={1: 9, 2: 7}))
    member.observe(0.0, view(frozenset({"a"}), holders=frozenset({1, 2, 3}), caught_up=False))
    assert member.phase is Phase.REGISTERING
    assert "not caught up yet with the rows its registration's voters held ({1: 9, 2: 7})" in member.write_refusal(0.0)
    (held,) = member.observe(1.0, view(frozenset({"a"}), holders=frozenset({1, 2, 3})))
    assert held == rs.RegistrationHeld(holders=(1, 2, 3), members=3)
    member.check_invariants()


def test_ids_are_the_old_one_for_a_known_uuid_or_the_smallest_free_one():
    members = [(1, "u1"), (3, "u3")]
    assert rs.allocate_id(members, "u3") == (3, False)
    assert rs.allocate_id(members, "new") == (2, True)
    with pytest.raises(rs.MembersFull, match="31 members"):
        rs.allocate_id([(i, f"u{i}") for i in range(1, rs.MEMBERS_MAX + 1)], "new")


def test_the_id_of_a_removed_member_that_wrote_rows_is_never_given_again():
    members = [(1, "u1"), (3, "u3")]
    assert rs.allocate_id(members, "new", retired=[1, 2, 3]) == (4, True)
    assert rs.allocate_id(members, "u3", retired=[3]) == (3, False), "a re-join keeps its id"
    with pytest.raises(rs.MembersFull, match=r"ids \[2\] are retired"):
        rs.allocate_id([(i, f"u{i}") for i in range(1, rs.MEMBERS_MAX + 1) if i != 2], "new", retired=[2])


def test_only_an_unclean_stop_under_write_with_peers_must_recover():
    assert rs.must_recover(unclean=True, wal_mode_write=True, has_peers=True, force_recovery=False)
    for change in ("unclean", "wal_mode_write", "has_peers"):
        args = {"unclean": True, "wal_mode_write": True, "has_peers": True, "force_recovery": False, change: False}
        assert not rs.must_recover(**args)
    assert not rs.must_recover(unclean=True, wal_mode_write=True, has_peers=True, force_recovery=True)


@pytest.mark.parametrize("refusal", list(Refusal))
def test_only_a_split_brain_retry_is_final_unless_the_peer_just_does_not_know_us_yet(refusal):
    assert refusal.final is (refusal is not Refusal.NOT_REGISTERED)


def test_a_member_whose_rows_are_gone_everywhere_says_so_unless_rejoin_is_allowed():
    member = core()
    member.observe(0.0, view())
    member.upstream_refused(0.0, "a", Refusal.ROWS_UNAVAILABLE)
    assert member.check_rejoin(1.0, own_lsn=5, acked={}, rejoin_timeout_s=3) == [], "one peer may still have them"
    member.upstream_refused(0.0, "b", Refusal.ROWS_UNAVAILABLE)
    (needed,) = member.check_rejoin(1.0, own_lsn=5, acked={}, rejoin_timeout_s=3)
    assert isinstance(needed, rs.RejoinNeeded)
    assert member.check_rejoin(2.0, own_lsn=5, acked={}, rejoin_timeout_s=3) == [], "said once"


def test_a_rejoin_goes_through_a_member_holding_every_row_of_ours_or_is_refused_in_time():
    member = core(allow_rejoin=True)
    member.observe(0.0, view())
    for peer in PEERS:
        member.upstream_refused(0.0, peer, Refusal.ROWS_UNAVAILABLE)
    assert member.check_rejoin(1.0, own_lsn=5, acked={1: 4}, rejoin_timeout_s=3) == []
    assert member.check_rejoin(2.0, own_lsn=5, acked={1: 4, 2: 5}, rejoin_timeout_s=3) == [rs.Rejoin(through=2, own_lsn=5)]
    late = core(allow_rejoin=True)
    late.observe(0.0, view())
    for peer in PEERS:
        late.upstream_refused(0.0, peer, Refusal.ROWS_UNAVAILABLE)
    late.check_rejoin(1.0, own_lsn=5, acked={}, rejoin_timeout_s=3)
    (refused,) = late.check_rejoin(4.0, own_lsn=5, acked={1: 4}, rejoin_timeout_s=3)
    assert isinstance(refused, rs.RejoinRefused) and "up to lsn 5" in refused.reason


def removal(instance_id: int = 3, by: int = 1, lsn: int = 40) -> rs.Removal:
    return rs.Removal(instance_id=instance_id, uuid="u3", by=by, lsn=lsn, hlc=7 << 32)


def test_a_refusal_naming_our_removal_stops_the_member_once_and_a_plain_one_waits():
    """Issue 32: a member removed while it was down was refused as unknown for ever. A
    peer's refusal naming the removal of our id, by a row we do not hold, is final."""
    member = core()
    member.observe(0.0, view())
    assert member.upstream_refused(0.0, "a", Refusal.NOT_REGISTERED, vclock={1: 39}) == [], \
        "unknown for another reason (a joiner whose row has not arrived): it asks again"
    assert member.removal is None
    (removed,) = member.upstream_refused(0.1, "b", Refusal.NOT_REGISTERED, removal(), vclock={1: 39, 3: 8})
    assert removed == rs.Removed(removal=removal(), told_by="b")
    assert member.removal == removal()
    assert member.upstream_refused(0.2, "a", Refusal.NOT_REGISTERED, removal(), vclock={1: 39}) == [], "said once"
    member.check_invariants()


def test_a_removal_of_an_earlier_registration_is_not_ours():
    """Removed, then joined again under the same UUID: the re-join's checkpoint holds the
    removal's row (or our id changed), so a peer that has not applied the new registration
    yet is merely behind."""
    member = core()
    member.observe(0.0, view())
    assert member.upstream_refused(0.0, "a", Refusal.NOT_REGISTERED, removal(lsn=40), vclock={1: 40}) == []
    assert member.upstream_refused(0.0, "b", Refusal.NOT_REGISTERED, removal(instance_id=2), vclock={}) == []
    assert member.removal is None
    assert not rs.is_removal_of(removal(), 3, {1: 41}) and rs.is_removal_of(removal(), 3, {1: 39})


def test_applying_our_own_removal_stops_the_member():
    member = core()
    assert member.own_row_deleted(0.0, removal()) == [rs.Removed(removal=removal(), told_by=None)]
    assert member.own_row_deleted(0.1, removal()) == []
