"""Auto-increment ids no two members can both produce (docs/design/README.md §4.1).

Every member takes writes, so SQLite's own rowid choice would hand two members the same
id. An INSERT that leaves an INTEGER PRIMARY KEY to the database (or the rowid of a table
without a declared key, which is that table's key) is rewritten by a temp
trigger into one whose id comes from `rs_next_id`: above every id in the table, with this
member's id in the low AUTO_ID_NODE_BITS bits. The triggers live on the writer connection
only, so rows applied from peers keep the ids they came with; a schema change makes them
stale, and they are built again once it is committed.

The trigger inserts the row itself, one level down, then `RAISE(IGNORE)` makes SQLite skip
the client's insert of it (returning.py gives RETURNING those rows back). Its insert is
`INSERT OR IGNORE`, so that a row colliding on a UNIQUE index is not inserted: `rs_assigned`
then lets the client's own insert go on, which meets the same collision and takes the
statement's own way out of it, as with plain SQLite: its upsert (`ON CONFLICT ... DO`),
OR IGNORE, or the error. A table whose constraints carry their own conflict clause keeps a
plain INSERT, so those clauses act on the trigger's row. The client's insert would take
SQLite's rowid if it went through after all (a constraint on the key itself that our id
fails and SQLite's passes): `observe` refuses the statement then, as it refuses a REPLACE
done by the trigger's row in a client statement with an upsert, where SQLite would have
taken the upsert's way. The preupdate hook tells `observe` every row change, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from replicaset.storage.capture import Change
from replicaset.storage.errors import SqlError
from replicaset.storage.returning import drop_mirrors, install_mirror
from replicaset.storage.schema import TableCache, TableInfo, is_internal, quote
from replicaset.storage.statements import AUTO_ID_TRIGGER_PREFIX
from replicaset.storage.tokens import has_conflict_clause, tokenize

AUTO_ID_NODE_BITS = 5
AUTO_ID_MAX = {"compact": (1 << 53) - 1, "extended": (1 << 63) - 1}


class AutoIds:
    def __init__(self, conn: apsw.Connection, tables: TableCache, *, instance_id: int, mode: str) -> None:
        self._conn = conn
        self._tables = tables
        self._id = instance_id
        self._mode = mode
        # The ids of the rows the trigger inserted in the request running now, in order
        # (SQL_INFO returns them).
        self.issued: dict[int, None] = {}
        # Why the request running now must be undone, found while SQLite ran it.
        self.error: str | None = None
        # Rows of the last statement that the trigger inserted in place of the statement's
        # own: SQLite's changes() does not count them, plain SQLite would.
        self.statement_rows = 0
        # Set when a schema change dropped or outdated the triggers; cleared by `install`.
        self.stale = False
        self._sql = ""
        # table -> the id `rs_next_id` just gave the trigger's insert, until `rs_assigned`
        self._open: dict[str, int] = {}
        # table -> the highest id handed out since start: a transaction whose rows wait
        # outside SQLite (a stream's between statements, a quorum one until decided) keeps
        # its ids, which max(rowid) no longer shows
        self._handed_out: dict[str, int] = {}
        # (table, non-key values) of the rows of this statement left to the client's insert
        self._declined: list[tuple[str, tuple[Any, ...]]] = []
        # Told before `rs_assigned` reads what `observe` saw: the change capture reads once
        # it is made (capture.ReadChange) is observed then.
        self.before_assigned: Callable[[], None] = lambda: None
        conn.create_scalar_function("rs_next_id", self._next_id, 1)
        conn.create_scalar_function("rs_assigned", self._assigned, -1)

    def start(self) -> None:
        """A new client request."""
        self.issued.clear()
        self.error = None
        self.statement_started("")

    def statement_started(self, sql: str) -> None:
        self._sql = sql
        self.statement_rows = 0
        self._open.clear()
        self._declined.clear()

    def _next_id(self, table: str) -> int:
        """An id no other member can produce: above every id in the table and every one
        handed out here, in our residue."""
        top = self._conn.execute(f"SELECT max(rowid) FROM {quote(table)}", can_cache=True).fetchone()[0] or 0
        top = max(top, self._handed_out.get(table, 0))
        value = (((max(top, 0) >> AUTO_ID_NODE_BITS) + 1) << AUTO_ID_NODE_BITS) | self._id
        if value > AUTO_ID_MAX[self._mode]:
            raise SqlError(f"auto ids of table {table!r} are exhausted under auto_id_mode = {self._mode}")
        self._open[table] = value
        self._handed_out[table] = value
        return value

    def _assigned(self, table: str, *values: Any) -> bool:
        """Whether the trigger's insert went in (the client's is then skipped); if not, the
        client's insert of the row goes on, and `observe` watches what it does."""
        self.before_assigned()
        value = self._open.pop(table, None)
        if value is not None and value in self.issued:
            return True
        self._declined.append((table, values))
        return False

    def observe(self, change: Change) -> bool:
        """Follow a row change of a client statement; True when it is the trigger's insert
        of a row whose key we assigned."""
        table = change.table_name
        if change.op == "INSERT":
            if self._open.get(table) == change.rowid_new:
                self.issued[change.rowid_new] = None
                self.statement_rows += change.depth == 1
                return True
            if self._declined and self._is_declined(table, change.new):
                self.error = (
                    f"a row of table {table!r} left to the database would get an id of SQLite's choosing, "
                    "which another member may also give: give the key explicitly"
                )
        elif change.op == "DELETE":
            # depth 1: a REPLACE by the insert of the trigger the statement itself fired,
            # whose text we have; a statement of a client trigger's body we cannot read.
            if (change.depth == 1 and table in self._open
                    and has_conflict_clause(tokenize(self._sql), top_level=True)):
                self.error = (
                    f"a row of table {table!r} whose key is assigned here replaced a row it collided with, "
                    "where SQLite would have taken the ON CONFLICT clause: give the key explicitly, "
                    "or leave out OR REPLACE"
                )
        elif change.depth == 0 and self._declined:
            self._settle(table)
        return False

    def _is_declined(self, table: str, image: tuple[Any, ...]) -> bool:
        info = self._tables.get(table)
        return info is not None and (table, _non_key(info, image)) in self._declined

    def _settle(self, table: str) -> None:
        """An upsert updated instead of inserting: the last row left to it is done."""
        for i in range(len(self._declined) - 1, -1, -1):
            if self._declined[i][0] == table:
                del self._declined[i]
                return

    def drop(self) -> None:
        """Before a DDL row from a peer runs on the apply connection: a table it drops
        would leave the writer's trigger on it orphaned and impossible to drop by name."""
        conn = self._conn
        for (name,) in conn.execute(
            "SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND name LIKE 'rs\\_auto\\_%' ESCAPE '\\'"
        ).fetchall():
            conn.execute(f"DROP TRIGGER IF EXISTS temp.{quote(name)}", can_cache=False)
        drop_mirrors(conn)

    def install(self) -> None:
        """A trigger for every client table with an INTEGER PRIMARY KEY, replacing any, and
        the mirror its RETURNING rows are evaluated in."""
        self.stale = False
        conn = self._conn
        self.drop()
        self._tables.invalidate()
        tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        for i, table in enumerate(tables):
            if is_internal(table):
                continue
            info = self._tables.get(table)
            if info is None or info.rowid_column is None or info.shadow_of is not None:
                continue  # a virtual table's module numbers its shadow tables itself
            conn.execute(_trigger_sql(f"{AUTO_ID_TRIGGER_PREFIX}{i}", info, _own_conflict_clause(conn, table)), can_cache=False)
            install_mirror(conn, table)


def _non_key(info: TableInfo, image: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(image[p] for c, p in zip(info.columns, info.capture_positions) if c != info.rowid_alias)


def _own_conflict_clause(conn: apsw.Connection, table: str) -> bool:
    (sql,) = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()
    return has_conflict_clause(tokenize(sql), top_level=False)


def _trigger_sql(name: str, info: TableInfo, own_conflict_clause: bool) -> str:
    id_column = info.rowid_column
    assert id_column is not None
    table, pk = quote(info.name), quote(id_column)
    others = [quote(c) for c in info.columns if c != info.rowid_alias]
    new = ", ".join(f"new.{c}" for c in others)
    values = ", ".join(["rs_next_id(" + _sql_text(info.name) + ")", *(f"new.{c}" for c in others)])
    verb = "INSERT" if own_conflict_clause else "INSERT OR IGNORE"
    # SELECT rather than VALUES: SQLite evaluates a VALUES term for the rowid twice.
    return (
        f"CREATE TEMP TRIGGER {name} BEFORE INSERT ON main.{table}"
        f" WHEN new.{pk} IS NULL OR new.{pk} = -1 BEGIN"
        f" {verb} INTO main.{table}({', '.join([pk, *others])}) SELECT {values};"
        f" SELECT RAISE(IGNORE) WHERE rs_assigned({', '.join([_sql_text(info.name), *([new] if new else [])])});"
        " END"
    )


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
