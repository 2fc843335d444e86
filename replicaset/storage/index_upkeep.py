"""External-content FTS5 indexes where triggers do not run (replicaset.storage.virtual)."""

from __future__ import annotations

from typing import Any

import apsw

from replicaset.storage.schema import TableCache, quote
from replicaset.storage.virtual import Declared, VirtualTable, describe


class IndexUpkeep:
    """External-content FTS5 indexes kept in step with their content table on a
    connection where triggers do not run: changes are noted by the preupdate hook (which
    may not write) and carried out by `flush`, as the documented triggers would: the old
    values out with FTS5's 'delete' command, the new ones in."""

    def __init__(self, conn: apsw.Connection, tables: TableCache) -> None:
        self._conn = conn
        self._tables = tables
        self._pending: list[tuple[tuple[Declared, ...], dict[str, Any] | None, dict[str, Any] | None]] = []

    def on_change(self, u: apsw.PreUpdate) -> None:
        if u.database_name != "main":
            return
        indexes = self._tables.external_indexes(u.table_name)
        if not indexes:
            return
        info = self._tables.get(u.table_name)
        if info is None:
            return
        old = new = None
        if u.op != "INSERT":
            old = {c: u.old[i] for c, i in zip(info.columns, info.capture_positions)} | {"rowid": u.rowid}
        if u.op != "DELETE":
            new = {c: u.new[i] for c, i in zip(info.columns, info.capture_positions)} | {"rowid": u.rowid_new}
        self._pending.append((indexes, old, new))

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        described: dict[str, VirtualTable] = {}
        for indexes, old, new in pending:
            for declared_index in indexes:
                index = described.get(declared_index.name) or describe(self._conn, declared_index)
                described[index.name] = index
                columns = index.columns[1:]
                names = ", ".join(map(quote, columns))
                marks = ", ".join("?" * len(columns))
                table = quote(index.name)
                if old is not None:
                    self._conn.execute(f"INSERT INTO {table}({table}, rowid, {names}) VALUES ('delete', ?, {marks})",
                                       (old[index.content_rowid], *(old.get(c) for c in columns)))
                if new is not None:
                    self._conn.execute(f"INSERT INTO {table}(rowid, {names}) VALUES (?, {marks})",
                                       (new[index.content_rowid], *(new.get(c) for c in columns)))

    def discard(self) -> None:
        """Forget what was noted: the changes were rolled back."""
        self._pending.clear()
