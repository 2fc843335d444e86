"""Transaction records: what a member knows of each quorum transaction it prepared or
coordinated, durable across a crash.

A record is PENDING from PREPARE until its decision; the pending index lists exactly those,
so a restarted member knows what to resolve without reading every record. `decide` writes
the decision and takes the transaction out of the pending index in one batch (a committed
one enters the index by WAL row), and a decided transaction is never decided again. The
caller says whether a write is synced. `forget` deletes decided records once the quorum
core's collection (`replicaset.core.quorum.collectable`) lets them go.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from replicaset.core.quorum import Level
from replicaset.meta import keys
from replicaset.meta.keys import IntentKey, check_intent_key, check_txn_id
from replicaset.meta.store import MetaError, MetaStore, malformed


class TxnStatus(Enum):
    PENDING = "pending"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnRecord:
    """One transaction. `keys` are the intents it places on this member; `origin` and
    `lsn` name its WAL row, and only a committed transaction has one (aborts take no LSN)."""

    txn_id: int
    coordinator: int
    members: frozenset[int]
    level: Level
    status: TxnStatus
    keys: frozenset[IntentKey]
    origin: int | None = None
    lsn: int | None = None

    def __post_init__(self) -> None:
        check_txn_id(self.txn_id)
        if self.coordinator not in self.members:
            raise ValueError(f"transaction {self.txn_id:#x}: coordinator {self.coordinator} is not in "
                             f"{sorted(self.members)}")
        for key in self.keys:
            check_intent_key(key)
        row = (self.origin is not None, self.lsn is not None)
        if row != ((True, True) if self.status is TxnStatus.COMMITTED else (False, False)):
            raise ValueError(f"transaction {self.txn_id:#x} is {self.status.value} with origin {self.origin} and "
                             f"lsn {self.lsn}: a committed transaction has both, any other neither")

    def to_value(self) -> dict[str, Any]:
        return {"txn_id": self.txn_id, "coordinator": self.coordinator, "members": sorted(self.members),
                "level": self.level.value, "status": self.status.value,
                "keys": sorted([table, row] for table, row in self.keys), "origin": self.origin, "lsn": self.lsn}

    @classmethod
    def from_value(cls, key: bytes, value: Any) -> TxnRecord:
        """The record stored under `key`; MetaError naming the key for anything else."""
        try:
            return cls(txn_id=value["txn_id"], coordinator=value["coordinator"], members=frozenset(value["members"]),
                       level=Level(value["level"]), status=TxnStatus(value["status"]),
                       keys=frozenset(tuple(pair) for pair in value["keys"]), origin=value["origin"], lsn=value["lsn"])
        except (KeyError, TypeError, ValueError) as error:
            raise malformed(key, f"a transaction record ({error})", value) from error


class RecordExists(MetaError):
    """`put_txn` of a transaction that has a record already."""


def put_txn(store: MetaStore, record: TxnRecord, *, sync: bool = True) -> None:
    """Write `record` with its index entry. Synced by default: a PENDING record goes down
    before PREPARED is answered, a decided one before the decision is passed on."""
    if txn(store, record.txn_id) is not None:
        raise RecordExists(f"transaction {record.txn_id:#x} has a record already: `decide` changes it")
    index_key = _index_key(record)
    with store.batch(sync=sync) as batch:
        batch.put(keys.txn(record.txn_id), record.to_value())
        if index_key is not None:
            batch.put(index_key, record.txn_id)


def txn(store: MetaStore, txn_id: int) -> TxnRecord | None:
    key = keys.txn(txn_id)
    value = store.get(key)
    return None if value is None else TxnRecord.from_value(key, value)


def pending(store: MetaStore) -> Iterator[TxnRecord]:
    """The undecided transactions, by txn id: what a restarted member must resolve."""
    for index_key in store.scan_keys(keys.TXN_PENDING):
        try:
            txn_id = keys.txn_id_after(keys.TXN_PENDING, index_key)
        except ValueError as error:
            raise malformed(index_key, "a pending index entry", index_key) from error
        record = txn(store, txn_id)
        if record is None or record.status is not TxnStatus.PENDING:
            raise malformed(index_key, "the index entry of a pending record", record)
        yield record


def records(store: MetaStore) -> Iterator[TxnRecord]:
    """Every transaction record, decided or not, by txn id."""
    for key, value in store.scan(keys.TXN):
        yield TxnRecord.from_value(key, value)


def decide(store: MetaStore, txn_id: int, status: TxnStatus, *, origin: int | None = None,
           lsn: int | None = None, sync: bool) -> TxnRecord:
    """Record the decision and move the transaction out of the pending index. The same
    decision again changes nothing (it may be learned twice); another raises."""
    if status is TxnStatus.PENDING:
        raise ValueError(f"transaction {txn_id:#x}: PENDING is not a decision")
    record = txn(store, txn_id)
    if record is None:
        raise MetaError(f"transaction {txn_id:#x} has no record to decide: `put_txn` a decided one")
    decided = replace(record, status=status, origin=origin, lsn=lsn)
    if record.status is not TxnStatus.PENDING:
        if record != decided:
            raise MetaError(f"transaction {txn_id:#x} is {record.status.value} at {(record.origin, record.lsn)}, "
                            f"told {status.value} at {(origin, lsn)}: a decided transaction is never decided again")
        return record
    _write_decision(store, record, decided, sync=sync)
    return decided


def decide_pending(store: MetaStore, txn_id: int, status: TxnStatus, *, origin: int | None = None,
                   lsn: int | None = None, sync: bool) -> bool:
    """`decide` for a host that leaves a record decided already, or none, as it is (False),
    with one read of the record."""
    if status is TxnStatus.PENDING:
        raise ValueError(f"transaction {txn_id:#x}: PENDING is not a decision")
    record = txn(store, txn_id)
    if record is None or record.status is not TxnStatus.PENDING:
        return False
    _write_decision(store, record, replace(record, status=status, origin=origin, lsn=lsn), sync=sync)
    return True


def _write_decision(store: MetaStore, record: TxnRecord, decided: TxnRecord, *, sync: bool) -> None:
    """`decided` over the PENDING `record`, out of the pending index."""
    txn_id = record.txn_id
    with store.batch(sync=sync) as batch:
        batch.put(keys.txn(txn_id), decided.to_value())
        batch.delete(keys.txn_pending(txn_id))
        index_key = _index_key(decided)
        if index_key is not None:
            batch.put(index_key, txn_id)


def forget(store: MetaStore, txn_ids: Iterable[int]) -> int:
    """Delete the decided records of `txn_ids` with their index entries, in one unsynced
    batch (a deletion lost in a crash is made again by the next collection); a pending
    record is never deleted here. Returns how many went."""
    gone = 0
    with store.batch(sync=False) as batch:
        for txn_id in txn_ids:
            record = txn(store, txn_id)
            if record is None or record.status is TxnStatus.PENDING:
                continue
            batch.delete(keys.txn(txn_id))
            index_key = _index_key(record)
            if index_key is not None:
                batch.delete(index_key)
            gone += 1
    return gone


def _index_key(record: TxnRecord) -> bytes | None:
    """The index that lists `record`: pending, by WAL row once committed, none once aborted."""
    if record.status is TxnStatus.PENDING:
        return keys.txn_pending(record.txn_id)
    if record.status is TxnStatus.COMMITTED:
        assert record.origin is not None and record.lsn is not None
        return keys.txn_seq(record.origin, record.lsn, record.txn_id)
    return None
