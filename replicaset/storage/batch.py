"""Batches: group commit of the engine's writes, one SQLite transaction and one WAL append.

Theory of operation (docs/design/README.md §4.3, 4.4). One batch is open at a time, of one kind: client
transactions on the writer connection (LOCAL) or rows of other origins on the apply
connection (APPLY); two connections cannot share a transaction, so a caller flushes one
kind before it opens the other. Two vclocks describe the state:
- `vclock` is what SQLite has committed, kept in `_rs_vclock` inside the same transactions;
- `pending` is `vclock` plus the records the open batch queued: LSNs are handed out and
  apply-once is decided against it, so a row queued but not yet durable is never taken
  twice.
`flush` writes `_rs_vclock`, appends the batch's records to the WAL with one write (and one
fsync), then commits SQLite once, and only then moves `vclock`. A refused or failed append
rolls the batch back and `pending` back to `vclock`: those LSNs are handed out again. A
failed commit after the append is fatal: the WAL holds rows SQLite does not, which only a
restart (replaying them) reconciles. Replay at start-up runs batches that are not logged
again (`log_records=False`): their records come from the WAL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum

import apsw

from replicaset.storage.errors import BatchKindError, EngineFatal
from replicaset.storage.statements import SYSTEM_TABLES
from wal import Record, VClock, Wal


class BatchKind(Enum):
    LOCAL = "local"
    APPLY = "apply"


@dataclass
class Batch:
    kind: BatchKind
    conn: apsw.Connection
    records: list[Record] = field(default_factory=list)
    log_records: bool = True
    # (txn id, origin, lsn) of the quorum transactions whose rows the batch applied
    quorum_rows: list[tuple[int, int, int]] = field(default_factory=list)


# A row or DDL statement of a system table holds its name in its payload; a user's value
# holding it too costs a needless re-read, never a missed one.
_SYSTEM_TABLE_NAMES = tuple(name.encode() for name in SYSTEM_TABLES)


class Batches:
    def __init__(
        self,
        *,
        wal: Wal,
        writer: apsw.Connection,
        applier: apsw.Connection,
        vclock: VClock,
        on_rollback: Callable[[], None],
    ) -> None:
        """`vclock` is SQLite's at start; `on_rollback` restores what the engine derived
        from a batch that was rolled back (its schema changes)."""
        self._wal = wal
        self._conns = {BatchKind.LOCAL: writer, BatchKind.APPLY: applier}
        self._on_rollback = on_rollback
        self.vclock = vclock
        self.pending = vclock.copy()
        self.current: Batch | None = None
        self.system_changes = 0  # committed batches that may have changed a system table (`_cluster`)
        # Table -> `writes_seq` when rows of it were last written: a stream transaction's
        # reads are still good while the tables it read were written no later than it read them.
        self.table_writes: dict[str, int] = {}
        self.writes_seq = 0
        # Set when a SQLite commit failed after its WAL append: the engine must stop.
        self.fatal: EngineFatal | None = None

    def open(self, kind: BatchKind, *, log_records: bool = True) -> Batch:
        """The open batch, opened with a SQLite transaction if none is."""
        batch = self.current
        if batch is not None and batch.kind is not kind:
            raise BatchKindError(f"a {batch.kind.value} batch is open: flush it before a {kind.value} one")
        if batch is None:
            conn = self._conns[kind]
            conn.execute("BEGIN IMMEDIATE")
            batch = self.current = Batch(kind=kind, conn=conn, log_records=log_records)
        return batch

    def flush(self, before_append: Callable[[int], None] | None = None) -> list[Record]:
        """Make the open batch durable: the WAL first, then one SQLite commit.
        `before_append(payload_bytes)` may refuse the batch (a full disk) by raising: it is
        then rolled back as after a failed append, before the WAL holds anything SQLite
        cannot commit."""
        batch, self.current = self.current, None
        if batch is None:
            return []
        records = batch.records
        if records:
            touched = VClock({r.origin: r.lsn for r in records})
            for origin, lsn in touched.items():
                batch.conn.execute(
                    "INSERT OR REPLACE INTO _rs_vclock(origin, lsn) VALUES (?, ?)", (origin, lsn)
                )
            if batch.log_records:
                try:
                    if before_append is not None:
                        before_append(sum(len(record.payload) for record in records))
                    self._wal.append(records)
                except Exception:
                    batch.conn.execute("ROLLBACK")
                    self.pending = self.vclock.copy()
                    self._on_rollback()
                    raise
        try:
            batch.conn.execute("COMMIT")
        except apsw.Error as exc:
            self.fatal = EngineFatal(f"SQLite commit failed after the WAL append: {exc}")
            raise self.fatal from exc
        if any(name in record.payload for record in records for name in _SYSTEM_TABLE_NAMES):
            self.system_changes += 1
        for record in records:
            self.vclock.reset(record.origin, record.lsn)
        return records

    def wrote(self, tables: Iterable[str]) -> None:
        """Rows of `tables` were written for commit (a batch that fails later leaves the
        mark: at worst a stream transaction conflicts needlessly)."""
        self.writes_seq += 1
        for table in tables:
            self.table_writes[table] = self.writes_seq

    def abandon(self) -> None:
        """SQLite already rolled back the open batch's transaction (an interrupted write):
        forget the batch as a failed append does; its LSNs are handed out again."""
        batch, self.current = self.current, None
        assert batch is not None and batch.conn.get_autocommit(), "only a batch SQLite rolled back is abandoned"
        self.pending = self.vclock.copy()
        self._on_rollback()

    def check_invariants(self) -> None:
        """The vclock invariants (docs/storage.md): between calls, on an open engine."""
        wal_vclock = self._wal.vclock
        assert self._wal.synced_vclock <= wal_vclock, "the WAL's durable prefix lies within the WAL"
        assert self.vclock <= self.pending, "the pending vclock counts every committed row"
        if self.fatal is not None:
            # The failed batch is in the WAL and not in SQLite; a failed COMMIT may have
            # left its SQLite transaction open (SQLITE_BUSY), so that is not checked.
            assert self.current is None, "nothing may open a batch after a fatal flush"
            assert self.pending == wal_vclock, "after a fatal flush the pending vclock is the WAL's"
            return
        assert self.vclock == wal_vclock, "SQLite holds exactly the rows the WAL holds, origin 0 included"
        batch = self.current
        if batch is not None:
            assert batch.conn is self._conns[batch.kind], "a batch runs on the connection of its kind"
        for kind, conn in self._conns.items():
            in_batch = batch is not None and batch.kind is kind
            open_txn = not conn.get_autocommit()
            assert open_txn is in_batch, "a SQLite transaction is open on the open batch's connection only"
        if batch is None:
            assert self.pending == self.vclock, "with no open batch, nothing is pending"
            return
        queued = self.vclock.copy()
        for record in batch.records:
            assert record.lsn == queued.get(record.origin) + 1, "a batch continues the committed vclock with no hole"
            queued.reset(record.origin, record.lsn)
        assert self.pending == queued, "the pending vclock is the committed one plus the open batch"

    def close(self) -> None:
        """Roll back the open batch: its records never reached the WAL."""
        if self.current is not None:
            self.current.conn.execute("ROLLBACK")
            self.current = None
