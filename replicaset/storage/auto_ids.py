"""Auto-increment ids no two members can both produce (DESIGN 4.1).

Every member takes writes, so SQLite's own rowid choice would hand two members the same
id. An INSERT that leaves an INTEGER PRIMARY KEY to the database is rewritten by a temp
trigger into one whose id comes from `rs_next_id`: above every id in the table, with this
member's id in the low AUTO_ID_NODE_BITS bits. The triggers live on the writer connection
only, so rows applied from peers keep the ids they came with; a schema change makes them
stale, and they are built again once it is committed.
"""

from __future__ import annotations

import apsw

from replicaset.storage.errors import SqlError
from replicaset.storage.schema import TableCache, is_internal, quote

AUTO_ID_NODE_BITS = 5
AUTO_ID_MAX = {"compact": (1 << 53) - 1, "extended": (1 << 63) - 1}


class AutoIds:
    def __init__(self, conn: apsw.Connection, tables: TableCache, *, instance_id: int, mode: str) -> None:
        self._conn = conn
        self._tables = tables
        self._id = instance_id
        self._mode = mode
        # The ids handed out by the statement running now, in order (SQL_INFO returns them).
        self.issued: dict[int, None] = {}
        # Set when a schema change dropped or outdated the triggers; cleared by `install`.
        self.stale = False
        conn.create_scalar_function("rs_next_id", self._next_id, 1)

    def _next_id(self, table: str) -> int:
        """An id no other member can produce: above every id in the table, in our residue."""
        top = self._conn.execute(f"SELECT max(rowid) FROM {quote(table)}", can_cache=True).fetchone()[0] or 0
        value = (((max(top, 0) >> AUTO_ID_NODE_BITS) + 1) << AUTO_ID_NODE_BITS) | self._id
        if value > AUTO_ID_MAX[self._mode]:
            raise SqlError(f"auto ids of table {table!r} are exhausted under auto_id_mode = {self._mode}")
        self.issued[value] = None
        return value

    def drop(self) -> None:
        """Before a DDL row from a peer runs on the apply connection: a table it drops
        would leave the writer's trigger on it orphaned and impossible to drop by name."""
        conn = self._conn
        for (name,) in conn.execute(
            "SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND name LIKE 'rs\\_auto\\_%' ESCAPE '\\'"
        ).fetchall():
            conn.execute(f"DROP TRIGGER IF EXISTS temp.{quote(name)}", can_cache=False)

    def install(self) -> None:
        """A trigger for every client table with an INTEGER PRIMARY KEY, replacing any."""
        self.stale = False
        conn = self._conn
        self.drop()
        self._tables.invalidate()
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        for i, table in enumerate(tables):
            if is_internal(table):
                continue
            info = self._tables.get(table)
            if info is None or info.rowid_alias is None or info.shadow_of is not None:
                continue  # a virtual table's module numbers its shadow tables itself
            pk = quote(info.rowid_alias)
            others = [c for c in info.columns if c != info.rowid_alias]
            cols = ", ".join([pk, *map(quote, others)])
            values = ", ".join(["rs_next_id(" + _sql_text(table) + ")", *(f"new.{quote(c)}" for c in others)])
            conn.execute(
                f"CREATE TEMP TRIGGER rs_auto_{i} BEFORE INSERT ON main.{quote(table)}"
                f" WHEN new.{pk} IS NULL OR new.{pk} = -1 BEGIN"
                f" INSERT INTO main.{quote(table)}({cols}) VALUES ({values});"
                " SELECT RAISE(IGNORE); END",
                can_cache=False,
            )


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
