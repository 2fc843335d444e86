"""The quorum-transaction cores driven bare: a coordinator and participants, no I/O."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import partial

import pytest

from replicaset.core import quorum as q
from replicaset.core.hlc import pack_stamp
from replicaset.core.quorum import Decision, Level, Version, decides_alone
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
    assert actions[1].to == FIVE - {1} and actions[3].error == q.Timeout(answered=2, needed=3, total=5,
                                                                      unconfirmed=((3, q.Silence.NO_ANSWER), (4, q.Silence.NO_ANSWER), (5, q.Silence.NO_ANSWER)))
    assert vote(coordinator, 3, 4, 5) == [], "a decided transaction is never decided again"


def test_a_prepare_that_reached_nobody_goes_again_at_the_tick_only_while_undecided():
    coordinator = started()
    for member in (4, 5):
        assert coordinator.undelivered(0.1, TXN, member) == []
    coordinator.check_invariants()
    assert coordinator.tick(0.2) == [q.SendPrepare(txn_id=TXN, to=frozenset({4, 5}), reads={"k": V0}, members=FIVE)]
    assert coordinator.tick(0.3) == [], "sent once per failed delivery"
    coordinator.undelivered(0.4, TXN, 4)
    assert vote(coordinator, 2, 4) == []
    assert coordinator.tick(0.5) == [], "a member that answered is not asked again"
    coordinator.undelivered(0.6, TXN, 5)
    assert kinds(coordinator.tick(10.0)) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient], \
        "past the deadline the abort, not the PREPARE"
    coordinator.undelivered(10.1, TXN, 3)
    coordinator.check_invariants()
    assert coordinator.tick(10.2) == [], "never after the decision: it would follow the ABORT"


def test_an_abort_names_every_member_that_did_not_prepare_and_why():
    """Issue 32: an ALL write with two of three members stopped named one of them. The
    error lists each member without a PREPARED vote, and what the coordinator knows of it."""
    paused = started(THREE, Level.ALL)
    vote(paused, 1)
    assert paused.tick(10.0)[-1].error == q.Timeout(
        answered=1, needed=3, total=3, unconfirmed=((2, q.Silence.NO_ANSWER), (3, q.Silence.NO_ANSWER)))

    dead_first = started(THREE, Level.ALL)
    vote(dead_first, 1)
    error = dead_first.member_dead(1.0, 2)[-1].error
    assert error.unconfirmed == ((2, q.Silence.DEAD), (3, q.Silence.NO_ANSWER)), \
        "member 3, silent too, is named although SWIM has not held it dead yet"

    mixed = started(FIVE)
    vote(mixed, 1)
    assert mixed.conflict(0.5, TXN, 4, "k", None) == []
    mixed.undelivered(0.6, TXN, 3)
    assert mixed.member_dead(0.7, 2) == [], "1, 3 and 5 could still make three"
    assert mixed.tick(10.0)[-1].error.unconfirmed == (
        (2, q.Silence.DEAD), (3, q.Silence.NO_ANSWER), (4, q.Silence.REFUSED), (5, q.Silence.NO_ANSWER))


def test_a_commit_short_of_its_confirmations_names_the_members_not_holding_its_row():
    coordinator = started(THREE)
    commit(coordinator, (1, 2), lsn=4)
    assert coordinator.not_holding(TXN) == (1, 2, 3), "nobody said it holds the row yet"
    coordinator.acked(2.0, 1, {1: 4})
    coordinator.acked(2.0, 3, {1: 3})
    assert coordinator.not_holding(TXN) == (2, 3)
    assert coordinator.not_holding(0x71) == (), "a transaction never begun names nobody"


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


def test_members_swim_holds_dead_are_not_waited_for_once_the_level_is_out_of_reach():
    every = started(THREE, Level.ALL)
    vote(every, 1)
    actions = every.member_dead(1.0, 3)
    assert kinds(actions) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    assert actions[3].error == q.QuorumNotReached(answered=1, needed=3, total=3, dead=frozenset({3}),
                                                  unconfirmed=((2, q.Silence.NO_ANSWER), (3, q.Silence.DEAD)))

    quorum = started(THREE)
    vote(quorum, 1)
    assert quorum.member_dead(1.0, 3) == [], "members 1 and 2 can still make two of three"
    assert kinds(vote(quorum, 2)) == [q.DecideCommit]

    late = started(FIVE)
    vote(late, 1)
    assert late.member_dead(1.0, 4) == [] and late.member_dead(1.0, 5) == []
    assert kinds(vote(late, 5)) == [], "a member held dead that answers after all still votes"
    assert kinds(late.member_dead(1.0, 4)) == [], "four of five can still answer"
    assert kinds(late.member_dead(1.0, 3)) == [], "1, 2 and 5: three can still make it"
    assert kinds(vote(late, 2)) == [q.DecideCommit]
    late.check_invariants()


def test_no_prepare_goes_to_a_member_held_dead_and_the_transaction_hears_of_it_instead():
    """The coordinator decides whom a PREPARE reaches (it used to be the member driver's
    rewrite of the action): the members SWIM holds dead are skipped and counted dead."""
    reachable = started(FIVE)
    prepare = q.SendPrepare(txn_id=TXN, to=FIVE - {1}, reads={"k": V0}, members=FIVE)
    assert reachable.send_prepare(0.0, prepare, frozenset()) == [prepare]
    assert reachable.send_prepare(0.0, prepare, frozenset({4, 5})) == [
        q.SendPrepare(txn_id=TXN, to=frozenset({2, 3}), reads={"k": V0}, members=FIVE)], \
        "three of five can still answer: nothing decided"
    assert reachable.txns[TXN].dead == {4, 5}

    out_of_reach = started(THREE, Level.ALL)
    vote(out_of_reach, 1)
    actions = out_of_reach.send_prepare(0.0, q.SendPrepare(txn_id=TXN, to=frozenset({2, 3}), reads={"k": V0},
                                                           members=THREE), frozenset({3}))
    assert kinds(actions) == [q.SendPrepare, q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    assert actions[0].to == frozenset({2}), "the PREPARE still goes to the live member, before the abort"

    nobody = started(THREE)
    everyone_dead = nobody.send_prepare(0.0, q.SendPrepare(txn_id=TXN, to=frozenset({2, 3}), reads={"k": V0},
                                                           members=THREE), frozenset({2, 3}))
    assert kinds(everyone_dead) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    nobody.check_invariants()


def test_a_member_held_dead_counts_with_the_conflicts_already_received():
    """Two CONFLICTs left the level reachable only with every other member; one of those
    held DEAD puts it out of reach: the client hears "quorum not reached" now, not a
    timeout at its deadline."""
    coordinator = started(FIVE)
    vote(coordinator, 1)
    assert coordinator.conflict(1.0, TXN, 2, "k", 0x99) == []
    assert coordinator.conflict(1.0, TXN, 3, "k", 0x99) == [], "1 vote and 4, 5 unanswered can still make 3"
    actions = coordinator.member_dead(2.0, 4)
    assert kinds(actions) == [q.DecideAbort, q.SendAbort, q.ReleaseIntents, q.FailClient]
    assert actions[3].error == q.QuorumNotReached(
        answered=1, needed=3, total=5, dead=frozenset({4}),
        unconfirmed=((2, q.Silence.REFUSED), (3, q.Silence.REFUSED), (4, q.Silence.DEAD), (5, q.Silence.NO_ANSWER)))
    assert actions[1].to == {4, 5}, "the members that answered CONFLICT placed no intent"
    assert coordinator.tick(10.0) == [], "the client was answered once, before its deadline"
    coordinator.check_invariants()


def test_a_member_answering_twice_is_one_vote():
    """A PREPARE sent again is answered again (`undelivered`, a lost answer): an ALL
    transaction on three members does not commit on two members' answers, however many."""
    every = started(THREE, Level.ALL)
    every.undelivered(0.1, TXN, 2)
    assert every.tick(0.2) == [q.SendPrepare(txn_id=TXN, to=frozenset({2}), reads={"k": V0}, members=THREE)]
    assert vote(every, 1, 2, 2, 1, 2) == [], "two members of three, each counted once"
    assert every.txns[TXN].state is q.TxnState.PREPARING
    assert vote(every, 3) == [q.DecideCommit(txn_id=TXN, min_stamp=0)], "the third member's answer decides"
    assert every.txns[TXN].decided_with == THREE


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
    assert q.FailClient(txn_id=TXN, error=q.QuorumNotReached(answered=2, needed=3, total=5,
                                                               unconfirmed=((3, q.Silence.NO_ANSWER), (4, q.Silence.NO_ANSWER), (5, q.Silence.NO_ANSWER)))) in actions
    assert vote(coordinator, 3, 4, 5) == []
    assert coordinator.query_decision(6.0, TXN, asker=4) == [q.SendDecision(txn_id=TXN, to=4, decision=Decision.ABORT)]


def test_a_question_is_answered_with_the_decision_once_the_row_is_written():
    coordinator = started(THREE)
    vote(coordinator, 1, 2)
    assert coordinator.query_decision(2.0, TXN, asker=3) == [], "the row is not written yet: no answer, no abort"
    coordinator.committed(2.0, TXN, 1, 4)
    assert coordinator.query_decision(2.5, TXN, asker=3) == [], "an OS crash could still take the row: no answer"
    coordinator.acked(2.6, 1, {1: 4})
    assert coordinator.query_decision(3.0, TXN, asker=3) == [q.SendDecision(txn_id=TXN, to=3, decision=Decision.COMMIT)]


def test_a_question_about_a_transaction_it_does_not_remember_is_answered_by_its_row():
    """Never begun, lost with its record in a crash before its row, or collected: the row
    decides, and nothing is remembered of the question (no entry a collection would miss)."""
    coordinator = q.Coordinator(member=1)
    assert coordinator.query_decision(0.0, 0x55, 2) == [q.SendDecision(txn_id=0x55, to=2, decision=Decision.ABORT)]
    assert coordinator.query_decision(0.0, 0x56, 2, q.RowHere.WRITTEN) == [], "an OS crash could still take the row"
    assert coordinator.query_decision(0.0, 0x56, 2, q.RowHere.DURABLE) == [
        q.SendDecision(txn_id=0x56, to=2, decision=Decision.COMMIT)]
    assert coordinator.txns == {}


def stamp_at(ms: int) -> int:
    return pack_stamp(ms, 1, 0)


def test_a_decided_record_is_collected_once_old_enough_and_applied_everywhere_or_too_old():
    old, older, oldest, young = stamp_at(10_000), stamp_at(5_000), stamp_at(1_000), stamp_at(19_500)
    records = [q.DecidedRecord(old, (1, 7)), q.DecidedRecord(older, None), q.DecidedRecord(oldest, (2, 3)),
               q.DecidedRecord(young, None)]
    applied = {1: {1: 7, 2: 2}, 2: {1: 7, 2: 3}, 3: {1: 6, 2: 2}}
    collect = partial(q.collectable, records, now_ms=20_000, members=THREE, min_retention_ms=2_000,
                      max_retention_ms=18_000)
    assert collect(applied=applied) == [older, oldest], "member 3 lacks 1:7; 2:3 is past the maximum; an abort goes"
    applied[3][1] = 7
    assert collect(applied=applied) == [old, older, oldest]
    assert q.collectable(records, now_ms=20_000, members=THREE, applied=applied, min_retention_ms=20_000,
                         max_retention_ms=30_000) == [], "nothing is older than the minimum"


def test_collected_transactions_leave_both_cores_and_a_late_prepare_of_an_applied_row_gets_no_answer():
    coordinator = started(THREE)
    commit(coordinator)
    coordinator.begin(0.0, 0x99, {"k": V0}, THREE, Level.QUORUM, 10.0)
    coordinator.forget([TXN, 0x99])
    assert set(coordinator.txns) == {0x99}, "an undecided transaction is never forgotten"
    coordinator.check_invariants()
    participant = q.Participant(member=2, timeout_s=1.0)
    assert isinstance(participant.prepare(0.0, TXN, 1, THREE, {"k": V0}, {}, view=THREE), q.Prepared)
    participant.row_applied(TXN)
    participant.forget([TXN])
    assert participant.outcomes == {}
    assert participant.prepare(1.0, TXN, 1, THREE, {"k": V0}, {}, view=THREE, row_applied=True) is None
    assert participant.intents.holder("k") is None
    participant.check_invariants()


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
    assert commit(coordinator, (1, 2, 3), lsn=4) == [], "COMMIT waits until an OS crash cannot take the row here"
    assert coordinator.acked(2.0, 2, {1: 3}) == [], "member 2 does not hold 1:4 yet"
    assert coordinator.acked(2.0, 1, {1: 4}) == [q.SendCommit(txn_id=TXN, to=frozenset({2, 3}), origin=1, lsn=4)], \
        "the coordinator's own durable row: COMMIT leaves, and 2 of 3 hold it"
    assert coordinator.acked(2.1, 2, {1: 4}) == [q.AckClient(txn_id=TXN, origin=1, lsn=4)]
    assert coordinator.acked(2.2, 3, {1: 4}) == [], "acknowledged once"
    assert coordinator.txns[TXN].state is q.TxnState.ACKED
    coordinator.check_invariants()


def test_only_the_transactions_members_count_toward_its_acknowledgement():
    """A joiner registered after the transaction began acknowledges through its relay like
    any subscriber: its copy of the row does not stand for a member's. An ALL write on
    {1, 2, 3} waits for member 3 whatever member 4 holds."""
    coordinator = started(THREE, Level.ALL)
    commit(coordinator, (1, 2, 3), lsn=4)
    coordinator.acked(2.0, 1, {1: 4})
    assert coordinator.acked(2.1, 4, {1: 4}) == [], "member 4 is not a member of the transaction"
    assert coordinator.acked(2.2, 2, {1: 4}) == [], "1, 2 and a joiner: three holders, two of them members"
    assert coordinator.txns[TXN].state is q.TxnState.COMMITTED
    assert coordinator.acked(2.3, 3, {1: 4}) == [q.AckClient(txn_id=TXN, origin=1, lsn=4)]
    coordinator.check_invariants()


def test_finished_transactions_are_kept_for_questions_but_no_longer_walked():
    """Every decision stays answerable; ticks and acknowledgements walk only the open ones,
    so a long-lived coordinator does not slow down with the transactions it finished."""
    coordinator = q.Coordinator(member=1)
    for lsn, txn_id in enumerate(range(0x100, 0x140), start=1):
        coordinator.begin(0.0, txn_id, {"k": V0}, THREE, Level.QUORUM, 10.0)
        coordinator.prepared(0.1, txn_id, 1)
        coordinator.prepared(0.1, txn_id, 2)
        coordinator.committed(0.2, txn_id, 1, lsn)
    coordinator.begin(0.0, 0x200, {"k": V0}, THREE, Level.QUORUM, 1.0)
    assert [t.txn_id for t in coordinator.undecided()] == [0x200]
    assert kinds(coordinator.acked(0.3, 1, {1: 0x40})) == [q.SendCommit] * 0x40, "durable here: COMMITs leave, 1 of 2"
    assert len(coordinator.acked(0.3, 2, {1: 0x40})) == 0x40, "each committed transaction acknowledged once"
    assert q.DecideAbort in kinds(coordinator.tick(2.0)), "the open one reached its deadline"
    assert coordinator.undecided() == [] and coordinator._open == {}
    assert coordinator.query_decision(3.0, 0x120, 2) == [q.SendDecision(txn_id=0x120, to=2, decision=Decision.COMMIT)]
    coordinator.check_invariants()


def test_an_answer_from_a_member_the_prepare_never_went_to_is_refused():
    coordinator = started(THREE)
    with pytest.raises(q.RemoteProtocolError, match="member 7"):
        coordinator.prepared(1.0, TXN, 7)
    assert coordinator.txns[TXN].votes == set()


def test_a_vote_from_outside_the_transactions_members_is_refused_and_not_counted():
    """A joiner registered after the transaction began may answer a PREPARE it was never
    sent (a copy, a confused peer): neither its PREPARED nor its CONFLICT is a member's."""
    every = started(THREE, Level.ALL)
    vote(every, 1, 2)
    with pytest.raises(q.RemoteProtocolError, match="member 4"):
        every.prepared(1.0, TXN, 4)
    with pytest.raises(q.RemoteProtocolError, match="member 4"):
        every.conflict(1.0, TXN, 4, "k", 0x99)
    assert every.txns[TXN].votes == {1, 2} and every.txns[TXN].conflicts == {}
    assert every.txns[TXN].state is q.TxnState.PREPARING, "two of three members: no ALL yet"
    assert kinds(vote(every, 3)) == [q.DecideCommit]



# ---------------------------------------------------------------- participant


def participant(member: int = 2, timeout_s: float = 5.0) -> q.Participant:
    return q.Participant(member=member, timeout_s=timeout_s)


def prepare(p: q.Participant, txn: int = TXN, now_s: float = 0.0, reads=None, stored=None, coordinator: int = 1):
    result = p.prepare(now_s, txn, coordinator, THREE, reads or {"k": V0}, stored or {}, view=THREE)
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
    prepare(p, txn=0x99, reads={"a": V0, "k": V0}, coordinator=3)
    assert prepare(p, reads={"b": V0, "k": V0}) == q.Conflicted(txn_id=TXN, key="k", holder=0x99, holder_member=3), (
        "the holder is named with the member coordinating it")
    assert p.intents.holder("b") is None, "a conflict places no intent"


def test_a_stale_read_conflicts():
    p = participant()
    newer = Version(hlc=8, origin=3)
    assert prepare(p, reads={"k": Version(hlc=8, origin=2)}, stored={"k": newer}) == q.Conflicted(
        txn_id=TXN, key="k", holder=None)
    assert prepare(p, reads={"k": newer}, stored={"k": newer}) == q.Prepared(txn_id=TXN)


def test_a_read_newer_than_the_stored_version_conflicts_too():
    """The version stored must be the one read (spec Prepare: `stored = read`), not merely
    no newer: a member that has not applied the version read yet, or lost it, does not
    vouch for that read; it answers CONFLICT and places no intent."""
    p = participant()
    read = Version(hlc=8, origin=2)
    assert prepare(p, reads={"k": read}, stored={"k": Version(hlc=5, origin=2)}) == q.Conflicted(
        txn_id=TXN, key="k", holder=None)
    assert prepare(p, reads={"k": read}, stored={}) == q.Conflicted(txn_id=TXN, key="k", holder=None), (
        "a key this member holds no version of")
    assert prepare(p, reads={"k": read}, stored={"k": Version(hlc=8, origin=1)}) == q.Conflicted(
        txn_id=TXN, key="k", holder=None), "same stamp, lower origin: still another version"
    assert p.intents.holder("k") is None and not p.pending
    assert prepare(p, reads={"k": read}, stored={"k": read}) == q.Prepared(txn_id=TXN)


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
    assert prepare(p) == q.Conflicted(txn_id=TXN, key="k", holder=0x99, holder_member=1)
    p.row_applied(0x99)
    assert prepare(p) == q.Prepared(txn_id=TXN)


CHANGE = {(q.CLUSTER_TABLE, f"{q.CLUSTER_TABLE}:4"): V0}  # a registration: the row of new member 4
FOUR = frozenset({1, 2, 3, 4})


def test_a_participant_votes_only_for_transactions_counted_on_its_own_view():
    """MembershipQuorum R1: a quorum of {1, 2, 3} and one of {1, 2, 3, 4, 5} need not meet."""
    p = participant()
    assert p.prepare(0.0, TXN, 1, FOUR, {"k": V0}, {}, view=THREE) == q.Conflicted(
        txn_id=TXN, key=q.MEMBERSHIP_KEY, holder=None)
    assert p.prepare(0.0, TXN, 1, THREE, {"k": V0}, {}, view=FOUR) == q.Conflicted(
        txn_id=TXN, key=q.MEMBERSHIP_KEY, holder=None), "nor for one counted on an older view"
    assert p.intents.holder("k") is None and not p.pending
    assert p.prepare(0.0, TXN, 1, FOUR, {"k": V0}, {}, view=FOUR) == q.Prepared(txn_id=TXN)
    assert p.prepare(1.0, TXN, 1, FOUR, {"k": V0}, {}, view=frozenset(range(1, 6))) == q.Prepared(txn_id=TXN), (
        "a PREPARE sent again after the view moved is answered as before: the intent is placed")


def test_a_membership_change_waits_until_no_transaction_of_an_older_view_is_pending_here():
    """MembershipQuorum R2: a transaction prepared on {1, 2, 3} must be finished here before
    this member votes for the change after {1, 2, 3, 4}; one of the current view may stay."""
    p = participant()
    assert isinstance(p.prepare(0.0, 0x99, 3, THREE, {"k": V0}, {}, view=THREE), q.Prepared)
    assert isinstance(p.prepare(0.0, 0x98, 3, FOUR, {"j": V0}, {}, view=FOUR), q.Prepared)
    change = {(q.CLUSTER_TABLE, f"{q.CLUSTER_TABLE}:5"): V0}
    assert p.prepare(1.0, TXN, 1, FOUR, change, {}, view=FOUR, held={1: 9}) == q.Conflicted(
        txn_id=TXN, key=q.MEMBERSHIP_KEY, holder=0x99, holder_member=3)
    assert isinstance(p.prepare(1.0, 0x97, 1, FOUR, {"m": V0}, {}, view=FOUR), q.Prepared), (
        "an ordinary transaction of the current view is not held back")
    p.row_applied(0x99)
    assert p.prepare(2.0, TXN, 1, FOUR, change, {}, view=FOUR, held={1: 9}) == q.Prepared(txn_id=TXN, held={1: 9}), (
        "the vote carries what the voter holds (R3)")
    p.check_invariants()


def test_a_joiner_votes_for_nothing_until_it_has_caught_up():
    """MembershipQuorum R3: `active` is false until the joiner holds its barrier."""
    p = participant(member=4)
    assert p.prepare(0.0, TXN, 1, FOUR, {"k": V0}, {}, view=FOUR, active=False) == q.Conflicted(
        txn_id=TXN, key=q.MEMBERSHIP_KEY, holder=None)
    assert p.prepare(1.0, TXN, 1, FOUR, {"k": V0}, {}, view=FOUR) == q.Prepared(txn_id=TXN), (
        "an ordinary vote carries nothing")


def test_a_membership_change_acknowledges_its_client_with_what_its_voters_held():
    coordinator = q.Coordinator(member=1)
    coordinator.begin(0.0, TXN, CHANGE, THREE, Level.QUORUM, 10.0)
    assert coordinator.prepared(0.5, TXN, 1, {1: 7, 2: 3}) == []
    (decide,) = coordinator.prepared(0.6, TXN, 2, {1: 6, 2: 5, 3: 2})
    assert isinstance(decide, q.DecideCommit)
    assert coordinator.prepared(0.7, TXN, 3, {3: 99}) == [], "a vote after the decision adds nothing"
    coordinator.committed(1.0, TXN, 1, 8)
    coordinator.acked(1.1, 1, {1: 8})
    assert coordinator.acked(1.2, 2, {1: 8}) == [q.AckClient(txn_id=TXN, origin=1, lsn=8, barrier={1: 7, 2: 5, 3: 2})]
    coordinator.check_invariants()


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


def test_a_prepare_sent_again_counts_as_word_from_the_coordinator():
    """The coordinator sends PREPARE again to a member it could not reach: it is alive and
    undecided. A question now would make it abort (spec QueryDecision), so the participant
    waits a full timeout from the PREPARE sent again."""
    p = participant(timeout_s=5.0)
    prepare(p, now_s=0.0)
    assert prepare(p, now_s=4.0) == q.Prepared(txn_id=TXN)
    assert p.tick(5.0) == [] and p.tick(8.875) == [], "heard at 4.0: not before 9.0"
    assert p.tick(9.0) == [q.QueryDecision(txn_id=TXN, ask=frozenset({1, 3}))]


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
    p.restart(6.0, THREE)
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


# ---------------------------------------------------------------- randomized


@dataclass(frozen=True)
class Row:
    origin: int
    lsn: int
    hlc: int
    key: str
    txn: int | None  # None: a ONE write


@dataclass(frozen=True)
class Begun:
    coordinator: int
    key: str
    read: Version


class Cluster:
    """Members whose hosts carry out the cores' actions over a network that reorders and
    drops messages, with crashes; every safety invariant of the spec is checked after
    each step."""

    KEYS = ("a", "b", "c")

    def __init__(self, rng: random.Random, size: int) -> None:
        self.rng, self.now = rng, 0.0
        self.members = frozenset(range(1, size + 1))
        self.coordinators = {m: q.Coordinator(member=m) for m in self.members}
        self.participants = {m: q.Participant(member=m, timeout_s=3.0) for m in self.members}
        self.up = {m: True for m in self.members}
        self.rows: dict[int, list[Row]] = {m: [] for m in self.members}
        self.vclock = {m: dict.fromkeys(self.members, 0) for m in self.members}
        self.stored: dict[int, dict[str, Version]] = {m: {} for m in self.members}
        self.hlc = dict.fromkeys(self.members, 0)
        self.writes: dict[int, list[q.DecideCommit]] = {m: [] for m in self.members}
        self.net: list[tuple[int, tuple]] = []
        self.begun: dict[int, Begun] = {}
        self.client: dict[int, str] = {}

    # the host's side of each action
    def carry(self, m: int, actions: list[q.Action]) -> None:
        for a in actions:
            if isinstance(a, q.SendPrepare):
                self.net += [(p, ("prepare", a.txn_id, m, a.members, a.reads)) for p in a.to]
            elif isinstance(a, q.DecideCommit):
                self.writes[m].append(a)
            elif isinstance(a, q.SendCommit):
                self.net += [(p, ("commit", a.origin, a.lsn)) for p in a.to]
            elif isinstance(a, q.SendAbort):
                self.net += [(p, ("abort", a.txn_id)) for p in a.to]
            elif isinstance(a, q.ReleaseIntents):
                self.participants[m].abort(a.txn_id)
            elif isinstance(a, q.SendDecision):
                self.net.append((a.to, ("decision", a.txn_id, a.decision)))
            elif isinstance(a, q.QueryDecision):
                self.net += [(p, ("query", a.txn_id, m)) for p in a.ask]
            elif isinstance(a, (q.AckClient, q.FailClient)):
                assert a.txn_id not in self.client, "the client is answered once"
                self.client[a.txn_id] = "ack" if isinstance(a, q.AckClient) else "fail"

    def vote(self, m: int, coordinator: int, answer: q.Prepared | q.Conflicted | None) -> None:
        if isinstance(answer, q.Prepared):
            message = ("prepared", answer.txn_id, m)
        elif isinstance(answer, q.Conflicted):
            message = ("conflict", answer.txn_id, m, answer.key, answer.holder)
        else:
            return
        if coordinator == m:
            self.deliver(m, message)
        else:
            self.net.append((coordinator, message))

    def deliver(self, p: int, message: tuple) -> None:
        kind, txn, *rest = message
        coordinator, participant = self.coordinators[p], self.participants[p]
        if kind == "prepare":
            c, members, reads = rest
            self.vote(p, c, participant.prepare(self.now, txn, c, members, reads, self.stored[p], view=members))
        elif kind == "prepared":
            self.carry(p, coordinator.prepared(self.now, txn, rest[0]))
        elif kind == "conflict":
            self.carry(p, coordinator.conflict(self.now, txn, *rest))
        elif kind == "commit":
            self.catch_up(p, txn, rest[0])
        elif kind == "abort":
            participant.abort(txn)
        elif kind == "decision":
            participant.decision_learned(txn, rest[0])
        elif kind == "query":
            asked = coordinator if self.begun[txn].coordinator == p else participant
            self.carry(p, asked.query_decision(self.now, txn, rest[0]))
        elif kind == "ack":
            self.carry(p, coordinator.acked(self.now, rest[0], rest[1]))

    def apply(self, m: int, row: Row) -> None:
        version = Version(hlc=row.hlc, origin=row.origin)
        if version >= self.stored[m].get(row.key, q.NO_VERSION):
            self.stored[m][row.key] = version
        self.hlc[m] = max(self.hlc[m], row.hlc)
        self.vclock[m][row.origin] = row.lsn
        if row.txn is not None:
            self.participants[m].row_applied(row.txn)

    def catch_up(self, m: int, origin: int, lsn: int) -> None:
        """COMMIT or a relay: rows of `origin` up to `lsn`, each once, in LSN order."""
        if self.vclock[m][origin] >= lsn:
            return
        for row in self.rows[origin][self.vclock[m][origin]:lsn]:
            self.apply(m, row)
        self.net.append((origin, ("ack", None, m, dict(self.vclock[m]))))

    def append(self, m: int, hlc: int, key: str, txn: int | None) -> Row:
        row = Row(origin=m, lsn=len(self.rows[m]) + 1, hlc=hlc, key=key, txn=txn)
        self.rows[m].append(row)
        self.apply(m, row)
        return row

    # the steps
    def begin(self, c: int, level: Level | None = None, timeout_s: float | None = None) -> int:
        txn, key = len(self.begun) + 1, self.rng.choice(self.KEYS)
        read = self.stored[c].get(key, q.NO_VERSION)
        self.begun[txn] = Begun(coordinator=c, key=key, read=read)
        level = level or self.rng.choice((Level.QUORUM, Level.QUORUM, Level.ALL))
        deadline_s = self.now + (timeout_s or self.rng.uniform(2.0, 12.0))
        self.carry(c, self.coordinators[c].begin(self.now, txn, {key: read}, self.members, level, deadline_s))
        self.vote(c, c, self.participants[c].prepare(self.now, txn, c, self.members, {key: read}, self.stored[c],
                                                           view=self.members))
        return txn

    def write_row(self, c: int) -> Row:
        decide = self.writes[c].pop(0)
        return self.append(c, max(self.hlc[c], decide.min_stamp) + 1, self.begun[decide.txn_id].key, decide.txn_id)

    def write(self, c: int) -> None:
        row = self.write_row(c)
        self.carry(c, self.coordinators[c].committed(self.now, row.txn, c, row.lsn))
        self.carry(c, self.coordinators[c].acked(self.now, c, dict(self.vclock[c])))

    def crash(self, m: int) -> None:
        """Sometimes after the host wrote a row and before it told the coordinator."""
        if self.writes[m] and self.rng.random() < 0.5:
            self.write_row(m)
        self.up[m] = False
        self.writes[m].clear()

    def restart(self, m: int) -> None:
        self.up[m] = True
        written = {row.txn: (m, row.lsn) for row in self.rows[m] if row.txn is not None}
        self.carry(m, self.coordinators[m].restart(written))
        self.participants[m].restart(self.now, self.members)

    def step(self, *, faults: bool) -> None:
        rng = self.rng
        self.now += rng.uniform(0.0, 0.5)
        up = sorted(m for m in self.members if self.up[m])
        choice = rng.random()
        if self.net and choice < 0.5:
            to, message = self.net.pop(rng.randrange(len(self.net)))
            if self.up[to] and not (faults and rng.random() < 0.1):
                self.deliver(to, message)
        elif choice < 0.55 and len(self.begun) < 40 and up:
            self.begin(rng.choice(up))
        elif choice < 0.57 and up:
            m, key = rng.choice(up), rng.choice(self.KEYS)
            self.append(m, self.hlc[m] + 1, key, None)
        elif choice < 0.67 and (writing := [m for m in up if self.writes[m]]):
            self.write(rng.choice(writing))
        elif choice < 0.8 and up:
            m, origin = rng.choice(up), rng.choice(sorted(self.members))
            if origin != m:
                self.catch_up(m, origin, len(self.rows[origin]))
        elif choice < 0.9 and up:
            m = rng.choice(up)
            self.carry(m, self.coordinators[m].tick(self.now))
            self.carry(m, self.participants[m].tick(self.now))
        elif faults and choice < 0.92 and len(up) > 1:
            self.crash(rng.choice(up))
        elif down := sorted(m for m in self.members if not self.up[m]):
            self.restart(rng.choice(down))

    def decision(self, txn: int) -> Decision | None:
        return self.coordinators[self.begun[txn].coordinator].txns[txn].decision

    def check(self) -> None:
        for m in self.members:
            self.coordinators[m].check_invariants()
            self.participants[m].check_invariants()
        applied = {row.txn: row for o in self.members for row in self.rows[o][:max(self.vclock[m][o] for m in self.members)]
                   if row.txn is not None}
        for txn, begun in self.begun.items():
            t = self.coordinators[begun.coordinator].txns[txn]
            outcomes = {self.participants[m].outcomes.get(txn) for m in self.members}
            committed = t.decision is Decision.COMMIT or txn in applied or Decision.COMMIT in outcomes
            aborted = t.decision is Decision.ABORT or Decision.ABORT in outcomes
            assert not (committed and aborted), f"NoSplitDecision: transaction {txn}"
            if t.decision is Decision.COMMIT:
                assert len(t.decided_with) >= q.needed(t.level, len(self.members)), "QuorumOnTotal"
            assert self.client.get(txn) != "ack" or t.decision is Decision.COMMIT
            assert self.client.get(txn) != "fail" or t.decision is Decision.ABORT
        commits = {}
        for o in self.members:
            for index, row in enumerate(self.rows[o]):
                assert row.lsn == index + 1 and (index == 0 or self.rows[o][index - 1].hlc < row.hlc)
                if row.txn is not None:
                    txn = self.coordinators[o].txns[row.txn]
                    unreported = not self.up[o] and txn.state is q.TxnState.COMMITTING
                    assert txn.decision is Decision.COMMIT or unreported, "AbortsTakeNoLsn"
                    commits[row.txn] = Version(hlc=row.hlc, origin=row.origin)
        for t1, t2 in itertools.combinations(commits, 2):
            if self.begun[t1].key == self.begun[t2].key:
                assert self.begun[t1].read >= commits[t2] or self.begun[t2].read >= commits[t1], "NoLostUpdate"

    def settle(self) -> None:
        """Heal: everyone up, no loss, time moving; every transaction ends and every intent goes."""
        for _ in range(30):
            self.now += 3.0
            for m in sorted(self.members):
                if not self.up[m]:
                    self.restart(m)
                while self.writes[m]:
                    self.write(m)
                self.carry(m, self.coordinators[m].tick(self.now))
                self.carry(m, self.participants[m].tick(self.now))
            while self.net:
                to, message = self.net.pop(0)
                self.deliver(to, message)
            for m, origin in itertools.permutations(sorted(self.members), 2):
                self.catch_up(m, origin, len(self.rows[origin]))
            while self.net:
                to, message = self.net.pop(0)
                self.deliver(to, message)
            self.check()


@pytest.mark.parametrize("seed", range(40))
def test_random_orders_drops_and_crashes_keep_the_specs_safety_invariants(seed):
    rng = random.Random(seed)
    cluster = Cluster(rng, size=rng.choice((3, 4, 5)))
    for _ in range(600):
        cluster.step(faults=True)
        cluster.check()
    cluster.settle()
    assert all(cluster.decision(txn) is not None for txn in cluster.begun), f"seed {seed}: undecided"
    assert not any(p.intents.holders for p in cluster.participants.values()), f"seed {seed}: intents left"
    healed = cluster.begin(min(cluster.members), Level.ALL, timeout_s=1000.0)
    cluster.settle()
    assert cluster.decision(healed) is Decision.COMMIT and cluster.client[healed] == "ack", f"seed {seed}"


@pytest.mark.parametrize(("level", "members", "in_flight", "alone"), [
    (Level.QUORUM, frozenset({1}), False, True),
    (Level.ALL, frozenset({1}), False, True),
    (Level.ONE, frozenset({1}), False, False),  # ONE never waits for anyone anyway
    (Level.QUORUM, frozenset({1}), True, False),  # an intent here could refuse it
    (Level.QUORUM, frozenset({1, 2}), False, False),
    (Level.QUORUM, frozenset({2}), False, False),  # removed: not a member of the set it writes to
])
def test_a_member_decides_alone_only_as_the_whole_set_with_nothing_in_flight(
        level: Level, members: frozenset[int], in_flight: bool, alone: bool) -> None:
    assert decides_alone(level, members, 1, in_flight=in_flight) is alone
