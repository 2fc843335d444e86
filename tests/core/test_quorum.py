"""The quorum-transaction cores driven bare: a coordinator and participants, no I/O."""

from __future__ import annotations

import pytest

from replicaset.core import quorum as q
from replicaset.core.quorum import Decision, Level, Version
from replicaset.core.transitions import LocalProtocolError

FIVE = frozenset({1, 2, 3, 4, 5})
THREE = frozenset({1, 2, 3})
V0 = q.NO_VERSION
TXN = 0x70


def started(members: frozenset[int] = FIVE, level: Level = Level.QUORUM, reads=None, deadline_s: float = 10.0):
    coordinator = q.Coordinator(member=1)
    (prepare,) = coordinator.begin(0.0, TXN, reads or {"k": V0}, members, level, deadline_s)
    assert prepare == q.SendPrepare(txn_id=TXN, to=members - {1}, reads=reads or {"k": V0}, members=members)
    return coordinator


def vote(coordinator: q.Coordinator, *members: int) -> list[q.Action]:
    actions = [a for m in members for a in coordinator.prepared(1.0, TXN, m)]
    coordinator.check_invariants()
    return actions


def kinds(actions) -> list[type]:
    return [type(a) for a in actions]


def commit(coordinator: q.Coordinator, voters=(1, 2, 3), lsn: int = 4) -> list[q.Action]:
    (decide,) = vote(coordinator, *voters)
    assert isinstance(decide, q.DecideCommit)
    return coordinator.committed(1.5, TXN, 1, lsn)


# ---------------------------------------------------------------- coordinator


def test_the_level_is_counted_on_the_total_membership():
    assert [q.needed(Level.QUORUM, n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    assert q.needed(Level.ALL, 5) == 5 and q.needed(Level.ONE, 5) == 1


def test_three_of_five_commit_with_two_members_down():
    coordinator = started(reads={"k": Version(hlc=40, origin=2), "j": Version(hlc=55, origin=3)})
    assert vote(coordinator, 1, 2) == [], "2 of 5 registered is no quorum, whoever is alive"
    assert vote(coordinator, 3) == [q.DecideCommit(txn_id=TXN, min_stamp=55)], "the stamp goes above every version read"


def test_two_of_five_never_commit_and_the_deadline_aborts_them():
    coordinator = started()
    assert vote(coordinator, 1, 2, 2, 1) == []
    assert coordinator.tick(9.9) == []
    actions = coordinator.tick(10.0)
    assert kinds(actions) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    assert actions[1].to == FIVE - {1} and actions[3].error == q.Timeout()
    assert vote(coordinator, 3, 4, 5) == [], "a decided transaction is never decided again"


def test_partial_prepare_success_commits_under_quorum_and_aborts_under_all():
    quorum = started(THREE)
    assert quorum.conflict(1.0, TXN, 3, "k", 0x99) == []
    assert kinds(vote(quorum, 1, 2)) == [q.DecideCommit]
    every = started(THREE, Level.ALL)
    vote(every, 1, 2)
    actions = every.conflict(1.0, TXN, 3, "k", 0x99)
    assert kinds(actions) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    assert actions[1].to == {2}, "member 3 answered CONFLICT: it placed no intent"
    assert actions[3].error == q.Conflict(key="k", holder=0x99)


def test_conflicts_that_leave_the_level_out_of_reach_abort_at_once_naming_key_and_holder():
    coordinator = started()
    vote(coordinator, 1)
    assert coordinator.conflict(1.0, TXN, 2, "k", 0x99) == []
    assert coordinator.conflict(1.0, TXN, 3, "k", None) == [], "1 vote + 2 unanswered can still make 3"
    actions = coordinator.conflict(1.0, TXN, 4, "k", 0x98)
    assert q.FailClient(txn_id=TXN, error=q.Conflict(key="k", holder=0x99)) in actions
    assert q.SendAbort(txn_id=TXN, to=frozenset({5})) in actions
    assert coordinator.txns[TXN].state is q.TxnState.ABORTED


def test_after_a_commit_decision_the_deadline_and_late_answers_change_nothing():
    coordinator = started(THREE)
    commit(coordinator, (1, 2))
    assert coordinator.tick(100.0) == []
    assert coordinator.prepared(100.0, TXN, 3) == [] and coordinator.conflict(100.0, TXN, 3, "k", 9) == []
    assert coordinator.txns[TXN].decision is Decision.COMMIT


def test_a_question_before_a_decision_aborts_and_a_later_quorum_cannot_commit_it():
    coordinator = started()
    vote(coordinator, 1, 2)
    actions = coordinator.query_decision(5.0, TXN, asker=3)
    assert actions[-1] == q.SendDecision(txn_id=TXN, to=3, decision=Decision.ABORT)
    assert q.FailClient(txn_id=TXN, error=q.QuorumNotReached(answered=2, needed=3, total=5)) in actions
    assert vote(coordinator, 3, 4, 5) == []
    assert coordinator.query_decision(6.0, TXN, asker=4) == [q.SendDecision(txn_id=TXN, to=4, decision=Decision.ABORT)]


def test_a_question_is_answered_with_the_decision_once_the_row_is_written():
    coordinator = started(THREE)
    vote(coordinator, 1, 2)
    assert coordinator.query_decision(2.0, TXN, asker=3) == [], "the row is not written yet: no answer, no abort"
    coordinator.committed(2.0, TXN, 1, 4)
    assert coordinator.query_decision(3.0, TXN, asker=3) == [q.SendDecision(txn_id=TXN, to=3, decision=Decision.COMMIT)]


def test_a_question_about_a_transaction_never_begun_aborts_it_for_good():
    coordinator = q.Coordinator(member=1)
    actions = coordinator.query_decision(0.0, 0x55, asker=2)
    assert kinds(actions) == [q.DecideAbort, q.SendDecision] and actions[1].decision is Decision.ABORT
    with pytest.raises(LocalProtocolError, match="began already"):
        coordinator.begin(1.0, 0x55, {"k": V0}, THREE, Level.QUORUM, 5.0)


def test_a_restart_aborts_what_was_undecided_and_keeps_what_was_decided():
    coordinator = q.Coordinator(member=1)
    for txn in (1, 2, 3, 4):
        coordinator.begin(0.0, txn, {txn: V0}, THREE, Level.QUORUM, 10.0)
    coordinator.prepared(0.1, 2, 1)
    coordinator.prepared(0.1, 2, 2)
    coordinator.committed(0.2, 2, 1, 1)
    for txn in (3, 4):
        coordinator.prepared(0.1, txn, 1)
        coordinator.prepared(0.1, txn, 3)
    coordinator.committed(0.2, 4, 1, 2)
    coordinator.prepared(0.3, 1, 1)
    actions = coordinator.restart(rows_written={2: (1, 1), 4: (1, 2)})
    coordinator.check_invariants()
    assert {a.txn_id for a in actions if isinstance(a, q.DecideAbort)} == {1, 3}, (
        "3 was decided but its row never written: the decision never happened")
    assert not [a for a in actions if isinstance(a, q.FailClient)], "no client outlives the crash"
    assert [coordinator.txns[t].decision for t in (1, 2, 3, 4)] == [Decision.ABORT, Decision.COMMIT,
                                                                    Decision.ABORT, Decision.COMMIT]
    assert coordinator.prepared(1.0, 1, 2) == [] and coordinator.prepared(1.0, 1, 3) == []


def test_a_restart_finds_a_row_written_before_the_host_reported_it():
    coordinator = started(THREE)
    vote(coordinator, 1, 2)
    assert coordinator.restart(rows_written={TXN: (1, 9)}) == []
    assert coordinator.txns[TXN].lsn == 9 and coordinator.txns[TXN].decision is Decision.COMMIT


def test_an_abort_takes_no_lsn():
    coordinator = started(THREE)
    actions = coordinator.tick(10.0)
    assert not [a for a in actions if isinstance(a, (q.DecideCommit, q.SendCommit, q.AckClient))]
    with pytest.raises(LocalProtocolError, match="committed in state aborted"):
        coordinator.committed(11.0, TXN, 1, 5)
    assert coordinator.txns[TXN].lsn is None


def test_the_client_is_acknowledged_once_needed_members_hold_the_row():
    coordinator = started(FIVE)
    assert coordinator.acked(1.0, 4, {1: 4}) == [], "an acknowledgement before the row counts later"
    sends = commit(coordinator, (1, 2, 3), lsn=4)
    assert sends == [q.SendCommit(txn_id=TXN, to=frozenset({2, 3}), origin=1, lsn=4)]
    assert coordinator.acked(2.0, 2, {1: 3}) == [], "member 2 does not hold 1:4 yet"
    assert coordinator.acked(2.0, 1, {1: 4}) == [], "the coordinator's own durable row: 2 of 3"
    assert coordinator.acked(2.1, 2, {1: 4}) == [q.AckClient(txn_id=TXN, origin=1, lsn=4)]
    assert coordinator.acked(2.2, 3, {1: 4}) == [], "acknowledged once"
    assert coordinator.txns[TXN].state is q.TxnState.ACKED
    coordinator.check_invariants()


def test_an_answer_from_a_member_the_prepare_never_went_to_is_refused():
    coordinator = started(THREE)
    with pytest.raises(q.RemoteProtocolError, match="member 7"):
        coordinator.prepared(1.0, TXN, 7)
    assert coordinator.txns[TXN].votes == set()


# ---------------------------------------------------------------- participant


def participant(member: int = 2, timeout_s: float = 5.0) -> q.Participant:
    return q.Participant(member=member, timeout_s=timeout_s)


def prepare(p: q.Participant, txn: int = TXN, now_s: float = 0.0, reads=None, stored=None):
    result = p.prepare(now_s, txn, 1, THREE, reads or {"k": V0}, stored or {})
    p.check_invariants()
    return result


def test_a_prepare_sent_again_is_answered_again():
    p = participant()
    assert prepare(p) == q.Prepared(txn_id=TXN)
    assert prepare(p, stored={"k": Version(hlc=3, origin=3)}) == q.Prepared(txn_id=TXN), (
        "the intent is placed: a ONE write since does not turn the answer into CONFLICT")
    assert p.intents.holder("k") == TXN


def test_a_live_intent_of_another_transaction_conflicts_naming_key_and_holder():
    p = participant()
    prepare(p, txn=0x99, reads={"a": V0, "k": V0})
    assert prepare(p, reads={"b": V0, "k": V0}) == q.Conflicted(txn_id=TXN, key="k", holder=0x99)
    assert p.intents.holder("b") is None, "a conflict places no intent"


def test_a_stale_read_conflicts():
    p = participant()
    newer = Version(hlc=8, origin=3)
    assert prepare(p, reads={"k": Version(hlc=8, origin=2)}, stored={"k": newer}) == q.Conflicted(
        txn_id=TXN, key="k", holder=None)
    assert prepare(p, reads={"k": newer}, stored={"k": newer}) == q.Prepared(txn_id=TXN)


def test_an_aborted_transactions_intent_gives_way_and_its_late_prepare_places_nothing():
    p = participant()
    prepare(p, txn=0x99)
    p.abort(0x99)
    assert prepare(p) == q.Prepared(txn_id=TXN)
    other = participant()
    other.abort(TXN)
    assert prepare(other) is None and other.intents.holder("k") is None


def test_a_committed_transactions_intent_stays_until_its_row_is_applied():
    p = participant()
    prepare(p, txn=0x99)
    p.decision_learned(0x99, Decision.COMMIT)
    assert prepare(p) == q.Conflicted(txn_id=TXN, key="k", holder=0x99)
    p.row_applied(0x99)
    assert prepare(p) == q.Prepared(txn_id=TXN)


def test_a_participant_past_its_timeout_asks_and_never_aborts():
    p = participant()
    prepare(p)
    assert p.tick(4.9) == []
    assert p.tick(5.0) == [q.QueryDecision(txn_id=TXN, ask=frozenset({1, 3}))]
    assert p.tick(9.9) == [], "once per timeout"
    assert p.tick(10.0) == [q.QueryDecision(txn_id=TXN, ask=frozenset({1, 3}))]
    assert p.tick(1000.0) and p.intents.holder("k") == TXN, "still held: only a decision releases it"
    p.heartbeat(1000.0, TXN)
    assert p.tick(1004.0) == []
    p.decision_learned(TXN, Decision.ABORT)
    assert p.intents.holder("k") is None and p.tick(2000.0) == []
    p.check_invariants()


def test_a_participant_that_learned_commit_stops_asking_and_waits_for_the_row():
    p = participant()
    prepare(p)
    p.decision_learned(TXN, Decision.COMMIT)
    assert p.tick(100.0) == [] and p.intents.holder("k") == TXN
    p.row_applied(TXN)
    assert p.intents.holder("k") is None and not p.pending


def test_members_pass_on_a_decision_they_learned_and_never_make_one():
    p = participant()
    prepare(p)
    assert p.query_decision(1.0, TXN, asker=3) == []
    p.row_applied(TXN)
    assert p.query_decision(1.0, TXN, asker=3) == [q.SendDecision(txn_id=TXN, to=3, decision=Decision.COMMIT)]


def test_a_decision_contradicting_what_a_member_knows_is_refused():
    p = participant()
    prepare(p)
    p.row_applied(TXN)
    with pytest.raises(q.RemoteProtocolError, match="known commit, told abort"):
        p.decision_learned(TXN, Decision.ABORT)
    assert p.outcomes[TXN] is Decision.COMMIT


def test_a_restarted_participant_waits_a_full_timeout_before_asking():
    p = participant()
    prepare(p)
    p.tick(5.0)
    p.restart(6.0)
    assert p.tick(10.9) == [] and p.tick(11.0) != []
    assert p.intents.holder("k") == TXN, "intents are durable"


# ---------------------------------------------------------------- transition table


def test_every_state_has_a_row_and_every_event_is_a_method():
    table = q.TXN_TRANSITIONS
    assert set(table) == set(q.TxnState)
    events = {event for row in table.values() for event in row}
    assert all(callable(getattr(q.Transaction, event, None)) for event in events), events
    for state in (q.TxnState.COMMITTED, q.TxnState.ACKED, q.TxnState.ABORTED):
        reached = set().union(*table[state].values())
        assert q.TxnState.ABORTED not in reached or state is q.TxnState.ABORTED, "a decided transaction is never aborted"
