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
from pathlib import Path
from typing import Any

import apsw

from replicaset.core.hlc import HLC
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.apply import HLC_SQL_OFFSET, RowApplier
from replicaset.storage.apply_record import RecordApplier
from replicaset.storage.auto_ids import AutoIds
from replicaset.storage.batch import Batch, Batches, BatchKind
from replicaset.storage.config import EngineConfig
from replicaset.storage.errors import EngineFatal, SqlError
from replicaset.storage.rows import LOCAL_ORIGIN
from replicaset.storage.schema import INTERNAL_DDL, SchemaState, TableCache
from replicaset.storage.statements import is_read, run_statement, sql_message
from replicaset.storage.transactions import Committed, LocalTxn, StatementResult, Transactions
from wal import Record, RowsUnavailable, VClock, Wal

REPLAY_BATCH_ROWS = 1000

Logger = Callable[..., None]


def _no_log(event: str, **fields: Any) -> None:
    return None


class Engine:
    def __init__(self, config: EngineConfig, clock_ms: Callable[[], int], log: Logger) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self._log = log
        self._id = config.instance_id
        self._wal: Wal

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
        self._transactions = Transactions(
            config=self.config,
            conn=self._writer,
            tables=self._writer_tables,
            schema=self._schema,
            auto_ids=self._auto_ids,
            batches=self._batches,
            hlc=self.hlc,
            clock_ms=self._clock_ms,
        )
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
        self._auto_ids = AutoIds(
            writer, self._writer_tables, instance_id=self._id, mode=self.config.auto_id_mode
        )

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

    def begin(self, *, explicit: bool = False) -> LocalTxn:
        """Open a client transaction in the current local batch."""
        return self._transactions.begin(explicit=explicit)

    def execute(
        self, txn: LocalTxn, sql: str, binds: Sequence[Any] | dict[str, Any] = (), *, trusted: bool = False
    ) -> StatementResult:
        """Run one client statement in its own savepoint; a failure leaves nothing behind.
        `trusted` statements come from the node itself (system tables) and skip the authorizer."""
        return self._transactions.execute(txn, sql, binds, trusted=trusted)

    def commit(self, txn: LocalTxn) -> Committed | None:
        """Finish a transaction: stamp it and queue its WAL records (durable after flush)."""
        return self._transactions.commit(txn)

    def rollback(self, txn: LocalTxn) -> None:
        self._transactions.rollback(txn)

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

