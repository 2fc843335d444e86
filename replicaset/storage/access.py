"""Which tables a client statement reads and writes, and whether it changes the schema.

Why this exists: access control (docs/access-control.md) needs each statement's table sets,
and SQLite tells them only to an authorizer, at prepare time. The writer's statement cache
is shared by every session and skips the authorizer on a hit, so a per-session authorizer
there would be bypassed. Instead a text is compiled once, on a read-only connection of its
own whose authorizer only records, and what it found is kept by text, beside SQLite's own
statement cache; the caller checks a user against it and may memo its verdict per user on
the entry (`StatementAccess.verdicts`). A request then costs a dict lookup or two.

Theory of operation:
- Writes are collected with foreign keys on, as the writer runs: what triggers and
  cascades change counts, since it is changed on the user's behalf.
- Reads are collected in a second compile with foreign keys off, and only at the top
  level: a foreign-key check, a trigger body and a view's definition read with the rights
  of whoever created the constraint, trigger or view (a `ddl` user); the view itself is a
  read of its name.
- A statement that changes the schema (CREATE, DROP, ALTER, REINDEX, ANALYZE) is DDL; its
  writes and its reads of `sqlite_*` and of the object it changes are SQLite's bookkeeping,
  but what else it reads (CREATE TABLE ... AS SELECT) is a read.
- A text of several statements is the union of them; when a later one does not compile
  after a schema change earlier in the text (it may name a table that creates), the text
  is `opaque`; with no schema change before it, the text fails as running it would.
- The classifier's connection sees only committed schema, and a read-only connection does
  not notice another connection's schema change at prepare: `schema_changed` (called once
  a batch holding DDL is committed) empties the entries and makes the next compile
  reload the schema first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apsw
import apsw.ext

from replicaset.storage.errors import SqlError
from replicaset.storage.statements import sql_message

#: A read of no table in particular (an argument-less PRAGMA): only a grant on every
#: table covers it.
UNIVERSE = ""
ENTRIES_MAX = 4096  # distinct texts kept; past it the cache starts over

_DDL_VERBS: dict[int, str] = {
    **dict.fromkeys((apsw.SQLITE_CREATE_INDEX, apsw.SQLITE_CREATE_TABLE, apsw.SQLITE_CREATE_TEMP_INDEX,
                     apsw.SQLITE_CREATE_TEMP_TABLE, apsw.SQLITE_CREATE_TEMP_TRIGGER, apsw.SQLITE_CREATE_TEMP_VIEW,
                     apsw.SQLITE_CREATE_TRIGGER, apsw.SQLITE_CREATE_VIEW, apsw.SQLITE_CREATE_VTABLE), "Create"),
    **dict.fromkeys((apsw.SQLITE_DROP_INDEX, apsw.SQLITE_DROP_TABLE, apsw.SQLITE_DROP_TEMP_INDEX,
                     apsw.SQLITE_DROP_TEMP_TABLE, apsw.SQLITE_DROP_TEMP_TRIGGER, apsw.SQLITE_DROP_TEMP_VIEW,
                     apsw.SQLITE_DROP_TRIGGER, apsw.SQLITE_DROP_VIEW, apsw.SQLITE_DROP_VTABLE), "Drop"),
    **dict.fromkeys((apsw.SQLITE_ALTER_TABLE, apsw.SQLITE_REINDEX, apsw.SQLITE_ANALYZE), "Alter"),
}
# DDL ops that name the table they change in p2 (p1 is the index, trigger or schema name).
_TABLE_IN_P2 = frozenset({apsw.SQLITE_CREATE_INDEX, apsw.SQLITE_CREATE_TEMP_INDEX, apsw.SQLITE_CREATE_TRIGGER,
                          apsw.SQLITE_CREATE_TEMP_TRIGGER, apsw.SQLITE_DROP_INDEX, apsw.SQLITE_DROP_TEMP_INDEX,
                          apsw.SQLITE_DROP_TRIGGER, apsw.SQLITE_DROP_TEMP_TRIGGER, apsw.SQLITE_ALTER_TABLE})
_WRITES = frozenset({apsw.SQLITE_INSERT, apsw.SQLITE_UPDATE, apsw.SQLITE_DELETE})
_INTROSPECTION_PRAGMAS = frozenset({"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo",
                                    "foreign_key_list"})
_REFRESH_SCHEMA = "SELECT 1 FROM sqlite_schema LIMIT 0"  # its schema-cookie check reloads a stale schema


@dataclass(slots=True, kw_only=True)
class StatementAccess:
    """What one text needs. Table names are spelled as the schema spells them; `ddl` is
    the verb ("Create", "Drop", "Alter") of a schema change, None for DML and queries.
    `verdicts` is the caller's memo per user, dropped with the entry when the schema moves."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]
    ddl: str | None
    opaque: bool
    verdicts: dict[str, Any] = field(default_factory=dict)


class _Recorder:
    """The classifier's authorizer: it allows everything and writes down what it saw."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str | None, str | None, str | None]] = []

    def __call__(self, op: int, p1: str | None, p2: str | None, db: str | None, trigger: str | None) -> int:
        self.events.append((op, p1, p2, trigger))
        return apsw.SQLITE_OK


class AccessCache:
    """Text -> `StatementAccess`, compiled on `conn` (read-only, this cache's alone)."""

    def __init__(self, conn: apsw.Connection, *, entries_max: int = ENTRIES_MAX) -> None:
        self._conn = conn
        self._recorder = _Recorder()
        self._entries: dict[str, StatementAccess] = {}
        self._entries_max = entries_max
        self._generation = 0
        self._stale = False

    def get(self, sql: str) -> StatementAccess:
        """The access `sql` needs; a text that does not compile (statements after a schema
        change aside) raises SqlError with SQLite's message, as running it would."""
        found = self._entries.get(sql)
        if found is not None:
            return found
        generation = self._generation
        access = self._classify(sql)
        entries = self._entries
        if len(entries) >= self._entries_max:
            entries = self._entries = {}
        entries[sql] = access
        # A flush in the writer's thread may have committed DDL while we compiled: the
        # answer serves this request only. Checked after the store, so that a swap of
        # `_entries` at any point in between cannot keep it.
        if generation != self._generation:
            entries.pop(sql, None)
        return access

    def schema_changed(self) -> None:
        """A batch holding DDL was committed: every entry may be wrong now. May run in the
        writer's thread (a flush), hence the order: a compile that reads the new generation
        also sees the classifier marked stale."""
        self._stale = True
        self._generation += 1
        self._entries = {}

    def close(self) -> None:
        self._conn.close()

    def _classify(self, sql: str) -> StatementAccess:
        conn = self._conn
        if self._stale:
            self._stale = False
            conn.execute(_REFRESH_SCHEMA).fetchall()
        reads: dict[str, None] = {}
        writes: dict[str, None] = {}
        verb: str | None = None
        opaque = False
        rest = sql
        while rest:
            try:
                with_fk = self._events(rest, foreign_keys=True)
                plain = self._events(rest, foreign_keys=False)
            except apsw.Error as exc:
                if verb is None:  # nothing before it changed the schema: running it fails alike
                    raise SqlError(sql_message(exc)) from exc
                opaque = True
                break
            events, rest = plain
            statement_verb = next((_DDL_VERBS[op] for op, *_ in events if op in _DDL_VERBS), None)
            if statement_verb is not None:
                verb = verb or statement_verb
                targets = {(p2 if op in _TABLE_IN_P2 else p1 or "").lower() for op, p1, p2, _ in events
                           if op in _DDL_VERBS}
                for op, p1, _, trigger in events:
                    if op == apsw.SQLITE_READ and trigger is None and p1 and not _bookkeeping(p1, targets):
                        reads[p1] = None
                continue
            for op, p1, p2, trigger in events:
                if trigger is not None:
                    continue
                if op == apsw.SQLITE_READ and p1:
                    reads[p1] = None
                elif op == apsw.SQLITE_PRAGMA:
                    if p2 is not None and (p1 or "").lower() in _INTROSPECTION_PRAGMAS:
                        reads[p2] = None
                    else:
                        reads[UNIVERSE] = None
            for op, p1, _, _ in with_fk[0]:
                if op in _WRITES and p1:
                    writes[p1] = None
        return StatementAccess(reads=tuple(reads), writes=tuple(writes), ddl=verb, opaque=opaque)

    def _events(self, sql: str, *, foreign_keys: bool) -> tuple[list[tuple[int, str | None, str | None, str | None]], str]:
        """Compile the first statement of `sql` (not run): the authorizer's calls and the
        text after it. Blanks and comments compile to nothing and end the loop."""
        conn = self._conn
        conn.execute("PRAGMA foreign_keys=ON" if foreign_keys else "PRAGMA foreign_keys=OFF")
        recorder = self._recorder
        recorder.events = []
        conn.authorizer = recorder
        try:
            info = apsw.ext.query_info(conn, sql)
        finally:
            conn.authorizer = None
        remaining = info.query_remaining or ""
        return recorder.events, remaining if remaining.strip() else ""


def _bookkeeping(table: str, targets: set[str]) -> bool:
    """A DDL statement's read of SQLite's own catalog or of the object it changes."""
    name = table.lower()
    return name.startswith("sqlite_") or name in targets
