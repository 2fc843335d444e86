"""Row-level change capture with SQLite's preupdate hook.

The hook fires for every row a statement changes, trigger and cascade changes included
(depth > 0), and also for changes SQLite later undoes: the engine marks the buffer before
each statement and truncates it back when the statement's savepoint is rolled back. SQLite
allows one hook a connection: an `observer` sees each change of a client table first
(auto ids and RETURNING follow the statement through it).
Virtual tables never reach the hook; their shadow tables do, and are member-local: the
rows of a virtual table that owns them are read back once the statement ran
(`settle_virtual`, replicaset.storage.virtual).
The hook cannot give the values of a table with VIRTUAL generated columns (apsw builds its
tuples over every column, and SQLite holds no value for a virtual one): such a change is a
`ReadChange`, whose stored columns are read from the table by rowid, the old ones in the
hook, before the change, and the new ones once it is made: at the next change (the hook
runs before it), when `rs_assigned` asks (auto_ids.py), or after the statement. Changes are
taken, and observers told, in the order they were made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw

from replicaset.storage.keys import intent_key
from replicaset.storage.rows import CapturedRow, Op
from replicaset.storage.schema import TableCache, TableInfo, is_internal, quote
from replicaset.storage.index_upkeep import IndexUpkeep


@dataclass(slots=True, kw_only=True)
class ReadChange:
    """A change of a table with VIRTUAL generated columns, in the hook's terms: observers
    take it for the `apsw.PreUpdate` it stands for. `old` and `new` hold the stored columns."""

    op: str
    depth: int
    table_name: str
    rowid: int
    rowid_new: int
    old: tuple[Any, ...] | None
    new: tuple[Any, ...] | None = None


# A row change as observers are told of it.
Change = apsw.PreUpdate | ReadChange


class Capture:
    def __init__(
        self, conn: apsw.Connection, tables: TableCache,
        observer: Callable[[Change], None] | None = None,
    ) -> None:
        self._conn = conn
        self._tables = tables
        self._observer = observer
        self.rows: list[CapturedRow] = []
        self.error: str | None = None
        # While paused (the writer's own resolution, triggers off), external-content
        # indexes are kept by `upkeep` instead of the client's triggers.
        self.paused = False
        self.upkeep = IndexUpkeep(conn, tables)
        self._virtual: dict[tuple[str, int], None] = {}  # rows of virtual tables the statement touched
        self.inserting = False  # the statement running is an INSERT (or REPLACE)
        self.temp_written = False  # a client's TEMP table was changed (no row of it is captured)
        self._unread: tuple[TableInfo, ReadChange] | None = None  # made, its new values not read yet
        conn.preupdate_hook(self._on_change)

    def mark(self) -> int:
        return len(self.rows)

    def truncate(self, mark: int) -> None:
        del self.rows[mark:]
        self._virtual.clear()
        self._unread = None

    def settle_read(self) -> None:
        """Take the last `ReadChange`, which is made by now, with its new values."""
        if self._unread is None:
            return
        (info, change), self._unread = self._unread, None
        change.new = self._read(info, change.rowid_new)
        if change.new is None:
            self.error = f"cannot read back the row of table {info.name!r} with rowid {change.rowid_new}"
            return
        self._take(info, change)

    def _read(self, info: TableInfo, rowid: int) -> tuple[Any, ...] | None:
        assert info.rowid_name is not None
        found = self._conn.execute(
            f"SELECT {', '.join(map(quote, info.stored_columns))} FROM main.{quote(info.name)}"
            f" WHERE {quote(info.rowid_name)} = ?", (rowid,)).fetchone()
        return tuple(found) if found is not None else None

    def settle_virtual(self) -> None:
        """After the statement: the last change of a table with VIRTUAL generated columns, and
        the rows of virtual tables the statement changed, as they are once it ran: an image
        where the row is, a delete where it is gone."""
        self.settle_read()
        if not self._virtual:
            return
        touched, self._virtual = self._virtual, {}
        for name, rowid in touched:
            info = self._tables.get(name)
            vt = info.virtual if info is not None else None
            if vt is None:
                self.error = f"cannot capture a change to virtual table {name!r}"
                return
            key = intent_key(name, (vt.key,), [rowid])
            found = self._conn.execute(vt.read_sql(), (rowid,)).fetchone()
            if found is None:
                self.rows.append(CapturedRow(table=name, op=Op.DELETE, key=key, old={vt.key: rowid}))
            else:
                self.rows.append(CapturedRow(table=name, op=Op.INSERT, key=key, new=dict(zip(vt.columns, found))))

    def take(self, mark: int = 0) -> list[CapturedRow]:
        taken = self.rows[mark:]
        del self.rows[mark:]
        return taken

    def _on_change(self, u: apsw.PreUpdate) -> None:
        if self._unread is not None:
            self.settle_read()
        if self.paused:
            self.upkeep.on_change(u)
            return
        if u.database_name != "main" or is_internal(u.table_name):
            self.temp_written |= u.database_name == "temp" and not is_internal(u.table_name)
            return
        info = self._tables.get(u.table_name)
        if info is not None and info.shadow_of is not None:
            # The marker's UPDATEs move a row inside the module (an R*Tree node split).
            if u.table_name == info.shadow_of.marker and u.op != "UPDATE":
                self._virtual[(info.shadow_of.name, u.rowid)] = None
            return
        if info is not None and info.virtual_columns:
            if info.rowid_name is None:
                self.error = f"table {info.name!r} has VIRTUAL generated columns and no rowid to read its rows by"
                return
            change = ReadChange(op=u.op, depth=u.depth, table_name=u.table_name, rowid=u.rowid,
                                rowid_new=u.rowid_new, old=None if u.op == "INSERT" else self._read(info, u.rowid))
            if u.op == "DELETE":
                self._take(info, change)
            else:
                self._unread = (info, change)
            return
        self._take(info, u)

    def _take(self, info: TableInfo | None, u: Change) -> None:
        if self._observer is not None:
            self._observer(u)
        if info is None:
            self.error = f"cannot capture a change to unknown table {u.table_name!r}"
            return
        if u.op == "DELETE" and u.depth == 0 and self.inserting and self._tables.external_indexes(info.name):
            # An INSERT deleting a row of its own table: REPLACE conflict resolution, which
            # fires no DELETE trigger (recursive_triggers is off), so the index would keep the
            # old row's words here while appliers take them out.
            names = ", ".join(vt.name for vt in self._tables.external_indexes(info.name))
            self.error = (f"REPLACE on table {info.name!r} removes a row without its DELETE triggers, so the "
                          f"full-text index {names} would keep its words: use INSERT ... ON CONFLICT DO UPDATE")
            return
        if info.pk_columns and any(
            (u.new if u.op != "DELETE" else u.old)[i] is None for i in info.pk_positions
        ):
            self.error = (
                f"a NULL primary-key value in table {info.name!r} cannot be replicated: "
                "declare the key columns NOT NULL"
            )
            return
        rows = self.rows
        if u.op == "INSERT":
            new = u.new
            rows.append(_row(info, Op.INSERT, new, u.rowid_new, new=new))
        elif u.op == "DELETE":
            old = u.old
            rows.append(_row(info, Op.DELETE, old, u.rowid, old=old))
        else:
            old, new = u.old, u.new
            old_key = _key(info, old, u.rowid)
            new_key = _key(info, new, u.rowid_new)
            if old_key == new_key:
                rows.append(_row(info, Op.UPDATE, new, u.rowid_new, old=old, new=new))
            else:
                rows.append(_row(info, Op.DELETE, old, u.rowid, old=old))
                rows.append(_row(info, Op.INSERT, new, u.rowid_new, new=new))


def _key(info: TableInfo, values: tuple, rowid: int) -> str:
    if not info.pk_columns:
        return f"{info.name}:{rowid}"
    return intent_key(info.name, info.pk_columns, [values[i] for i in info.pk_positions])


def _row(
    info: TableInfo,
    op: Op,
    key_values: tuple,
    rowid: int,
    *,
    old: tuple | None = None,
    new: tuple | None = None,
) -> CapturedRow:
    columns, positions = info.columns, info.capture_positions
    return CapturedRow(
        table=info.name,
        op=op,
        key=_key(info, key_values, rowid),
        old={c: old[i] for c, i in zip(columns, positions)} if old is not None else None,
        new={c: new[i] for c, i in zip(columns, positions)} if new is not None else None,
        rowid=rowid if not info.pk_columns else None,
    )


