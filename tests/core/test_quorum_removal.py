"""A removed coordinator's pending transactions (`specs/QuorumRemoval.tla`,
docs/design/quorum-removal.md): resolved by asking every member of the view for the row.
Each wrong variant TLC refutes has a test here that the participant core does not do it."""

from __future__ import annotations

import pytest

from replicaset.core import quorum as q
from replicaset.core.quorum import Decision, RowHere, Version

FOUR = frozenset({1, 2, 3, 4})
AFTER = frozenset({1, 3, 4})  # member 2 removed
REMOVED = 2
TXN = 0x70
V0 = Version(hlc=0, origin=0)


def prepared(member: int = 3, view: frozenset[int] = FOUR) -> q.Participant:
    """Member `member`, running since before the removal, holds member 2's transaction."""
    p = q.Participant(member=member, timeout_s=5.0)
    p.restart(0.0, view)
    assert isinstance(p.prepare(0.0, TXN, REMOVED, FOUR, {"k": V0}, {}, view=FOUR), q.Prepared)
    p.check_invariants()
    return p


def asked(actions: list[q.Action]) -> frozenset[int]:
    (query,) = [a for a in actions if isinstance(a, q.QueryRow)]
    assert query.txn_id == TXN and query.coordinator == REMOVED
    return query.ask


def test_once_it_stopped_following_the_coordinator_a_participant_asks_every_other_member_of_its_view():
    p = prepared()
    assert p.tick(1.0) == [], "the coordinator still has its timeout"
    p.stop_following(1.0, REMOVED, AFTER)
    p.check_invariants()
    assert asked(p.tick(1.0)) == {1, 4}, "at once, not a timeout later, and not the removed member"
    assert p.tick(2.0) == [], "then once per timeout"
    assert asked(p.tick(6.0)) == {1, 4}
    assert p.intents.holder("k") == TXN, "asking aborts nothing (QuorumRemoval_AbortOnRemoval)"


def test_every_member_of_the_view_must_say_no_row_before_the_participant_aborts():
    p = prepared()
    p.stop_following(1.0, REMOVED, AFTER)
    p.tick(1.0)
    assert p.no_row(1.5, TXN, 4, AFTER) == []
    assert p.intents.holder("k") == TXN, "two of three is a quorum of the view, not enough (QuorumAnswers)"
    assert asked(p.tick(6.0)) == {1}, "only the member that has not answered is asked again"
    assert p.no_row(6.5, TXN, 1, AFTER) == [q.ResolveRemoved(txn_id=TXN, coordinator=REMOVED)]
    p.check_invariants()
    assert p.intents.holder("k") is None and TXN not in p.pending
    assert p.query_decision(7.0, TXN, asker=4) == [q.SendDecision(txn_id=TXN, to=4, decision=Decision.ABORT)]
    assert p.tick(20.0) == []


def test_a_member_that_joined_meanwhile_must_answer_too():
    p = prepared()
    p.stop_following(1.0, REMOVED, AFTER)
    p.no_row(1.5, TXN, 1, AFTER)
    grown = AFTER | {5}
    assert p.no_row(1.6, TXN, 4, grown) == [], "member 5 may hold the row: it joined from a member's checkpoint"
    assert asked(p.tick(6.0)) == {5}
    assert p.no_row(6.5, TXN, 5, grown) != []


def test_a_member_answers_no_row_only_once_it_stopped_following_the_removed_coordinator():
    answerer = prepared(member=4)
    assert answerer.row_query(1.0, TXN, REMOVED, 3, FOUR, RowHere.NONE) == [], "2 is still in its view"
    assert answerer.row_query(1.0, TXN, REMOVED, 3, AFTER, RowHere.NONE) == [], (
        "applied the removal but still follows 2: a row its applier took may be on its way "
        "(QuorumRemoval_AnswerBeforeStopped)")
    answerer.stop_following(2.0, REMOVED, AFTER)
    assert answerer.row_query(2.0, TXN, REMOVED, 3, AFTER, RowHere.NONE) == [q.NoRow(txn_id=TXN, to=3)]


def test_a_member_that_never_prepared_answers_too():
    answerer = q.Participant(member=1, timeout_s=5.0)
    assert answerer.row_query(1.0, TXN, REMOVED, 3, AFTER, RowHere.NONE) == [], "before its start is known"
    answerer.restart(1.0, FOUR)
    answerer.stop_following(2.0, REMOVED, AFTER)
    assert answerer.row_query(2.0, TXN, REMOVED, 3, AFTER, RowHere.NONE) == [q.NoRow(txn_id=TXN, to=3)]


def test_a_holder_of_the_row_answers_commit_and_never_no_row():
    holder = q.Participant(member=1, timeout_s=5.0)
    holder.restart(0.0, FOUR)
    holder.stop_following(1.0, REMOVED, AFTER)
    assert holder.row_query(1.0, TXN, REMOVED, 3, AFTER, RowHere.WRITTEN) == [], (
        "a row an OS crash may still take is no answer either way")
    assert holder.row_query(1.0, TXN, REMOVED, 3, AFTER, RowHere.DURABLE) == [
        q.SendDecision(txn_id=TXN, to=3, decision=Decision.COMMIT)]
    asker = prepared()
    asker.stop_following(1.0, REMOVED, AFTER)
    asker.tick(1.0)
    asker.decision_learned(TXN, Decision.COMMIT)  # member 1's answer
    assert asker.intents.holder("k") == TXN, "COMMIT keeps the intent until the row is applied"
    assert asked(asker.tick(6.0)) == {1, 4}, "it asks on until the row comes (the holder never says no row)"
    asker.row_applied(TXN)
    asker.check_invariants()
    assert TXN not in asker.pending and asker.tick(20.0) == []


def test_a_commit_learned_from_the_removed_coordinator_whose_row_nobody_holds_is_aborted():
    """The coordinator decided COMMIT and answered a QueryDecision, then died before its
    row reached any remaining member: no client was acknowledged, the row is gone with its
    data, and the remaining members must not wait for it for good (R2 would refuse every
    membership change)."""
    p = prepared()
    p.decision_learned(TXN, Decision.COMMIT)
    assert p.tick(100.0) == [], "a commit learned from a live coordinator waits for the row"
    p.stop_following(101.0, REMOVED, AFTER)
    assert asked(p.tick(101.0)) == {1, 4}
    assert p.row_query(101.0, TXN, REMOVED, 4, AFTER, RowHere.NONE) == [q.NoRow(txn_id=TXN, to=4)], (
        "learning COMMIT is not holding the row")
    p.no_row(101.5, TXN, 1, AFTER)
    assert p.no_row(101.5, TXN, 4, AFTER) == [q.ResolveRemoved(txn_id=TXN, coordinator=REMOVED)]
    p.check_invariants()
    assert p.outcomes[TXN] is Decision.ABORT and p.intents.holder("k") is None


def test_a_member_that_joined_after_the_start_is_followed_until_it_stopped_being():
    answerer = q.Participant(member=1, timeout_s=5.0)
    answerer.restart(0.0, frozenset({1, 3, 4}))
    answerer.view_changed(frozenset({1, 3, 4, 5}))
    gone = frozenset({1, 3, 4})
    assert answerer.row_query(1.0, TXN, 5, 3, gone, RowHere.NONE) == [], "5 left the view; its applier may still run"
    answerer.stop_following(2.0, 5, gone)
    assert answerer.row_query(2.0, TXN, 5, 3, gone, RowHere.NONE) == [q.NoRow(txn_id=TXN, to=3)]


def test_after_a_restart_a_coordinator_removed_before_it_is_asked_about_at_once():
    p = prepared()
    p.no_row(0.5, TXN, 4, AFTER)  # not orphaned yet: changes nothing
    p.restart(10.0, AFTER)
    p.check_invariants()
    assert asked(p.tick(10.0)) == {1, 4}, "answers before the crash were in memory"
    assert p.row_query(10.0, 0x99, REMOVED, 4, AFTER, RowHere.NONE) == [q.NoRow(txn_id=0x99, to=4)], (
        "a member not in the view at the start is not followed")


def test_a_member_still_in_the_view_cannot_stop_being_followed():
    p = prepared()
    with pytest.raises(q.LocalProtocolError):
        p.stop_following(1.0, REMOVED, FOUR)


def test_a_transaction_of_a_coordinator_still_in_the_view_is_asked_about_by_decision():
    p = prepared()
    p.stop_following(1.0, 4, frozenset({1, 2, 3}))
    assert p.tick(1.0) == []
    (query,) = p.tick(6.0)
    assert isinstance(query, q.QueryDecision) and query.ask == {1, 2, 4}


def test_an_abort_by_the_rule_elsewhere_overrides_a_commit_learned_without_the_row():
    """Member 3 learned COMMIT from the removed coordinator; member 4, asked by the rule,
    heard "no row" from 1 and 3 and aborted; it answers 3's question with ABORT, which 3
    takes (found by TLC on QuorumRemoval with LearnCommit)."""
    p = prepared()
    p.decision_learned(TXN, Decision.COMMIT)
    p.stop_following(1.0, REMOVED, AFTER)
    p.decision_learned(TXN, Decision.ABORT)
    p.check_invariants()
    assert p.outcomes[TXN] is Decision.ABORT and p.intents.holder("k") is None


def test_an_abort_for_a_commit_learned_from_a_coordinator_still_followed_is_a_protocol_error():
    p = prepared()
    p.decision_learned(TXN, Decision.COMMIT)
    with pytest.raises(q.RemoteProtocolError, match="known commit, told abort"):
        p.decision_learned(TXN, Decision.ABORT)
