"""The SQLite engine: one writer, captured changes, the WAL first, versioned apply.

Theory of operation (DESIGN 4.1-4.4):
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
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from replicaset.core.hlc import HLC
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.apply import HLC_SQL_OFFSET, RowApplier, UniqueResolver, resolve_after_local_write, set_version
from replicaset.storage.apply_record import RecordApplier
from replicaset.storage.auto_ids import AutoIds
from replicaset.storage.batch import Batch, Batches, BatchKind
from replicaset.storage.capture import Capture
from replicaset.storage.config import EngineConfig
from replicaset.storage.errors import EngineFatal, SqlError
from replicaset.storage.rows import LOCAL_ORIGIN, CapturedRow, DdlPayload, DmlPayload, Op
from replicaset.storage.schema import (
    INTERNAL_DDL,
    SchemaState,
    TableCache,
)
from replicaset.storage.statements import (
    Authorizer,
    is_read,
    run_statement,
    schema_change_refusal,
    sql_message,
    text_refusal,
)
from wal import Record, RecordType, RowsUnavailable, VClock, Wal

REPLAY_BATCH_ROWS = 1000

Logger = Callable[..., None]


def _no_log(event: str, **fields: Any) -> None:
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class StatementResult:
    columns: list[tuple[str, str | None]]
    rows: list[list[Any]]
    row_count: int | None
    autoincrement_ids: list[int]


@dataclass(kw_only=True)
class LocalTxn:
    savepoint: str
    capture_mark: int
    explicit: bool
    statements: int = 0
    ddl: DdlPayload | None = None
    ddl_local: bool = False
    done: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class Committed:
    """What a client's transaction became: its WAL records, durable after `flush`."""

    records: tuple[Record, ...]
    txn_id: int


class Engine:
    def __init__(self, config: EngineConfig, clock_ms: Callable[[], int], log: Logger) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self._log = log
        self._id = config.instance_id
        self._wal: Wal
        self._txn_seq = 0
        self._authorizer = Authorizer()

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls, config: EngineConfig, *, clock_ms: Callable[[], int], log: Logger = _no_log
    ) -> Engine:
        engine = cls(config, clock_ms, log)
        engine._open()
        return engine

    def _open(self) -> None:
        cfg = self.config
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        cfg.snap_dir.mkdir(exist_ok=True)
        checkpoints.remove_partial(cfg.snap_dir)
        self._wal = Wal.open(
            cfg.wal_dir,
            mode=cfg.wal_mode,
            max_size_bytes=cfg.wal_max_size_bytes,
            max_record_bytes=cfg.max_txn_bytes + 4096,
            log=self._log,
        )
        self._open_connections()
        sqlite_vclock = self._read_vclock(self._writer)
        wal_vclock = self._wal.vclock
        checkpoints.set_aside_beyond(cfg.snap_dir, wal_vclock, self._log)
        if not sqlite_vclock <= wal_vclock:
            self._rebuild(sqlite_vclock, wal_vclock)
            sqlite_vclock = self._read_vclock(self._writer)
        self._batches = Batches(
            wal=self._wal,
            writer=self._writer,
            applier=self._apply_conn,
            vclock=sqlite_vclock,
            on_rollback=self._schema.reload,
        )
        seed = self._wal.max_txn_id
        if seed == 0:
            # A log with no rows (a joiner's, started at its checkpoint): the versions the
            # checkpoint holds are the only record of the stamps already used.
            stored = self._writer.execute("SELECT max(hlc) FROM _rs_version").fetchone()[0]
            seed = 0 if stored is None else stored + HLC_SQL_OFFSET
        self.hlc = HLC(self._id, last_stamp=seed)
        self._records = RecordApplier(
            instance_id=self._id,
            batches=self._batches,
            rows=self._applier,
            schema=self._schema,
            auto_ids=self._auto_ids,
            hlc=self.hlc,
            clock_ms=self._clock_ms,
        )
        self._replay(sqlite_vclock)
        self._auto_ids.install()

    def _connect(self, *, readonly: bool = False) -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READONLY if readonly else (
            apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        conn = apsw.Connection(str(self.config.db_path), flags=flags)
        conn.set_busy_timeout(5000)
        return conn

    def _open_connections(self) -> None:
        writer = self._connect()
        if writer.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise EngineFatal("SQLite refused WAL journal mode")
        writer.execute("PRAGMA synchronous=NORMAL")
        writer.execute("PRAGMA foreign_keys=ON")
        if writer.execute("PRAGMA synchronous").fetchone()[0] != 1:
            raise EngineFatal("SQLite refused synchronous=NORMAL")
        for ddl in INTERNAL_DDL:
            writer.execute(ddl)
        self._writer = writer
        self._writer_tables = TableCache(writer)
        self._capture = Capture(writer, self._writer_tables)
        writer.authorizer = self._authorizer
        self._auto_ids = AutoIds(
            writer, self._writer_tables, instance_id=self._id, mode=self.config.auto_id_mode
        )
        # Statements of the writer's own resolution are never cached: they must be
        # prepared while triggers are off, as on the apply connection.
        self._writer_unique = UniqueResolver(writer, cache_statements=False)

        applier = self._connect()
        applier.execute("PRAGMA synchronous=NORMAL")
        applier.execute("PRAGMA foreign_keys=OFF")
        applier.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
        self._apply_conn = applier
        self._apply_tables = TableCache(applier)
        self._applier = RowApplier(applier, self._apply_tables)
        self._reader = self._connect(readonly=True)
        self._schema = SchemaState(writer, (self._writer_tables, self._apply_tables), self.config.local_tables)

    def _close_connections(self) -> None:
        for conn in (self._reader, self._apply_conn, self._writer):
            conn.close()

    @staticmethod
    def _read_vclock(conn: apsw.Connection) -> VClock:
        return VClock(dict(conn.execute("SELECT origin, lsn FROM _rs_vclock").fetchall()))

    def _rebuild(self, sqlite_vclock: VClock, wal_vclock: VClock) -> None:
        """SQLite is ahead of the WAL (an OS crash under wal_mode=write): start again from
        the newest checkpoint the WAL continues, and log what SQLite held that is lost."""
        self._log(
            "sqlite_ahead_of_wal",
            sqlite_vclock=sqlite_vclock.to_dict(),
            wal_vclock=wal_vclock.to_dict(),
            dropped={o: lsn - wal_vclock.get(o) for o, lsn in sqlite_vclock.items() if lsn > wal_vclock.get(o)},
        )
        self._close_connections()
        wal_start = self._wal_start()
        usable = checkpoints.newest_usable(self.config.snap_dir, wal_start, wal_vclock)
        base = usable[0] if usable else None
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.config.db_path) + suffix).unlink(missing_ok=True)
        if base is not None:
            shutil.copyfile(base, self.config.db_path)
        elif wal_start.signature != 0:
            raise EngineFatal(
                "SQLite is ahead of the WAL and no checkpoint lies between the WAL start "
                f"{wal_start.to_dict()} and its end {wal_vclock.to_dict()}: restore or re-join"
            )
        self._log("rebuild_from_checkpoint", checkpoint=str(base) if base else None)
        self._open_connections()

    def _replay(self, start: VClock) -> None:
        replayed = 0
        for record in self._wal.read_from(start):
            self._records.apply(record, log_records=False, own_allowed=True)
            replayed += 1
            if replayed % REPLAY_BATCH_ROWS == 0:
                self.flush()
        self.flush()
        if replayed:
            self._log("wal_replayed", rows=replayed, vclock=self.vclock.to_dict())

    # ------------------------------------------------------------------ properties

    @property
    def instance_id(self) -> int:
        return self._id

    @property
    def wal(self) -> Wal:
        return self._wal

    @property
    def schema_id(self) -> tuple[int, int]:
        """The last replicated DDL row held here, which the data rows written now name."""
        return self._schema.schema_id

    @property
    def vclock(self) -> VClock:
        """What SQLite has committed; the live clock, which a caller copies to keep."""
        return self._batches.vclock

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

    def _internal(self, sql: str, binds: Sequence[Any] = ()) -> None:
        self._writer.execute(sql, binds, can_cache=False)

    def begin(self, *, explicit: bool = False) -> LocalTxn:
        """Open a client transaction in the current local batch."""
        self._batches.open(BatchKind.LOCAL)
        self._txn_seq += 1
        txn = LocalTxn(savepoint=f"rs_txn_{self._txn_seq}", capture_mark=self._capture.mark(), explicit=explicit)
        self._internal(f"SAVEPOINT {txn.savepoint}")
        return txn

    def execute(
        self, txn: LocalTxn, sql: str, binds: Sequence[Any] | dict[str, Any] = (), *, trusted: bool = False
    ) -> StatementResult:
        """Run one client statement in its own savepoint; a failure leaves nothing behind.
        `trusted` statements come from the node itself (system tables) and skip the authorizer."""
        if txn.done:
            raise SqlError("the transaction is already finished")
        if txn.ddl is not None:
            raise SqlError("a DDL statement must be alone in its transaction")
        if not txn.explicit and txn.statements:
            raise SqlError("an autocommit transaction runs one statement: use a stream transaction for more")
        refusal = text_refusal(sql)
        if refusal:
            raise SqlError(refusal)
        mark = self._capture.mark()
        version_before = self._schema_version()
        # An autocommit transaction has one statement: its savepoint is the statement's.
        savepoint = "rs_stmt" if txn.explicit else txn.savepoint
        if txn.explicit:
            self._internal("SAVEPOINT rs_stmt")
        self._auto_ids.issued.clear()
        self._capture.error = None
        cursor = self._writer.cursor()
        try:
            with self._authorizer.statement(trusted=trusted):
                columns, rows = run_statement(cursor, sql, binds)
                changes = self._writer.changes()
        except SqlError:
            self._undo_statement(savepoint, mark)
            raise
        except apsw.Error as exc:
            self._undo_statement(savepoint, mark)
            raise SqlError(self._authorizer.deny_reason or sql_message(exc)) from exc
        except (TypeError, ValueError, OverflowError) as exc:
            self._undo_statement(savepoint, mark)
            raise SqlError(f"bad bind value: {exc}") from exc
        if self._capture.error:
            self._undo_statement(savepoint, mark)
            raise SqlError(self._capture.error)
        if self._schema_version() != version_before:
            self._ddl_statement(txn, sql, savepoint, mark, trusted=trusted)
        if txn.explicit:
            self._internal("RELEASE rs_stmt")
        txn.statements += 1
        auto_ids = list(self._auto_ids.issued)
        return StatementResult(
            columns=columns, rows=rows, row_count=changes + len(auto_ids), autoincrement_ids=auto_ids
        )

    def _undo_statement(self, savepoint: str, mark: int) -> None:
        self._internal(f"ROLLBACK TO {savepoint}")
        if savepoint == "rs_stmt":
            self._internal("RELEASE rs_stmt")
        self._capture.truncate(mark)
        self._writer_tables.invalidate()

    def _schema_version(self) -> int:
        return self._writer.execute("PRAGMA main.schema_version", can_cache=False).fetchone()[0]

    def _ddl_statement(self, txn: LocalTxn, sql: str, savepoint: str, mark: int, *, trusted: bool = False) -> None:
        """Validate a schema change and turn it into the transaction's DDL payload."""
        self._schema.invalidate()
        touched = self._schema.touched_tables()
        local = bool(touched) and all(t in self.config.local_tables for t in touched)
        error = schema_change_refusal(
            self._writer,
            self._writer_tables,
            touched=touched,
            local=local,
            changed_tables=(row.table for row in self._capture.rows[mark:]),
            explicit=txn.explicit,
            trusted=trusted,
            config=self.config,
        )
        if error:
            self._undo_statement(savepoint, mark)
            raise SqlError(error)
        self._capture.truncate(mark)
        after = self._schema.hash_of(self._writer)
        txn.ddl = DdlPayload(hlc=0, sql=sql, hash_before=self._schema.hash, hash_after=after)
        txn.ddl_local = local
        self._schema.hash = after

    def commit(self, txn: LocalTxn) -> Committed | None:
        """Finish a transaction: stamp it and queue its WAL records (durable after flush)."""
        if txn.done:
            raise SqlError("the transaction is already finished")
        rows = self._capture.take(txn.capture_mark)
        stamp = self.hlc.now(self._clock_ms())
        shared = [r for r in rows if r.table not in self.config.local_tables]
        parts: list[tuple[RecordType, int, bytes]] = []
        if txn.ddl is not None:
            payload = DdlPayload(
                hlc=stamp, sql=txn.ddl.sql, hash_before=txn.ddl.hash_before, hash_after=txn.ddl.hash_after
            )
            parts.append((RecordType.DDL, LOCAL_ORIGIN if txn.ddl_local else self._id, payload.pack()))
        else:
            local = [r for r in rows if r.table in self.config.local_tables]
            for origin, part in ((self._id, shared), (LOCAL_ORIGIN, local)):
                if part:
                    dml = DmlPayload(hlc=stamp, schema_id=self._schema.schema_id, rows=part)
                    parts.append((RecordType.DML, origin, dml.pack()))
        size = sum(len(payload) for _, _, payload in parts)
        if size > self.config.max_txn_bytes:
            self.rollback(txn)
            raise SqlError(f"transaction of {size} bytes exceeds max_txn_bytes = {self.config.max_txn_bytes}")
        self._internal(f"RELEASE {txn.savepoint}")
        txn.done = True
        records = []
        for kind, origin, payload in parts:
            lsn = self._batches.pending.get(origin) + 1
            records.append(Record(type=kind, origin=origin, lsn=lsn, txn_id=stamp, payload=payload))
            self._batches.pending.follow(origin, lsn)
        if txn.ddl is not None:
            self._after_ddl(records[0])
            self._auto_ids.install()
        else:
            for row in shared:
                set_version(self._writer, row.table, row.key, (stamp, self._id), row.op is Op.DELETE)
            self._resolve_unique_locally(shared)
        batch = self._batches.current
        assert batch is not None
        batch.records.extend(records)
        return Committed(records=tuple(records), txn_id=stamp) if records else None

    def _resolve_unique_locally(self, rows: list[CapturedRow]) -> None:
        """Settle latent rows as appliers will (DESIGN 4.2): not captured, no triggers."""
        self._capture.paused = True
        self._writer.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
        try:
            resolve_after_local_write(self._writer_unique, self._writer_tables, rows)
        finally:
            self._writer.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 1)
            self._capture.paused = False

    def rollback(self, txn: LocalTxn) -> None:
        if txn.done:
            return
        self._internal(f"ROLLBACK TO {txn.savepoint}")
        self._internal(f"RELEASE {txn.savepoint}")
        self._capture.truncate(txn.capture_mark)
        if txn.ddl is not None:
            self._schema.invalidate()
            self._schema.hash = self._schema.hash_of(self._writer)
        txn.done = True

    def _after_ddl(self, record: Record) -> None:
        batch = self._batches.current
        assert batch is not None
        self._schema.ddl_applied(batch.conn, record.origin, record.lsn)
        self._auto_ids.stale = True

    # ------------------------------------------------------------------ durability

    def flush(self) -> list[Record]:
        """Make the batch durable: the WAL first, then one SQLite commit."""
        if self._batches.current is None:
            return []
        records = self._batches.flush()
        if self._auto_ids.stale:
            self._auto_ids.install()
        return records

    # ------------------------------------------------------------------ apply

    def apply(self, record: Record, *, own_allowed: bool = False) -> bool:
        """Apply a row of another origin once; False when it is a copy already held.
        `own_allowed` admits rows of our own origin: only the start-up fetch of rows we
        lost (DESIGN 4.4) may use it."""
        return self._records.apply(record, log_records=True, own_allowed=own_allowed)

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

    def query(self, sql: str, binds: Sequence[Any] | dict[str, Any] = ()) -> StatementResult | None:
        """Run a statement on the reader connection; None when it turns out to write."""
        cursor = self._reader.cursor()
        try:
            columns, rows = run_statement(cursor, sql, binds)
        except apsw.ReadOnlyError:
            return None
        except apsw.Error as exc:
            raise SqlError(sql_message(exc)) from exc
        except (TypeError, ValueError, OverflowError) as exc:
            raise SqlError(f"bad bind value: {exc}") from exc
        return StatementResult(columns=columns, rows=rows, row_count=None, autoincrement_ids=[])

    # ------------------------------------------------------------------ checkpoints

    def checkpoint(self, sync_wal: Callable[[], None] | None = None) -> Path:
        """A consistent copy of the database, made on a reader; its vclock is inside it. It is
        published only after the WAL was fsynced, whatever `wal_mode` says (FINDINGS F2).
        `sync_wal` replaces `Wal.sync` for a caller that runs this off the thread that
        appends, since a sync must not race an append."""
        return checkpoints.make(
            self._connect(readonly=True),
            self.config.snap_dir,
            keep=self.config.checkpoint_count,
            sync_wal=sync_wal or self._wal.sync,
            log=self._log,
        )

    def checkpoints(self) -> list[tuple[Path, VClock]]:
        return checkpoints.listing(self.config.snap_dir)

    def newest_checkpoint(self) -> tuple[Path, VClock] | None:
        """The newest checkpoint whose later rows are all still in the WAL, with its vclock:
        what a join can be served from (DESIGN 4.4). None when the log no longer reaches
        back to any checkpoint."""
        return checkpoints.newest_usable(self.config.snap_dir, self._wal_start(), self._wal.vclock)

    def _wal_start(self) -> VClock:
        segments = self._wal.segments()
        return segments[0][1] if segments else VClock()

    # ------------------------------------------------------------------ inspection

    def versions(self, table: str) -> dict[str, tuple[int, int, bool]]:
        """Every key's version `(hlc, origin, deleted)` in a table, as committed."""
        return {
            key: (hlc + HLC_SQL_OFFSET, origin, bool(deleted))
            for key, hlc, origin, deleted in self._reader.execute(
                "SELECT key, hlc, origin, deleted FROM _rs_version WHERE tbl = ?", (table,)
            )
        }

    def table_digest(self) -> dict[str, int]:
        """Per-table digest of contents and versions, to compare members."""
        return checkpoints.digest(self._reader, self.config.local_tables)

    def close(self) -> None:
        self._batches.close()
        self._close_connections()
        self._wal.close()

