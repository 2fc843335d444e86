"""Transaction records and their indexes."""

from __future__ import annotations

import pytest
import rocksdict

from replicaset.core.quorum import Level
from replicaset.meta import MetaError, MetaStore, TxnRecord, TxnStatus, decide, pending, put_txn, records, txn

MEMBERS = frozenset({1, 2, 3})


def record(txn_id: int, **changes) -> TxnRecord:
    fields = dict(txn_id=txn_id, coordinator=1, members=MEMBERS, level=Level.QUORUM, status=TxnStatus.PENDING,
                  keys=frozenset({("users", f"users:{txn_id}")}))
    return TxnRecord(**(fields | changes))


def test_a_record_round_trips(tmp_path):
    with MetaStore.open(tmp_path) as store:
        put_txn(store, record(0xA1))
        assert txn(store, 0xA1) == record(0xA1)
        assert txn(store, 0xA2) is None
        assert list(pending(store)) == [record(0xA1)]


def test_the_pending_index_lists_exactly_the_undecided_after_reopen(tmp_path):
    with MetaStore.open(tmp_path) as store:
        for txn_id in range(1, 7):
            put_txn(store, record(txn_id))
        decide(store, 2, TxnStatus.COMMITTED, origin=3, lsn=41, sync=True)
        decide(store, 4, TxnStatus.ABORTED, sync=True)
        put_txn(store, record(7, status=TxnStatus.ABORTED))
    with MetaStore.open(tmp_path) as store:
        assert [r.txn_id for r in pending(store)] == [1, 3, 5, 6]
        assert {r.txn_id: r.status for r in records(store)} == {
            1: TxnStatus.PENDING, 2: TxnStatus.COMMITTED, 3: TxnStatus.PENDING, 4: TxnStatus.ABORTED,
            5: TxnStatus.PENDING, 6: TxnStatus.PENDING, 7: TxnStatus.ABORTED}
        assert txn(store, 2) == record(2, status=TxnStatus.COMMITTED, origin=3, lsn=41)
        assert list(store.scan(b"/txn_idx/seq/")) == [(b"/txn_idx/seq/3/00000000000000000041/0000000000000002", 2)]


def test_a_decision_learned_twice_changes_nothing_and_a_contrary_one_raises(tmp_path):
    with MetaStore.open(tmp_path) as store:
        put_txn(store, record(9))
        first = decide(store, 9, TxnStatus.COMMITTED, origin=1, lsn=5, sync=True)
        assert decide(store, 9, TxnStatus.COMMITTED, origin=1, lsn=5, sync=False) == first
        with pytest.raises(MetaError, match="never decided again"):
            decide(store, 9, TxnStatus.ABORTED, sync=True)
        with pytest.raises(MetaError, match="never decided again"):
            decide(store, 9, TxnStatus.COMMITTED, origin=1, lsn=6, sync=True)


def test_bad_decisions_and_records_are_refused(tmp_path):
    with MetaStore.open(tmp_path) as store:
        with pytest.raises(MetaError, match="no record"):
            decide(store, 5, TxnStatus.ABORTED, sync=True)
        put_txn(store, record(5))
        with pytest.raises(MetaError, match="record already"):
            put_txn(store, record(5))
        with pytest.raises(ValueError, match="not a decision"):
            decide(store, 5, TxnStatus.PENDING, sync=True)
        with pytest.raises(ValueError, match="committed transaction has both"):
            decide(store, 5, TxnStatus.COMMITTED, sync=True)
        with pytest.raises(ValueError, match="committed transaction has both"):
            decide(store, 5, TxnStatus.ABORTED, origin=1, lsn=2, sync=True)
        assert list(pending(store)) == [record(5)]
    with pytest.raises(ValueError, match="not in"):
        record(1, coordinator=9)
    with pytest.raises(ValueError, match="txn id"):
        record(-1)
    with pytest.raises(ValueError, match="no '/'"):
        record(1, keys=frozenset({("a/b", "k")}))


def test_a_record_of_the_wrong_shape_names_its_key(tmp_path):
    db = rocksdict.Rdict(str(tmp_path), rocksdict.Options(raw_mode=True))
    db.put(b"/txn/0000000000000003", b"\x93\x01\x02\x03")
    db.close()
    with MetaStore.open(tmp_path) as store, pytest.raises(MetaError, match="/txn/0000000000000003.*transaction record"):
        txn(store, 3)


def test_decide_pending_decides_only_an_undecided_record_and_leaves_the_rest_as_they_are(tmp_path):
    """What a member's host does when it learns a decision: a pending record is decided
    (and leaves the pending index); a decided one stays as it was, even told otherwise;
    no record, nothing written."""
    from replicaset.meta.txns import decide_pending

    with MetaStore.open(tmp_path) as store:
        put_txn(store, record(1))
        put_txn(store, record(2))
        decide(store, 2, TxnStatus.ABORTED, sync=False)
        assert decide_pending(store, 1, TxnStatus.COMMITTED, origin=3, lsn=9, sync=False)
        assert not decide_pending(store, 2, TxnStatus.COMMITTED, origin=3, lsn=10, sync=False)
        assert not decide_pending(store, 3, TxnStatus.ABORTED, sync=False)
        assert txn(store, 1) == record(1, status=TxnStatus.COMMITTED, origin=3, lsn=9)
        assert txn(store, 2) == record(2, status=TxnStatus.ABORTED)
        assert txn(store, 3) is None and list(pending(store)) == []
        with pytest.raises(ValueError, match="PENDING is not a decision"):
            decide_pending(store, 1, TxnStatus.PENDING, sync=False)
