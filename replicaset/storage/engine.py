"""The SQLite engine: one writer, captured changes, the WAL first, versioned apply.

Theory of operation (docs/design/README.md §4.1-4.4):
- The writer connection runs client statements, each in its own SAVEPOINT inside the
  SAVEPOINT of its transaction, inside one SQLite transaction shared by a batch of
  transactions (group commit). The preupdate hook captures every row they change.
- `commit` gives a transaction its LSN and HLC stamp (increasing together), writes the row
  versions, and queues its WAL record. `flush` appends the batch's records to the WAL with
  one write (and one fsync), then commits SQLite once. A failed WAL append rolls the batch
  back and resets the pending vclock; a failed SQLite commit after it is fatal: the rows
  are in the WAL and recovery replays them.
- Rows from other origins go through `apply` on a second connection with triggers and
  foreign keys off; apply-once is checked against the pending vclock, which counts what
  is applied or queued. Replay at start-up uses the same path.
- Rows of local tables get origin 0 (never replicated, Tarantool's convention), so they
  are logged and recovered but do not advance the replicated vclock.

`Engine` is the facade that the runtime, the simulator and the tools drive: it opens the
files through recovery.py and wires the parts, each in a module of its own with one
reason to change (docs/storage.md, "Engine layout"), then hands every call to the part
that owns it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import apsw

from replicaset.core.hlc import HLC
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage import recovery, tombstones
from replicaset.storage.access import AccessCache, StatementAccess
from replicaset.storage.apply import HLC_SQL_OFFSET, RowApplier, get_version
from replicaset.storage.apply_record import RecordApplier
from replicaset.storage.auto_ids import AutoIds
from replicaset.storage.batch import Batch, Batches, BatchKind
from replicaset.storage.config import EngineConfig
from replicaset.storage.connection_values import ConnectionValues, define_functions
from replicaset.storage.connections import Connections, connect
from replicaset.storage.errors import BatchKindError, SqlError, StatementTimeout
from replicaset.storage.pragmas import connection_pragma
from replicaset.storage.keys import SCHEMA_KEY
from replicaset.storage.schema import SchemaState, TableCache, committed_schema_id, read_vclock
from replicaset.storage.statements import StatementShape, describe, is_read, run_statement, sql_message
from replicaset.storage.rows import DmlPayload
from replicaset.storage.transactions import ANY_TABLE, Captured, Committed, LocalTxn, StatementResult, Transactions
from wal import LOCAL_ORIGIN, Record, RecordType, RowsUnavailable, VClock, Wal

_NO_SUCH_TABLE = re.compile(r"^no such table: (\S+)$")

Logger = Callable[..., None]


def _no_log(event: str, **fields: Any) -> None:
    return None


# SQLite virtual-machine steps between two looks at a read's deadline: a few ms apart at
# most, and no measurable cost.
READ_CHECK_STEPS = 10_000

class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        wal: Wal,
        connections: Connections,
        vclock: VClock,
        clock_ms: Callable[[], int],
        log: Logger,
    ) -> None:
        """Assemble the parts over files already open; `open` is the way in, since SQLite
        must be brought up to the WAL first. `vclock` is SQLite's."""
        self.config = config
        self._log = log
        self._clock_ms = clock_ms
        # (txn id, origin, lsn) of the quorum rows the last flush made durable
        self.flushed_quorum_rows: list[tuple[int, int, int]] = []
        self._wal = wal
        self._connections = connections
        self._read_deadline = math.inf
        connections.reader.set_progress_handler(self._read_overdue, READ_CHECK_STEPS)
        # The values last_insert_rowid() and its kin answer: the running statement's session's.
        self._own_values = self._values = ConnectionValues()
        for conn in (connections.writer, connections.reader):
            define_functions(conn, lambda: self._values)
        self._access = AccessCache(connect(config.db_path, readonly=True))
        self._access_ddl_count = 0
        writer, applier = connections.writer, connections.applier
        writer_tables, apply_tables = TableCache(writer), TableCache(applier)
        self._schema = SchemaState(writer, (writer_tables, apply_tables), config.local_tables)
        self._auto_ids = AutoIds(writer, writer_tables, instance_id=config.instance_id, mode=config.auto_id_mode)
        self._batches = Batches(wal=wal, writer=writer, applier=applier, vclock=vclock, on_rollback=self._schema.reload)
        self.hlc = HLC(config.instance_id, last_stamp=recovery.hlc_seed(wal, writer))
        self._transactions = Transactions(
            config=config,
            conn=writer,
            tables=writer_tables,
            schema=self._schema,
            auto_ids=self._auto_ids,
            batches=self._batches,
            hlc=self.hlc,
            clock_ms=clock_ms,
        )
        self._records = RecordApplier(
            instance_id=config.instance_id,
            batches=self._batches,
            rows=RowApplier(applier, apply_tables),
            tables=apply_tables,
            schema=self._schema,
            auto_ids=self._auto_ids,
            hlc=self.hlc,
            clock_ms=clock_ms,
        )

    @classmethod
    def open(
        cls, config: EngineConfig, *, clock_ms: Callable[[], int], log: Logger = _no_log
    ) -> Engine:
        opened = recovery.open_files(config, log)
        engine = cls(
            config, wal=opened.wal, connections=opened.connections, vclock=opened.vclock, clock_ms=clock_ms, log=log
        )
        recovery.replay(
            opened.wal,
            engine.vclock.copy(),
            apply=partial(engine._records.apply, log_records=False, own_allowed=True),
            flush=engine.flush,
            log=log,
        )
        engine._auto_ids.install()
        return engine

    # ------------------------------------------------------------------ properties

    @property
    def instance_id(self) -> int:
        return self.config.instance_id

    @property
    def wal(self) -> Wal:
        return self._wal

    @property
    def connections(self) -> Connections:
        """The SQLite connections, for what the engine offers no method for (the reader
        for schema introspection, tests that make a commit fail); writing through them
        bypasses the WAL."""
        return self._connections

    @property
    def schema_id(self) -> tuple[int, int]:
        """The last replicated DDL row held here, which the data rows written now name."""
        return self._schema.schema_id

    @property
    def vclock(self) -> VClock:
        """What SQLite has committed; the live clock, which a caller copies to keep."""
        return self._batches.vclock

    @property
    def system_changes(self) -> int:
        """How many committed batches may have changed a system table (`_cluster`) since
        the engine opened: a reader's view of those tables is the same while this is
        (every write goes through a batch)."""
        return self._batches.system_changes

    @property
    def pending_vclock(self) -> VClock:
        """`vclock` and what the open batch queued: what is applied or about to be."""
        return self._batches.pending

    @property
    def batch(self) -> Batch | None:
        """The open batch, None when none is open."""
        return self._batches.current

    @property
    def batch_records(self) -> int:
        batch = self._batches.current
        return len(batch.records) if batch else 0

    @property
    def batch_kind(self) -> BatchKind | None:
        """The kind of the open batch, None when none is open: a caller that will open the
        other kind flushes first (through the writer, which relays and answers)."""
        batch = self._batches.current
        return batch.kind if batch else None

    # ------------------------------------------------------------------ client writes

    def begin(self, *, explicit: bool = False, quorum: bool = False) -> LocalTxn:
        """Open a client transaction in the current local batch; a `quorum` one is to be
        captured."""
        return self._transactions.begin(explicit=explicit, quorum=quorum)

    def execute(
        self, txn: LocalTxn, sql: str, binds: Sequence[Any] | dict[str, Any] = (), *, trusted: bool = False,
        values: ConnectionValues | None = None,
    ) -> StatementResult:
        """Run one client statement in its own savepoint; a failure leaves nothing behind.
        `trusted` statements come from the node itself (system tables) and skip the authorizer;
        `values` are the session's, which last_insert_rowid() and its kin answer."""
        answer = _pragma_result(sql, row_count=0)
        if answer is not None:
            return answer
        self._values = values or self._own_values
        result = self._transactions.execute(txn, sql, binds, trusted=trusted)
        if txn.explicit:
            try:
                access = self._access.get(sql)
            except SqlError:  # names a TEMP table, which only the writer has: say it read everything
                self._transactions.note_reads(txn, (ANY_TABLE,), ())
            else:
                self._transactions.note_reads(txn, access.reads, access.writes)
        return result

    def commit(self, txn: LocalTxn) -> Committed | None:
        """Finish a transaction: stamp it and queue its WAL records (durable after flush)."""
        return self._transactions.commit(txn)

    def rollback(self, txn: LocalTxn) -> None:
        self._transactions.rollback(txn)

    # ------------------------------------------------------------------ quorum transactions

    def capture(self, txn: LocalTxn) -> Captured:
        """Take a transaction's rows and the versions it read, rolling it back: a QUORUM or
        ALL transaction's until decided, a stream transaction's between its statements."""
        return self._transactions.capture(txn)

    def check_unchanged(self, captured: Captured) -> None:
        """`TxnConflict` when a key a stream transaction wrote, or a table it read, was
        written by another transaction since (`resume` checks it too)."""
        self._transactions.check_unchanged(captured)

    def check_deferred(self, captured: Captured) -> None:
        """`SqlError` when a stream transaction's rows leave a deferred foreign key unresolved."""
        self._transactions.check_deferred(captured)

    def resume(self, captured: Captured | None, *, quorum: bool) -> LocalTxn:
        """A stream transaction open again with what `capture` took out of it;
        `TxnConflict` when a key it wrote changed meanwhile."""
        return self._transactions.resume(captured, quorum=quorum)

    def commit_captured(self, captured: Captured, *, txn_id: int, min_stamp: int) -> Record:
        """Write a decided quorum transaction as our next row, with a stamp above every
        version it read, through the apply path that every member's copy takes. The row
        names the schema the transaction was captured under: a rename or drop since then
        carries its rows on every member alike."""
        clock = self._clock_ms()
        self.hlc.receive(min_stamp, clock)
        stamp = self.hlc.now(clock)
        own = self.instance_id
        if captured.ddl is not None:
            kind, packed = RecordType.DDL, dataclasses.replace(captured.ddl, hlc=stamp, quorum_txn=txn_id).pack()
        else:
            kind, packed = RecordType.DML, DmlPayload(hlc=stamp, schema_id=captured.schema_id,
                                                      rows=list(captured.rows), quorum_txn=txn_id).pack()
        record = Record(type=kind, origin=own, lsn=self._batches.pending.get(own) + 1, txn_id=stamp, payload=packed)
        taken = self._records.apply(record, log_records=True, own_allowed=True)
        assert taken, "our next LSN is never held already"
        return record

    def stored_versions(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """The committed version of each key that has one: what a PREPARE compares with.
        The DDL lock's key, `SCHEMA_KEY`, is at the committed schema id (its LSN where a
        row has its HLC: only equality is asked of it)."""
        reader = self._connections.reader
        found = {key: self._committed_schema_version(reader) if key == SCHEMA_KEY else get_version(reader, *key)
                 for key in keys}
        return {key: version for key, version in found.items() if version is not None}

    @staticmethod
    def _committed_schema_version(reader: apsw.Connection) -> tuple[int, int] | None:
        origin, lsn = committed_schema_id(reader)
        return (lsn, origin) if lsn else None

    def tombstone(self, table: str, key: str) -> tuple[int, int, int] | None:
        """`(hlc, origin, lsn)` of the delete that left `key` without a row, None when the
        key has a row or no version: a `_cluster` tombstone tells who removed a member."""
        row = self._connections.reader.execute(
            "SELECT hlc, origin, lsn FROM _rs_version WHERE tbl = ? AND key = ? AND deleted = 1", (table, key)).fetchone()
        return (row[0] + HLC_SQL_OFFSET, row[1], row[2]) if row else None

    def quorum_row(self, txn_id: int) -> tuple[int, int] | None:
        """`(origin, lsn)` of the row of quorum transaction `txn_id`, None when not held."""
        row = self._connections.reader.execute(
            "SELECT origin, lsn FROM _rs_quorum WHERE txn_id = ?", (txn_id - HLC_SQL_OFFSET,)).fetchone()
        return (row[0], row[1]) if row else None

    # ------------------------------------------------------------------ durability

    def flush(self, before_append: Callable[[int], None] | None = None) -> list[Record]:
        """Make the batch durable: the WAL first, then one SQLite commit; `before_append`
        may refuse it (`Batches.flush`)."""
        batch = self._batches.current
        if batch is None:
            return []
        records = self._batches.flush(before_append)
        self.flushed_quorum_rows = batch.quorum_rows
        if self._schema.ddl_count != self._access_ddl_count:
            self._access_ddl_count = self._schema.ddl_count
            self._access.schema_changed()
        if self._auto_ids.stale:
            self._auto_ids.install()
        return records

    def purge_tombstones(self, bound: Mapping[int, int]) -> tombstones.Purged:
        """Forget the tombstones under `bound`, which `core.purge` returned: between batches
        (the writer's connection is free), in a transaction of its own."""
        if self._batches.current is not None:
            raise BatchKindError("a batch is open: flush it before a purge")
        return tombstones.purge(self._connections.writer, bound)

    # ------------------------------------------------------------------ apply

    def apply(self, record: Record, *, own_allowed: bool = False) -> bool:
        """Apply a row of another origin once; False when it is a copy already held.
        `own_allowed` admits rows of our own origin: only the start-up fetch of rows we
        lost (docs/design/README.md §4.4) may use it."""
        return self._records.apply(record, log_records=True, own_allowed=own_allowed)

    def committed_copy(self, record: Record, *, own_allowed: bool = False) -> bool:
        """Whether `apply` would take `record` for a copy of a row SQLite has committed
        here: no batch can take that back, so a caller may drop the copy unseen."""
        if record.origin == self.config.instance_id and not own_allowed:
            return True
        return record.lsn <= self._batches.vclock.get(record.origin)

    def skip(self, record: Record) -> bool:
        """`replication_skip_conflict`: hold the row (log it, count it, relay it) without
        applying its changes, as Tarantool does, so the stream can go on."""
        return self._records.apply(record, log_records=True, own_allowed=False, skip=True)

    def txn_at(self, origin: int, lsn: int) -> int | None:
        """The txn id of row `origin:lsn` in our log, None when we do not hold it; the
        relay compares it with a subscriber's to catch a reused LSN (split brain)."""
        if not 0 < lsn <= self._wal.vclock.get(origin):
            return None
        probe = self._wal.vclock
        probe.reset(origin, lsn - 1)
        try:
            for record in self._wal.read_from(probe):
                if record.origin == origin:
                    return record.txn_id if record.lsn == lsn else None
        except RowsUnavailable:
            return None
        return None

    def last_txn(self) -> dict[int, tuple[int, int]]:
        """Per replicated origin, the `(lsn, txn_id)` of the last row held (for SUBSCRIBE)."""
        last = self._wal.last_txn_id
        return {o: (lsn, last[o]) for o, lsn in self.vclock.items() if o != LOCAL_ORIGIN and o in last}

    # ------------------------------------------------------------------ reads

    @staticmethod
    def is_read(sql: str) -> bool:
        """Statements worth trying on a reader first; a reader refuses any write anyway."""
        return is_read(sql)

    def query(self, sql: str, binds: Sequence[Any] | dict[str, Any] = (), *,
              values: ConnectionValues | None = None) -> StatementResult | None:
        """Run a statement on the reader connection; None when it turns out to write. Past
        `statement_timeout_s` SQLite stops it (a read-only statement interrupted ends alone).
        A connection PRAGMA is answered without running (`pragmas.py`). `values` are the
        session's, which last_insert_rowid() and its kin answer."""
        answer = _pragma_result(sql, row_count=None)
        if answer is not None:
            return answer
        self._values = values or self._own_values
        cursor = self._connections.reader.cursor()
        limit = self.config.statement_timeout_s
        self._read_deadline = time.monotonic() + limit if limit else math.inf
        try:
            columns, rows = run_statement(cursor, sql, binds)
        except apsw.ReadOnlyError:
            return None
        except apsw.InterruptError as exc:
            raise StatementTimeout(f"the statement ran past sql.statement_timeout_s = {limit:g} s and was "
                                   "stopped") from exc
        except apsw.Error as exc:
            if self._writer_temp_table(exc):
                return None
            raise SqlError(sql_message(exc)) from exc
        except (TypeError, ValueError, OverflowError) as exc:
            raise SqlError(f"bad bind value: {exc}") from exc
        except KeyError as exc:  # apsw: a named parameter the binds do not hold
            raise SqlError(f"no value bound for parameter :{exc.args[0]}") from exc
        finally:
            self._read_deadline = math.inf
        return StatementResult(columns=columns, rows=rows, row_count=None, autoincrement_ids=[])

    def _writer_temp_table(self, exc: apsw.Error) -> bool:
        """Whether the reader failed on a TEMP table a client made, which lives on the writer
        connection only (docs/decisions.md, "Temp tables"): the statement then runs there."""
        missing = _NO_SUCH_TABLE.match(sql_message(exc))
        if missing is None:
            return False
        name = missing.group(1).removeprefix("temp.")
        return self._connections.writer.execute("SELECT 1 FROM temp.sqlite_schema WHERE type = 'table' AND name = ?",
                                                (name,)).fetchone() is not None

    def access(self, sql: str) -> StatementAccess:
        """The tables `sql` reads and writes and whether it is DDL, compiled once per text
        and schema (replicaset.storage.access); SqlError when it does not compile."""
        return self._access.get(sql)

    def _read_overdue(self) -> bool:
        return time.monotonic() > self._read_deadline

    def describe(self, sql: str) -> StatementShape:
        """Compile `sql` on the reader without running it (iproto's PREPARE). The reader
        has no authorizer: what the writer refuses is refused when the text runs."""
        try:
            return describe(self._connections.reader, sql)
        except apsw.Error as exc:
            raise SqlError(sql_message(exc)) from exc

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self, sync_wal: Callable[[], None] | None = None) -> Path:
        """A consistent copy of the database, made on a reader; its vclock is inside it. It is
        published only after the WAL was fsynced, whatever `wal_mode` says (FINDINGS F2).
        `sync_wal` replaces `Wal.sync` for a caller that runs this off the thread that
        appends, since a sync must not race an append."""
        return checkpoints.make(
            connect(self.config.db_path, readonly=True),
            self.config.snap_dir,
            keep=self.config.checkpoint_count,
            sync_wal=sync_wal or self._wal.sync,
            log=self._log,
        )

    def checkpoints(self) -> list[tuple[Path, VClock]]:
        return checkpoints.listing(self.config.snap_dir)

    def newest_checkpoint(self) -> tuple[Path, VClock] | None:
        """The newest checkpoint whose later rows are all still in the WAL, with its vclock:
        what a join can be served from (docs/design/README.md §4.4). None when the log no longer reaches
        back to any checkpoint."""
        return checkpoints.newest_usable(self.config.snap_dir, self.log_start(), self._wal.vclock)

    def log_start(self) -> VClock:
        """Where the WAL starts: a relay cannot serve a subscriber that lacks rows before it."""
        return checkpoints.log_start(self._wal)

    @property
    def durable_vclock(self) -> VClock:
        """What an OS crash cannot take from the WAL: relays ship our own rows up to it."""
        return self._wal.synced_vclock

    # ------------------------------------------------------------------ inspection

    def versions(self, table: str) -> dict[str, tuple[int, int, bool]]:
        """Every key's version `(hlc, origin, deleted)` in a table, as committed."""
        return {
            key: (hlc + HLC_SQL_OFFSET, origin, bool(deleted))
            for key, hlc, origin, deleted in self._connections.reader.execute(
                "SELECT key, hlc, origin, deleted FROM _rs_version WHERE tbl = ?", (table,)
            )
        }

    def table_digest(self) -> dict[str, int]:
        """Per-table digest of contents and versions, to compare members."""
        return checkpoints.digest(self._connections.reader, self.config.local_tables)

    # ------------------------------------------------------------------ invariants

    def check_invariants(self) -> None:
        """Assert what must hold between any two calls on an open engine, so that a test or
        the simulator stops at the step that broke it (docs/storage.md, "Invariants")."""
        batches = self._batches
        batches.check_invariants()
        committed = read_vclock(self._connections.reader)
        assert committed == batches.vclock, "the vclock is the one SQLite committed with the rows"
        if batches.fatal is None:
            batch = batches.current
            conn = batch.conn if batch is not None else self._connections.writer
            assert self._schema.hash == self._schema.hash_of(conn), "the schema hash is that of the schema in force"

    def close(self) -> None:
        self._access.close()
        self._batches.close()
        self._connections.close()
        self._wal.close()


def _pragma_result(sql: str, *, row_count: int | None) -> StatementResult | None:
    """SQLite's answer to a connection PRAGMA, which runs nowhere (`pragmas.py`); None for
    any other statement."""
    answer = connection_pragma(sql)
    if answer is None:
        return None
    return StatementResult(columns=answer.columns, rows=answer.rows, row_count=row_count, autoincrement_ids=[])
