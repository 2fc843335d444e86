"""Durable intents behind the real participant core, the filter in front of them, and a
participant rebuilt from the metastore."""

from __future__ import annotations

import random

import pytest

from replicaset.core.quorum import NO_VERSION, Conflicted, Decision, Level, Participant, Prepared
from replicaset.core.transitions import LocalProtocolError
from replicaset.meta import (IntentFilter, MetaStore, StoredIntents, TxnRecord, TxnStatus, decide, put_txn,
                             recover_participant, txn)

MEMBERS = frozenset({1, 2, 3})
ROW1, ROW2, ROW3 = ("users", "users:1"), ("users", "users:2"), ("orders", "orders:c:AQ==:Ag==")


def prepare(store: MetaStore, participant: Participant, txn_id: int, *rows, now_s: float = 0.0):
    """The host's order at PREPARE: the intents (the core places them), then the record."""
    answer = participant.prepare(now_s, txn_id, 1, MEMBERS, {row: NO_VERSION for row in rows}, {}, view=MEMBERS)
    if isinstance(answer, Prepared) and txn(store, txn_id) is None:
        put_txn(store, TxnRecord(txn_id=txn_id, coordinator=1, members=MEMBERS, level=Level.QUORUM,
                                 status=TxnStatus.PENDING, keys=frozenset(rows)))
    participant.check_invariants()
    return answer


def participant_on(store: MetaStore) -> Participant:
    return Participant(member=2, timeout_s=5.0, intents=StoredIntents(store))


def test_a_conflict_names_the_key_and_its_holder_and_a_re_prepare_is_answered_alike(tmp_path):
    with MetaStore.open(tmp_path) as store:
        participant = participant_on(store)
        assert prepare(store, participant, 0xA, ROW1, ROW3) == Prepared(txn_id=0xA)
        assert prepare(store, participant, 0xB, ROW2, ROW1) == Conflicted(txn_id=0xB, key=ROW1, holder=0xA, holder_member=1)
        assert prepare(store, participant, 0xA, ROW1, ROW3) == Prepared(txn_id=0xA)
        assert participant.intents.holder(ROW2) is None, "the conflicted PREPARE placed nothing"
        assert dict(participant.intents.keys) == {0xA: frozenset({ROW1, ROW3})}


def test_abort_and_row_applied_release_the_intents(tmp_path):
    with MetaStore.open(tmp_path) as store:
        participant = participant_on(store)
        prepare(store, participant, 0xA, ROW1)
        prepare(store, participant, 0xB, ROW2)
        decide(store, 0xA, TxnStatus.ABORTED, sync=True)
        participant.abort(0xA)
        decide(store, 0xB, TxnStatus.COMMITTED, origin=1, lsn=7, sync=True)
        participant.row_applied(0xB)
        participant.check_invariants()
        assert participant.intents.holder(ROW1) is None and participant.intents.holder(ROW2) is None
        assert dict(participant.intents.keys) == {}
        assert prepare(store, participant, 0xC, ROW1, ROW2) == Prepared(txn_id=0xC)


def test_a_restarted_member_keeps_its_intents_pending_and_outcomes(tmp_path):
    with MetaStore.open(tmp_path) as store:
        participant = participant_on(store)
        prepare(store, participant, 0xA, ROW1, ROW3)
        prepare(store, participant, 0xB, ROW2)
        prepare(store, participant, 0xD, ("t", "t:9"))
        decide(store, 0xB, TxnStatus.ABORTED, sync=True)
        participant.abort(0xB)
        decide(store, 0xD, TxnStatus.COMMITTED, origin=1, lsn=3, sync=True)
    with MetaStore.open(tmp_path) as store:
        participant = recover_participant(store, member=2, timeout_s=5.0, now_s=100.0)
        participant.check_invariants()
        assert set(participant.pending) == {0xA} and participant.pending[0xA].heard_s == 100.0
        assert participant.outcomes == {0xB: Decision.ABORT, 0xD: Decision.COMMIT}
        assert participant.intents.holder(("t", "t:9")) is None, "a decided transaction's intents go at recovery"
        assert prepare(store, participant, 0xC, ROW3, now_s=100.0) == Conflicted(txn_id=0xC, key=ROW3, holder=0xA, holder_member=1)
        assert prepare(store, participant, 0xA, ROW1, ROW3, now_s=100.0) == Prepared(txn_id=0xA), "a re-sent PREPARE"
        assert prepare(store, participant, 0xB, ROW2, now_s=100.0) is None, "the outcome is known: no answer"
        assert participant.tick(104.0) == [] and len(participant.tick(105.0)) == 1
        participant.row_applied(0xA)
        assert prepare(store, participant, 0xC, ROW3, now_s=106.0) == Prepared(txn_id=0xC)


def test_intents_placed_without_a_record_are_released_at_recovery(tmp_path):
    """A crash between the intents and the PENDING record: PREPARED was never sent."""
    with MetaStore.open(tmp_path) as store:
        StoredIntents(store).place(0xE, [ROW1])
    with MetaStore.open(tmp_path) as store:
        participant = recover_participant(store, member=2, timeout_s=5.0, now_s=0.0)
        participant.check_invariants()
        assert participant.intents.holder(ROW1) is None and participant.pending == {}


def test_placing_over_another_transactions_intent_is_our_mistake(tmp_path):
    with MetaStore.open(tmp_path) as store:
        intents = StoredIntents(store)
        intents.place(1, [ROW1])
        with pytest.raises(LocalProtocolError, match="held by transaction 0x1"):
            intents.place(2, [ROW2, ROW1])
        assert intents.holder(ROW2) is None
        with pytest.raises(ValueError, match=r"\(table, key\) pair"):
            intents.holder("users:1")


def test_the_filter_never_says_no_to_a_live_intent(tmp_path):
    rng = random.Random(20261124)
    rows = [("t", f"t:{n}") for n in range(60)]
    live: dict[int, set] = {}
    with MetaStore.open(tmp_path) as store:
        intents = StoredIntents(store)
        for step in range(400):
            txn_id = rng.randrange(1, 12)
            if txn_id in live and rng.random() < 0.5:
                assert intents.release(txn_id) == frozenset(live.pop(txn_id))
            else:
                free = [row for row in rng.sample(rows, 3) if intents.holder(row) in (None, txn_id)]
                intents.place(txn_id, free)
                live.setdefault(txn_id, set()).update(free)
            if step % 50 == 0:
                intents = StoredIntents(store)
            held = {row: t for t, placed in live.items() for row in placed}
            for row in rows:
                assert intents.holder(row) == held.get(row)
            intents.check_invariants()


def test_a_miss_in_the_filter_reads_nothing_from_rocksdb(tmp_path):
    with MetaStore.open(tmp_path) as store:
        intents = StoredIntents(store)
        intents.place(1, [ROW1])
        store.close()
        assert intents.holder(ROW2) is None, "answered by the filter alone"


def test_the_filter_counts_keys_that_share_a_digest(monkeypatch):
    import replicaset.meta.filter as filter_module
    monkeypatch.setattr(filter_module.xxhash, "xxh3_64_intdigest", lambda key: 7)
    intents = IntentFilter()
    intents.add(b"/intent/t/a")
    intents.add(b"/intent/t/b")
    intents.discard(b"/intent/t/a")
    assert intents.might_hold(b"/intent/t/b")
    intents.discard(b"/intent/t/b")
    assert not intents.might_hold(b"/intent/t/b") and len(intents) == 0
    with pytest.raises(KeyError):
        intents.discard(b"/intent/t/b")
