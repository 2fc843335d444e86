"""Client transactions on the writer connection, from BEGIN to their queued WAL records.

Theory of operation (docs/design/README.md §4.1, 4.2). A transaction is a SAVEPOINT inside the open local
batch's SQLite transaction, and each statement of a stream transaction a SAVEPOINT inside
that: a failed statement is rolled back alone, with the rows the preupdate hook captured
for it, and leaves its transaction as it was. A statement that changed the schema is
judged once it ran (`statements.schema_change_refusal`) and becomes the transaction's DDL
payload, alone in it. `commit` gives the transaction its HLC stamp and, per origin, the
next LSN of the pending vclock (its rows of local tables go to origin 0), writes the row
versions, settles latent unique rows as an applier will, and queues the records in the
batch; they are durable, and the client may be answered, only after the batch's flush.

A client statement past `statement_timeout_s` is stopped by the connection's progress
handler. A read stops alone; SQLite answers a stopped write by rolling back the whole
SQLite transaction, which is the batch: then the batch is abandoned (`BatchAbandoned`) and
its queued transactions, never durable, fail with it (the writer's tickets), as they would
after a failed WAL append; Tarantool's cascading rollback after a WAL error is the same.

A stream transaction never keeps its savepoint open while its client thinks: that would
hold the one writer, and every decided quorum row and applied row behind it. After each
statement its rows are captured and rolled back (`capture`); the next statement, and a
COMMIT at ONE, first `resume` it: every key it wrote must still be as it was when it
wrote it (the same version, or for a local table the same row), else it conflicts at
once, as a PREPARE meeting a newer version does on any member; so does a table it read
(in a statement that did not write it) and another transaction wrote since, which keeps a
read-then-write serializable on this member; then its rows are written again as they were, with triggers off (their effects are among the rows), and the
statement runs on top of them. A stream transaction holds no DDL (`schema_change_refusal`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from replicaset.core.hlc import HLC
from replicaset.storage.apply import (
    UniqueResolver,
    get_version,
    resolve_after_local_write,
    set_version,
    write_unversioned,
)
from replicaset.storage.auto_ids import AutoIds
from replicaset.storage.batch import Batches, BatchKind
from replicaset.storage.capture import Capture, Change
from replicaset.storage.config import EngineConfig
from replicaset.storage.errors import (
    ApplyError,
    BatchAbandoned,
    DdlNeedsLock,
    EngineFatal,
    SqlError,
    StatementTimeout,
    TxnConflict,
)
from replicaset.storage.keys import SCHEMA_KEY
from replicaset.storage.renames import touched
from replicaset.storage.returning import ReturningRows
from replicaset.storage.rows import CapturedRow, DdlPayload, DmlPayload, Op
from replicaset.storage.schema import SchemaState, TableCache, quote
from replicaset.storage.statements import (
    Authorizer,
    first_word,
    run_statement,
    schema_change_refusal,
    sql_message,
    text_refusal,
)
from wal import LOCAL_ORIGIN, Record, RecordType


@dataclass(frozen=True, kw_only=True, slots=True)
class StatementResult:
    columns: list[tuple[str, str | None]]
    rows: list[list[Any]]
    row_count: int | None
    autoincrement_ids: list[int]
    inserted_rowid: int | None = None  # the rowid SQLite's last_insert_rowid() tells after it, if it inserted


@dataclass(kw_only=True)
class LocalTxn:
    savepoint: str
    capture_mark: int
    explicit: bool
    quorum: bool = False  # to be captured: a DDL statement in it takes the DDL lock
    statements: int = 0
    ddl: DdlPayload | None = None
    ddl_local: bool = False
    done: bool = False
    # A stream transaction's tables read and not written by a statement, with
    # `Batches.writes_seq` when first read: it conflicts once another writes one of them.
    read_tables: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Captured:
    """A transaction's rows, taken back out of SQLite, and the version of each key it
    writes as it was read (None: no version, a new key): a QUORUM or ALL transaction's
    until it is decided, a stream transaction's between two of its statements. A DDL
    statement's transaction has no rows: at QUORUM it holds the set's DDL lock,
    `SCHEMA_KEY`, read at the schema id, and its decided row is `ddl`. `schema_id` is
    the schema the rows name, which their decided row names too."""

    rows: tuple[CapturedRow, ...]
    reads: dict[tuple[str, str], tuple[int, int] | None]
    schema_id: tuple[int, int]
    ddl: DdlPayload | None = None
    read_tables: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True, slots=True)
class Committed:
    """What a client's transaction became: its WAL records, durable after `flush`."""

    records: tuple[Record, ...]
    txn_id: int


# A stream transaction's read of what `Engine.access` cannot name: any write conflicts with it.
ANY_TABLE = "*"
CHECK_STEPS = 10_000  # SQLite VM steps between two looks at the clock: a short statement never looks
_MAY_NOT_BE_MODIFIED = re.compile(r"table (\S+) may not be modified")


class Transactions:
    def __init__(
        self,
        *,
        config: EngineConfig,
        conn: apsw.Connection,
        tables: TableCache,
        schema: SchemaState,
        auto_ids: AutoIds,
        batches: Batches,
        hlc: HLC,
        clock_ms: Callable[[], int],
    ) -> None:
        self._config = config
        self._id = config.instance_id
        self._conn = conn
        self._tables = tables
        self._schema = schema
        self._auto_ids = auto_ids
        self._batches = batches
        self._hlc = hlc
        self._clock_ms = clock_ms
        self._returning = ReturningRows(conn)
        self._capture = Capture(conn, tables, observer=self._observe)
        auto_ids.before_assigned = self._capture.settle_read
        self._authorizer = Authorizer()
        conn.authorizer = self._authorizer
        # Statements of the writer's own resolution are never cached: they must be
        # prepared while triggers are off, as on the apply connection.
        self._unique = UniqueResolver(conn, cache_statements=False)
        self._deadline = math.inf
        conn.set_progress_handler(self._overdue, CHECK_STEPS)

    def begin(self, *, explicit: bool = False, quorum: bool = False) -> LocalTxn:
        """Open a client transaction in the current local batch; a `quorum` one is to be
        captured rather than committed. One savepoint name serves every transaction (so
        its statements stay cached): the writer runs one transaction at a time."""
        self._batches.open(BatchKind.LOCAL)
        txn = LocalTxn(savepoint="rs_txn", capture_mark=self._capture.mark(), explicit=explicit,
                       quorum=quorum)
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
        if first_word(sql) == "ALTER":
            # SQLite refuses to rename or drop a column the auto-id trigger names: the
            # triggers go for the statement and are built again after it (`install`).
            self._auto_ids.drop()
            self._auto_ids.stale = True
        self._auto_ids.start()
        self._returning.start()
        inserted_before = self._conn.last_insert_rowid()
        self._capture.error = None
        self._capture.temp_written = False
        cursor = self._conn.cursor()
        limit = self._config.statement_timeout_s
        try:
            with self._authorizer.statement(trusted=trusted):
                self._deadline = time.monotonic() + limit if limit and not trusted else math.inf
                try:
                    columns, rows = run_statement(cursor, sql, binds, self._statement_started)
                finally:
                    self._deadline = math.inf
                changes = self._conn.changes()
            self._capture.settle_virtual()
            error = self._capture.error or self._auto_ids.error
            if error is None and txn.explicit and self._capture.temp_written:
                error = ("a stream transaction cannot write TEMP tables: its rows wait outside SQLite between "
                         "its statements, and a TEMP table's are not captured; write it outside the stream")
            if error is None:
                rows = self._returning.complete(rows)
        except SqlError:
            self._undo_statement(savepoint, mark)
            raise
        except apsw.InterruptError as exc:
            self._stopped(txn, savepoint, mark, limit, exc)
        except apsw.Error as exc:
            self._undo_statement(savepoint, mark)
            raise SqlError(self._authorizer.deny_reason or self._shadow_refusal(exc) or sql_message(exc)) from exc
        except (TypeError, ValueError, OverflowError) as exc:
            self._undo_statement(savepoint, mark)
            raise SqlError(f"bad bind value: {exc}") from exc
        except KeyError as exc:  # apsw: a named parameter the binds do not hold
            self._undo_statement(savepoint, mark)
            raise SqlError(f"no value bound for parameter :{exc.args[0]}") from exc
        if error:
            self._undo_statement(savepoint, mark)
            raise SqlError(error)
        if self._schema_version() != version_before:
            self._ddl_statement(txn, sql, savepoint, mark, trusted=trusted)
            changes = 1  # Tarantool's row_count for DDL; SQLite's count is a previous statement's
        if txn.explicit:
            self._internal("RELEASE rs_stmt")
        txn.statements += 1
        return StatementResult(
            columns=columns,
            rows=rows,
            row_count=changes + self._auto_ids.statement_rows,
            autoincrement_ids=list(self._auto_ids.issued),
            inserted_rowid=self._inserted_rowid(inserted_before),
        )

    def _inserted_rowid(self, before: int) -> int | None:
        """What last_insert_rowid() tells after the statement: the last id the auto-id
        trigger assigned (SQLite's value goes back once a trigger ends), else the rowid
        SQLite last inserted, if the statement moved it."""
        if self._auto_ids.issued:
            return next(reversed(self._auto_ids.issued))
        after = self._conn.last_insert_rowid()
        return after if after != before else None

    def _shadow_refusal(self, exc: apsw.Error) -> str | None:
        """SQLite's defensive mode says only "table X may not be modified" of a shadow table:
        say whose it is and where to write instead."""
        match = _MAY_NOT_BE_MODIFIED.search(str(exc))
        info = self._tables.get(match.group(1)) if match else None
        if info is None or info.shadow_of is None:
            return None
        return (f"table {info.name!r} is a shadow table of virtual table {info.shadow_of.name!r}, kept by its "
                f"module on each member: write to {info.shadow_of.name!r} instead")

    def _statement_started(self, cursor: apsw.Cursor, sql: str, binds: Any, rows_before: int) -> None:
        """One statement of a client request is about to run (a request may hold several)."""
        self._auto_ids.statement_started(sql)
        self._returning.statement_started(cursor, sql, binds, rows_before)
        self._capture.inserting = first_word(sql) in ("INSERT", "REPLACE")

    def _observe(self, change: Change) -> None:
        self._returning.observe(change, self._auto_ids.observe(change))

    def _overdue(self) -> bool:
        return time.monotonic() > self._deadline

    def _stopped(self, txn: LocalTxn, savepoint: str, mark: int, limit: float, exc: apsw.InterruptError) -> None:
        """A statement stopped at the time limit: undone alone when SQLite kept the
        transaction (a read), or the batch abandoned when SQLite rolled it all back."""
        why = f"the statement ran past sql.statement_timeout_s = {limit:g} s and was stopped"
        if not self._conn.get_autocommit():
            self._undo_statement(savepoint, mark)
            raise StatementTimeout(why) from exc
        self._batches.abandon()
        self._capture.truncate(0)
        self._tables.invalidate()
        self._auto_ids.install()  # what a local-table DDL of the batch installed went with it
        txn.done = True
        raise BatchAbandoned(why) from exc

    def _undo_statement(self, savepoint: str, mark: int) -> None:
        if self._conn.get_autocommit():
            # The statement ended the SQLite transaction that the batch's committed, not yet
            # flushed, transactions share: none of them can be made durable now. Refused by
            # its text (text_refusal); if something still gets there, stop rather than
            # acknowledge them: recovery starts from the WAL, which never held them.
            raise EngineFatal("a client statement rolled back the writer's batch transaction")
        self._internal(f"ROLLBACK TO {savepoint}")
        if savepoint == "rs_stmt":
            self._internal("RELEASE rs_stmt")
        self._capture.truncate(mark)
        self._tables.invalidate()

    def _schema_version(self) -> int:
        return self._conn.execute("PRAGMA main.schema_version").fetchone()[0]

    def _ddl_statement(self, txn: LocalTxn, sql: str, savepoint: str, mark: int, *, trusted: bool = False) -> None:
        """Validate a schema change and turn it into the transaction's DDL payload."""
        self._schema.invalidate()
        touched = self._schema.touched_tables()
        local = bool(touched) and all(t in self._config.local_tables for t in touched)
        crossing = sorted(touched & self._config.local_tables)
        if crossing and not local:
            # A rename between the kinds: peers never had the local table, and this member
            # would keep the replicated one's rows to itself.
            self._undo_statement(savepoint, mark)
            raise SqlError(f"table {crossing[0]!r} is local to each member: a statement may not rename a "
                           "table between local_tables and the replicated tables")
        error = schema_change_refusal(
            self._conn,
            self._tables,
            sql=sql,
            touched=touched,
            local=local,
            changed_tables=(row.table for row in self._capture.rows[mark:]),
            explicit=txn.explicit,
            trusted=trusted,
            config=self._config,
        )
        if error:
            self._undo_statement(savepoint, mark)
            raise SqlError(error)
        if self._config.ddl_lock and not local and not trusted and not txn.quorum:
            self._undo_statement(savepoint, mark)
            raise DdlNeedsLock("a DDL statement takes the replica set's DDL lock: run it as a quorum transaction")
        self._capture.truncate(mark)
        after = self._schema.hash_of(self._conn)
        txn.ddl = DdlPayload(hlc=0, sql=sql, hash_before=self._schema.hash, hash_after=after)
        txn.ddl_local = local
        self._schema.hash = after

    def commit(self, txn: LocalTxn) -> Committed | None:
        """Finish a transaction: stamp it and queue its WAL records (durable after flush)."""
        if txn.done:
            raise SqlError("the transaction is already finished")
        rows = self._capture.take(txn.capture_mark)
        refusal = self._deferred_refusal() or (self._quorum_refusal(rows) if txn.quorum else None)
        if refusal:  # a quorum one is decided alone (core.quorum.decides_alone)
            self.rollback(txn)
            raise SqlError(refusal)
        stamp = self._hlc.now(self._clock_ms())
        shared = [r for r in rows if r.table not in self._config.local_tables]
        parts: list[tuple[RecordType, int, bytes]] = []
        if txn.ddl is not None:
            payload = DdlPayload(
                hlc=stamp, sql=txn.ddl.sql, hash_before=txn.ddl.hash_before, hash_after=txn.ddl.hash_after
            )
            parts.append((RecordType.DDL, LOCAL_ORIGIN if txn.ddl_local else self._id, payload.pack()))
        else:
            local = [r for r in rows if r.table in self._config.local_tables]
            for origin, part in ((self._id, shared), (LOCAL_ORIGIN, local)):
                if part:
                    dml = DmlPayload(hlc=stamp, schema_id=self._schema.schema_id, rows=part)
                    parts.append((RecordType.DML, origin, dml.pack()))
        size = sum(len(payload) for _, _, payload in parts)
        if size > self._config.max_txn_bytes:
            self.rollback(txn)
            raise SqlError(f"transaction of {size} bytes exceeds max_txn_bytes = {self._config.max_txn_bytes}")
        self._internal(f"RELEASE {txn.savepoint}")
        txn.done = True
        self._batches.wrote({row.table for row in rows})
        records = []
        for kind, origin, payload in parts:
            lsn = self._batches.pending.get(origin) + 1
            records.append(Record(type=kind, origin=origin, lsn=lsn, txn_id=stamp, payload=payload))
            self._batches.pending.follow(origin, lsn)
        if txn.ddl is not None:
            self._schema.ddl_applied(self._conn, records[0].origin, records[0].lsn, txn.ddl.sql)
            self._auto_ids.install()
        else:
            own_lsn = next((r.lsn for r in records if r.origin == self._id), 0)
            for row in shared:
                set_version(self._conn, row.table, row.key, (stamp, self._id), row.op is Op.DELETE, own_lsn)
            self._resolve_unique_locally(shared)
        batch = self._batches.current
        assert batch is not None
        batch.records.extend(records)
        return Committed(records=tuple(records), txn_id=stamp) if records else None

    def capture(self, txn: LocalTxn) -> Captured:
        """The transaction's rows with the versions read, then the transaction rolled back:
        a QUORUM or ALL transaction's changes reach SQLite only as its decided row, on every
        member alike (docs/design/README.md §4.5), and a stream transaction's wait for its
        next statement outside SQLite (`resume`)."""
        if txn.done:
            raise SqlError("the transaction is already finished")
        rows = tuple(self._capture.rows[txn.capture_mark:])
        refusal = None
        if txn.ddl is not None:  # an autocommit QUORUM statement: a stream refuses DDL
            ddl = txn.ddl
            self.rollback(txn)
            if txn.ddl_local:
                raise SqlError("a DDL statement on local tables changes this member only: run it at consistency ONE")
            origin, lsn = self._schema.schema_id
            return Captured(rows=(), reads={SCHEMA_KEY: (lsn, origin) if lsn else None}, ddl=ddl,
                            schema_id=(origin, lsn))
        refusal = self._quorum_refusal(rows) if txn.quorum else None
        if refusal is None and not txn.explicit:  # a stream's statements may leave them to later ones
            refusal = self._deferred_refusal()
        if refusal is None:
            size = len(DmlPayload(hlc=0, schema_id=self._schema.schema_id, rows=list(rows)).pack())
            if size > self._config.max_txn_bytes:
                refusal = f"transaction of {size} bytes exceeds max_txn_bytes = {self._config.max_txn_bytes}"
        reads = {(r.table, r.key): get_version(self._conn, r.table, r.key) for r in rows}
        self.rollback(txn)
        if refusal:
            raise SqlError(refusal)
        return Captured(rows=rows, reads=reads, read_tables=dict(txn.read_tables), schema_id=self._schema.schema_id)

    def check_deferred(self, captured: Captured) -> None:
        """A stream transaction at QUORUM or ALL about to be decided: `SqlError` when its rows
        leave a DEFERRABLE INITIALLY DEFERRED foreign key unresolved, as SQLite's COMMIT
        would (the decided row is applied with foreign keys off everywhere). Only a schema
        that declares such a key costs the rows written again."""
        if self._conn.execute("SELECT 1 FROM sqlite_schema WHERE sql LIKE '%DEFERRED%' LIMIT 1").fetchone() is None:
            return
        txn = self.resume(captured, quorum=True)
        try:
            refusal = self._deferred_refusal()
        finally:
            self.rollback(txn)
        if refusal:
            raise SqlError(refusal)

    def _deferred_refusal(self) -> str | None:
        """SQLite checks a DEFERRABLE INITIALLY DEFERRED foreign key at COMMIT, which for us is
        the batch's, after the WAL append: a transaction leaving one unresolved is refused at
        its own end instead, as SQLite would refuse its COMMIT."""
        if self._conn.status(apsw.SQLITE_DBSTATUS_DEFERRED_FKS)[0]:
            return "FOREIGN KEY constraint failed"
        return None

    def _quorum_refusal(self, rows: Sequence[CapturedRow]) -> str | None:
        local = next((r.table for r in rows if r.table in self._config.local_tables), None)
        if local is None:
            return None
        return f"table {local!r} is local to each member: a quorum transaction writes replicated tables only"

    def note_reads(self, txn: LocalTxn, reads: Iterable[str], writes: Iterable[str]) -> None:
        """A statement of a stream transaction read `reads`: a later write of one by
        another transaction makes this one conflict, as a later write of a row it wrote
        does. A table the statement also writes is left to its rows' versions."""
        written = set(writes)
        for table in reads:
            if table not in written:
                txn.read_tables.setdefault(table, self._batches.writes_seq)

    def resume(self, captured: Captured | None, *, quorum: bool) -> LocalTxn:
        """A stream transaction open again with the rows `capture` took out, for its next
        statement or its COMMIT; `TxnConflict` when another transaction committed a key it
        wrote since (nothing of it remains then)."""
        txn = self.begin(explicit=True, quorum=quorum)
        if captured is None:
            return txn
        txn.read_tables = dict(captured.read_tables)
        try:
            self.check_unchanged(captured)
            self._write_again(captured.rows)
        except BaseException:
            self.rollback(txn)
            raise
        return txn

    def check_unchanged(self, captured: Captured) -> None:
        """`TxnConflict` unless every key the transaction wrote is as it was when it first
        wrote it (a replicated one at the same version, a local one, which has no version,
        holding the same row), no table it read was written since, and no table it wrote
        was renamed, dropped or had a column renamed or dropped since."""
        if captured.schema_id != self._schema.schema_id:
            changes = self._schema.log.changes_since(self._conn, captured.schema_id)
            table = touched(changes, (row.table for row in captured.rows))
            if table is not None:
                raise TxnConflict(f"Transaction has been aborted by conflict: table {table!r} was renamed, dropped "
                                  "or had a column renamed or dropped since this one wrote it; retry it")
        for table, seq in captured.read_tables.items():
            written = self._batches.writes_seq if table == ANY_TABLE else self._batches.table_writes.get(table, 0)
            if written > seq:
                what = ("a table was written by another transaction since this one read a TEMP table (whose reads "
                        "count as reads of every table)") if table == ANY_TABLE else (
                        f"table {table!r} was written by another transaction since this one read it")
                raise TxnConflict(f"Transaction has been aborted by conflict: {what}; retry it")
        local_tables = self._config.local_tables
        for (table, key), version in captured.reads.items():
            if table not in local_tables and get_version(self._conn, table, key) != version:
                raise TxnConflict(f"Transaction has been aborted by conflict: row {key!r} of table {table!r} was "
                                  "changed by another transaction since this one wrote it; retry it")
        first: dict[tuple[str, str], CapturedRow] = {}
        for row in captured.rows:
            info = self._tables.get(row.table)
            # A local virtual table's captured row is its image after the statement, not a
            # change from a known one: it is not checked.
            if row.table in local_tables and (info is None or info.virtual is None):
                first.setdefault((row.table, row.key), row)
        for row in first.values():
            if self._stored_image(row) != (None if row.op is Op.INSERT else row.old):
                raise TxnConflict(f"Transaction has been aborted by conflict: row {row.key!r} of local table "
                                  f"{row.table!r} was changed by another transaction since this one wrote it; retry it")

    def _stored_image(self, row: CapturedRow) -> dict[str, Any] | None:
        """The committed row at `row`'s key, by the columns its image names; None if absent."""
        info = self._tables.get(row.table)
        image = (row.old if row.op is not Op.INSERT else row.new) or {}
        if info is None:
            return {"": "the table is gone"}
        columns = list(image)
        if info.pk_columns:
            where = " AND ".join(f"{quote(c)} IS ?" for c in info.pk_columns)
            key_values = [image.get(c) for c in info.pk_columns]
        else:
            where, key_values = "rowid = ?", [row.rowid]
        found = self._conn.execute(f"SELECT {', '.join(map(quote, columns))} FROM {quote(info.name)} WHERE {where}",
                                   key_values, can_cache=False).fetchone()
        return dict(zip(columns, found)) if found is not None else None

    def _write_again(self, rows: tuple[CapturedRow, ...]) -> None:
        """The transaction's rows as they were captured, with triggers off: what its
        triggers and cascades did is among them. Statements prepared while triggers are off
        are not cached, as in `_resolve_unique_locally`."""
        if not rows:
            return
        self._capture.paused = True
        self._conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
        try:
            for row in rows:
                info = self._tables.get(row.table)
                if info is None:
                    raise TxnConflict(f"Transaction has been aborted by conflict: table {row.table!r} is gone")
                try:
                    write_unversioned(self._conn, info, row, cache=False)
                except (apsw.ConstraintError, ApplyError) as exc:
                    raise TxnConflict(f"Transaction has been aborted by conflict: row {row.key!r} of table "
                                      f"{row.table!r} cannot be written again: {exc}; retry it") from exc
            self._capture.upkeep.flush()
        finally:
            self._capture.upkeep.discard()
            self._conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 1)
            self._capture.paused = False
        self._capture.rows.extend(rows)

    def _resolve_unique_locally(self, rows: list[CapturedRow]) -> None:
        """Settle latent rows as appliers will (docs/design/README.md §4.2): not captured, no triggers.
        Only tables with a UNIQUE constraint beyond a rowid key can hold latent rows, and
        turning triggers off and on expires every prepared statement of the connection
        (SQLite re-prepares, and re-authorizes, each on its next use): most writes touch
        none of those tables and skip it."""
        tables = self._tables
        if not any((info := tables.get(row.table)) is not None and info.unique_groups for row in rows):
            return
        self._capture.paused = True
        self._conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
        try:
            resolve_after_local_write(self._unique, self._tables, rows)
            self._capture.upkeep.flush()
        finally:
            self._capture.upkeep.discard()
            self._conn.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 1)
            self._capture.paused = False

    def rollback(self, txn: LocalTxn) -> None:
        """Undo a transaction not finished yet; a finished one is queued in the batch, which
        only a failed flush takes back."""
        if txn.done:
            return
        self._internal(f"ROLLBACK TO {txn.savepoint}")
        self._internal(f"RELEASE {txn.savepoint}")
        self._capture.truncate(txn.capture_mark)
        if txn.ddl is not None:
            self._schema.invalidate()
            self._schema.hash = self._schema.hash_of(self._conn)
        txn.done = True

    def _internal(self, sql: str) -> None:
        """The engine's own statements (savepoints), from the statement cache: a client
        cannot reuse them, since `text_refusal` refuses transaction control by its text."""
        self._conn.execute(sql)
