"""Applying WAL records: rows of other origins, and our own at replay, each exactly once.

Apply-once (docs/design/README.md §4.3) is decided by the one admission rule (`replicaset.core.admission`)
against the pending vclock, which counts what is applied or queued in the open batch: a
copy of a record held already is dropped, the next one is taken, and one past the next is
a gap, never papered over. A data row also waits (SchemaPending) until the DDL row it was
written against is held here. Each record runs in its own SAVEPOINT of the apply batch, so
one that fails leaves nothing behind and the batch goes on without it. A DDL row carries
the schema hash before and after it: a member whose schema differs stops that stream
rather than diverge silently (docs/design/README.md §4.6). The rows themselves are applied by version in
`apply.py`. The row of a quorum transaction (a DDL row too, decided under the DDL lock)
also enters `_rs_quorum`, in the same savepoint: which transactions have their row here
is then exactly what SQLite holds, crash or not, and a restarted coordinator reads its
decisions there.
"""

from __future__ import annotations

from collections.abc import Callable

import apsw

from replicaset.core.admission import Admission, admit
from replicaset.core.hlc import HLC
from replicaset.storage.apply import HLC_SQL_OFFSET, RowApplier
from replicaset.storage.auto_ids import AutoIds
from replicaset.storage.batch import Batch, Batches, BatchKind
from replicaset.storage.errors import ApplyError, GapError, SchemaDivergence, SchemaPending
from replicaset.storage.renames import carry
from replicaset.storage.rows import CapturedRow, DdlPayload, DmlPayload
from replicaset.storage.schema import SchemaState, TableCache
from wal import LOCAL_ORIGIN, Record, RecordType

_QUORUM_ROW = "INSERT INTO _rs_quorum(txn_id, origin, lsn) VALUES (?, ?, ?)"


class RecordApplier:
    def __init__(
        self,
        *,
        instance_id: int,
        batches: Batches,
        rows: RowApplier,
        tables: TableCache,
        schema: SchemaState,
        auto_ids: AutoIds,
        hlc: HLC,
        clock_ms: Callable[[], int],
    ) -> None:
        self._id = instance_id
        self._batches = batches
        self._rows = rows
        self._tables = tables
        self._schema = schema
        self._auto_ids = auto_ids
        self._hlc = hlc
        self._clock_ms = clock_ms

    def apply(self, record: Record, *, log_records: bool, own_allowed: bool, skip: bool = False) -> bool:
        """Take `record` into the apply batch; False when it is held already. `skip` holds
        it without its changes; `log_records=False` is for records read from our own WAL."""
        origin, lsn = record.origin, record.lsn
        if origin == self._id and not own_allowed:
            return False
        held = self._batches.pending.get(origin)
        admission = admit(held, lsn)
        if admission is Admission.HELD:
            return False
        if admission is Admission.GAP:
            raise GapError(f"row {origin}:{lsn} arrived but {origin}:{held + 1} is the next expected")
        try:
            payload = DmlPayload.unpack(record.payload) if record.type == RecordType.DML and not skip else None
        except ValueError as exc:
            raise ApplyError(f"row {origin}:{lsn} has a bad payload: {exc}") from exc
        if payload is not None:
            schema_origin, schema_lsn = payload.schema_id
            if schema_origin != origin and self._batches.pending.get(schema_origin) < schema_lsn:
                raise SchemaPending(
                    f"row {origin}:{lsn} needs schema {schema_origin}:{schema_lsn}, not applied here yet",
                    payload.schema_id,
                )
        batch = self._batches.open(BatchKind.APPLY, log_records=log_records)
        conn = batch.conn
        conn.execute("SAVEPOINT rs_apply")
        try:
            if skip:
                pass
            elif record.type == RecordType.DDL:
                self._apply_ddl(batch, record)
            elif payload is not None:
                self._hlc.receive(payload.hlc, self._clock_ms())
                rows = self._carried(conn, payload) if origin != LOCAL_ORIGIN else payload.rows
                self._rows.apply_rows(rows, (payload.hlc, origin), versioned=origin != LOCAL_ORIGIN, lsn=lsn)
                self._batches.wrote({row.table for row in rows})
                self._quorum_row(batch, payload.quorum_txn, origin, lsn)
            else:
                raise ApplyError(f"row {origin}:{lsn} has unknown type {record.type}")
        except (ApplyError, ValueError, apsw.Error) as exc:
            conn.execute("ROLLBACK TO rs_apply")
            conn.execute("RELEASE rs_apply")
            if isinstance(exc, ApplyError):
                raise
            raise ApplyError(f"row {origin}:{lsn} cannot be applied: {exc}") from exc
        conn.execute("RELEASE rs_apply")
        self._batches.pending.follow(origin, lsn)
        batch.records.append(record)
        if record.type == RecordType.DDL and not skip:
            self._schema.ddl_applied(conn, origin, lsn, DdlPayload.unpack(record.payload).sql)
            self._auto_ids.stale = True
        return True

    def _carried(self, conn: apsw.Connection, payload: DmlPayload) -> list[CapturedRow]:
        """The rows as the schema in force names them: a row written before a rename or a
        drop applied here is carried through it (docs/decisions.md, "Renames and dropped
        columns follow the schema id")."""
        if payload.schema_id == self._schema.schema_id:
            return payload.rows
        changes = self._schema.log.changes_since(conn, payload.schema_id)
        return carry(payload.rows, changes, lambda table: (info := self._tables.get(table)) and info.pk_columns)

    def _quorum_row(self, batch: Batch, quorum_txn: int | None, origin: int, lsn: int) -> None:
        if quorum_txn is not None:
            batch.conn.execute(_QUORUM_ROW, (quorum_txn - HLC_SQL_OFFSET, origin, lsn))
            batch.quorum_rows.append((quorum_txn, origin, lsn))

    def _apply_ddl(self, batch: Batch, record: Record) -> None:
        conn = batch.conn
        payload = DdlPayload.unpack(record.payload)
        self._hlc.receive(payload.hlc, self._clock_ms())
        local = record.origin == LOCAL_ORIGIN
        if not local and payload.hash_before != self._schema.hash:
            raise SchemaDivergence(
                f"DDL row {record.origin}:{record.lsn} was written against schema hash "
                f"{payload.hash_before:016x} but this member has {self._schema.hash:016x}"
            )
        self._auto_ids.drop()
        self._auto_ids.stale = True
        conn.execute(payload.sql)
        after = self._schema.hash_of(conn)
        if not local and after != payload.hash_after:
            raise SchemaDivergence(
                f"DDL row {record.origin}:{record.lsn} gave schema hash {after:016x}, "
                f"its origin had {payload.hash_after:016x}"
            )
        self._schema.hash = after
        self._quorum_row(batch, payload.quorum_txn, record.origin, record.lsn)
