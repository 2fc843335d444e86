"""The metastore records of quorum transactions as both hosts keep them (`TxnRecords`):
what is synced, and when a row of a quorum transaction counts as applied here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from replicaset.core import quorum as q
from replicaset.core.hlc import pack_stamp
from replicaset.core.replicaset import ReplicaSet
from replicaset.member import MemberDriver
from replicaset.member.txn_records import TxnRecords
from replicaset.meta import txns
from replicaset.meta.recovery import recover_participant
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnStatus
from tests.member.store import Store, membership, row

OWN = 2
COORDINATOR = 1
MEMBERS = frozenset({1, 2, 3})
TXN = 0x70
KEY = ("kv", "kv:1")


class QuorumStore(Store):
    """The log store with the two reads a participant's host makes."""

    def stored_versions(self, keys: Mapping[q.Key, Any]) -> dict[q.Key, tuple[int, int]]:
        return {}

    def quorum_row(self, txn_id: int) -> tuple[int, int] | None:
        return next(((r.origin, r.lsn) for r in self.log if r.txn_id == txn_id), None)


class CountingMeta(MetaStore):
    """A metastore that counts its fsyncs (a synced batch makes one through `sync`)."""

    synced = 0

    def sync(self) -> None:
        self.synced += 1
        super().sync()


@pytest.fixture
def meta(tmp_path: Path) -> Iterator[CountingMeta]:
    store = MetaStore.open(tmp_path / "meta")
    store.__class__ = CountingMeta
    yield store  # type: ignore[misc]
    store.close()


def driver_for(meta: MetaStore, store: QuorumStore) -> MemberDriver:
    return MemberDriver(
        instance_id=OWN, store=store,
        replicaset=ReplicaSet(instance_id=OWN, configured_quorum=None, connect_deadline_s=10.0),
        membership=lambda: membership(OWN, len(MEMBERS)), timeout_s=1.0, backoff_max_s=4.0,
        participant=recover_participant(meta, OWN, 4.0, 0.0))


def prepare(driver: MemberDriver, records: TxnRecords, txn_id: int = TXN) -> None:
    answer = driver.txn_prepare(0.0, txn_id, coordinator=COORDINATOR, members=MEMBERS, reads={KEY: q.NO_VERSION},
                                view=MEMBERS)
    assert isinstance(answer, q.Prepared)
    records.prepared(txn_id, coordinator=COORDINATOR, members=MEMBERS, keys=[KEY], sync=True)


def test_a_prepare_costs_one_fsync_and_a_decision_none(meta: CountingMeta) -> None:
    records, driver = TxnRecords(meta, OWN), driver_for(meta, QuorumStore())
    prepare(driver, records)
    assert meta.synced == 1, "the intents and the PENDING record go down with one fsync"
    prepare(driver, records)
    assert meta.synced == 2, "a PREPARE sent again syncs again before its answer"
    records.begun(0x71, members=MEMBERS, level=q.Level.QUORUM, keys=[("kv", "kv:2")], sync=True)
    assert meta.synced == 3, "a coordinator's PENDING record is synced before any PREPARE leaves"
    records.decided(TXN, TxnStatus.ABORTED)
    driver.txn_abort(0.0, TXN)
    assert meta.synced == 3, "a lost decision is found again: the row, or the coordinator's abort"
    assert txns.txn(meta, TXN).status is TxnStatus.ABORTED  # type: ignore[union-attr]


def test_a_quorum_row_counts_as_applied_only_once_durable_here(meta: CountingMeta) -> None:
    """An intent released on a row an OS crash can still take would let a PREPARE read at
    the version the crash brings back: the stale read commits over the lost row."""
    records, store = TxnRecords(meta, OWN), QuorumStore()
    driver = driver_for(meta, store)
    prepare(driver, records)
    assert records.rows_flushed(driver, 1.0, [(TXN, COORDINATOR, 5)], durable={COORDINATOR: 4}), "a sync is wanted"
    assert driver.participant.intents.holder(KEY) == TXN
    assert txns.txn(meta, TXN).status is TxnStatus.PENDING  # type: ignore[union-attr]
    other = driver.txn_prepare(1.0, 0x99, coordinator=3, members=MEMBERS, reads={KEY: q.NO_VERSION},
                                view=MEMBERS)
    assert isinstance(other, q.Conflicted) and other.holder == TXN
    assert not records.synced(driver, 2.0, {COORDINATOR: 5}), "nothing waits once the sync covers the row"
    assert driver.participant.intents.holder(KEY) is None
    record = txns.txn(meta, TXN)
    assert record is not None and (record.status, record.origin, record.lsn) == (TxnStatus.COMMITTED, COORDINATOR, 5)


def test_rows_a_restart_finds_count_at_the_first_sync(meta: CountingMeta) -> None:
    store = QuorumStore()
    driver = driver_for(meta, store)
    records = TxnRecords(meta, OWN)
    prepare(driver, records)
    store.log.append(row(COORDINATOR, 1, txn=TXN))
    restarted = driver_for(meta, store)
    assert records.restart(restarted, store, 5.0, frozenset({OWN, COORDINATOR})) == []
    assert restarted.participant.intents.holder(KEY) == TXN, "the WAL an unclean stop left may not be durable"
    store.sync()
    records.synced(restarted, 5.5, store.durable_vclock.to_dict())
    assert restarted.participant.intents.holder(KEY) is None
    assert txns.txn(meta, TXN).status is TxnStatus.COMMITTED  # type: ignore[union-attr]


def test_a_restart_keeps_a_committed_transaction_of_its_own_whose_row_the_store_lost(meta: CountingMeta) -> None:
    """Found by the fault harness (`tools/chaos.py --seed 6161 --seconds 90`, a torn WAL
    tail): the coordinator's record says COMMITTED at (2, 7), but the cut tail took the row,
    so the store holds none. The decision is durable and may have reached clients and
    peers: a decided transaction is never aborted. The restart aborted it, and the
    participant, which knew it committed, stopped the member with RemoteProtocolError."""
    store = QuorumStore()
    records = TxnRecords(meta, OWN)
    own = pack_stamp(1_000, OWN, 0)
    records.begun(own, members=MEMBERS, level=q.Level.QUORUM, keys=[KEY], sync=True)
    records.decided(own, TxnStatus.COMMITTED, (OWN, 7))
    restarted = driver_for(meta, store)
    actions = records.restart(restarted, store, 5.0, MEMBERS)
    assert not [a for a in actions if isinstance(getattr(a, "action", None), (q.DecideAbort, q.SendAbort))], actions
    # Asked, it never answers ABORT: it waits until the row is back here and durable.
    assert restarted.txn_query(5.0, own, coordinator=OWN, asker=COORDINATOR) == []
    assert txns.txn(meta, own).status is TxnStatus.COMMITTED  # type: ignore[union-attr]


def test_the_collection_deletes_a_decided_record_once_every_member_applied_its_row(meta: CountingMeta) -> None:
    records, store = TxnRecords(meta, OWN), QuorumStore()
    driver = driver_for(meta, store)
    txn_id = pack_stamp(1_000, COORDINATOR, 0)
    prepare(driver, records, txn_id)
    records.rows_flushed(driver, 1.0, [(txn_id, COORDINATOR, 5)], durable={COORDINATOR: 5})
    collect = partial(records.collect, driver, 2.0, members=MEMBERS, min_retention_ms=60_000,
                      max_retention_ms=600_000)
    assert collect(now_ms=30_000) == 0, "younger than the minimum retention"
    for member in (1, 2):
        driver.txn_durable(2.0, member, {COORDINATOR: 5})
    driver.txn_durable(2.0, 3, {COORDINATOR: 4})
    assert collect(now_ms=100_000) == 0, "member 3 has not applied the row"
    driver.txn_durable(2.0, 3, {COORDINATOR: 5})
    assert collect(now_ms=100_000) == 1
    assert txns.txn(meta, txn_id) is None and list(txns.records(meta)) == []
    assert driver.participant.outcomes == {}
    assert collect(now_ms=100_000) == 0
