"""Client SQL at the engine's edge: which statements are admitted, and how one runs.

Clients reach SQLite through the writer connection, whose authorizer refuses what would
escape the engine's bookkeeping: transaction control (a client's COMMIT inside a group
commit would commit other clients' work), ATTACH and DETACH, PRAGMAs that set state, and
writes to internal and system tables. Some refusals need the text (VACUUM; ROLLBACK as a
conflict resolution), and a schema change is judged after SQLite ran it, once the tables
it touched are known; the caller then undoes it. Reads are told by their first keyword
only, to be tried on a reader first: the reader refuses any write anyway. A statement can
also be compiled without running (`describe`), for iproto's PREPARE.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import apsw
import apsw.ext

from replicaset.storage.config import EngineConfig
from replicaset.storage.pragmas import is_connection_pragma
from replicaset.storage.schema import INTERNAL_PREFIX, TableCache, TableInfo
from replicaset.storage.tokens import meaningful, tokenize

# The engine's functions and triggers on the writer connection (auto ids, RETURNING).
ENGINE_PREFIX = "rs_"
AUTO_ID_TRIGGER_PREFIX = "rs_auto_"
# Replicated tables that only the node itself writes (membership, Tarantool's _cluster).
SYSTEM_TABLES = frozenset({"_cluster"})
# Clients send the same few texts again and again: what is read off a text alone is kept.
STATEMENT_TEXTS_CACHED = 1024
_READ_KEYWORDS = ("SELECT", "VALUES", "WITH", "EXPLAIN")
_LEADING_NOISE = re.compile(r"^(\s+|--[^\n]*\n?|/\*.*?\*/)+", re.DOTALL)
_PRAGMA_NAME = re.compile(r"^PRAGMA\s+(?:\w+\s*\.\s*)?(\w+)", re.IGNORECASE)  # PRAGMA [schema.]name
_VACUUM = re.compile(r"^\s*VACUUM\b", re.IGNORECASE)
_TRANSACTION_KEYWORDS = ("BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")
TRANSACTION_CONTROL = "transaction control is not allowed in a statement: use BEGIN/COMMIT/ROLLBACK on an iproto stream"
_TABLE_IN_P2 = (
    apsw.SQLITE_ALTER_TABLE,
    apsw.SQLITE_CREATE_INDEX,
    apsw.SQLITE_CREATE_TRIGGER,
    apsw.SQLITE_DROP_INDEX,
    apsw.SQLITE_DROP_TRIGGER,
)
# PRAGMAs that take an argument but only describe the schema or check it; the capture
# hook itself runs `table_xinfo` inside client statements, and SQLite runs `quick_check`
# inside an ADD COLUMN with a CHECK or NOT NULL constraint.
_INTROSPECTION_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
     "quick_check", "integrity_check"}
)
# Each names the object it creates in p1.
_CREATE_OPS = frozenset({apsw.SQLITE_CREATE_INDEX, apsw.SQLITE_CREATE_TABLE, apsw.SQLITE_CREATE_TEMP_INDEX,
                         apsw.SQLITE_CREATE_TEMP_TABLE, apsw.SQLITE_CREATE_TEMP_VIEW, apsw.SQLITE_CREATE_TRIGGER,
                         apsw.SQLITE_CREATE_VIEW, apsw.SQLITE_CREATE_VTABLE})
# What a reader answers as the writer would, the writer's TEMP objects aside.
_SCHEMA_PRAGMAS = _INTROSPECTION_PRAGMAS | {"table_list"}
_TABLE_WRITE_OPS = (apsw.SQLITE_INSERT, apsw.SQLITE_UPDATE, apsw.SQLITE_DELETE, apsw.SQLITE_DROP_TABLE, *_TABLE_IN_P2)

# Reads the database, so a connection finds a schema changed elsewhere; PRAGMA schema_version
# does not (it reads the cookie without comparing it with the schema held).
_SCHEMA_PROBE = "SELECT 1 FROM sqlite_schema LIMIT 1"

Columns = list[tuple[str, str | None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StatementShape:
    """What compiling a text tells before it runs. `columns` and `parameters` are its first
    statement's; `is_empty` when the text holds no statement at all (blanks, comments,
    semicolons), `has_tail` when more statements follow the first."""

    columns: Columns
    parameters: tuple[str, ...]
    is_empty: bool
    has_tail: bool


@functools.lru_cache(maxsize=STATEMENT_TEXTS_CACHED)
def is_read(sql: str) -> bool:
    """Statements worth trying on a reader first; a reader refuses any write anyway. The
    PRAGMAs that describe the schema are among them: on the writer, `table_list` would
    also list the engine's TEMP tables there, which no client can read; and so are the
    connection PRAGMAs answered without running (`pragmas.py`)."""
    first = first_word(sql)
    if first == "PRAGMA":
        name = _PRAGMA_NAME.match(_LEADING_NOISE.sub("", sql, count=1))
        return name is not None and name.group(1).lower() in _SCHEMA_PRAGMAS or is_connection_pragma(sql)
    return first.startswith(_READ_KEYWORDS)


@functools.lru_cache(maxsize=STATEMENT_TEXTS_CACHED)
def first_word(sql: str) -> str:
    """The statement's first word, upper case, past blanks and comments."""
    words = _LEADING_NOISE.sub("", sql, count=1)[:10].split(None, 1)
    return words[0].rstrip(";").upper() if words else ""


@functools.lru_cache(maxsize=STATEMENT_TEXTS_CACHED)
def text_refusal(sql: str) -> str | None:
    """Why a statement is refused before it runs, None when it may run: these are not seen
    by the authorizer in a form that tells them apart from allowed statements."""
    first = first_word(sql)
    if first in _TRANSACTION_KEYWORDS:
        # Refused by its text as well as by the authorizer: the engine's own transaction
        # statements are cached, and a cached statement is not authorized again, so a
        # client sending the same text would reuse the engine's.
        return TRANSACTION_CONTROL
    if "rollback" in sql.lower() and _rolls_back_on_conflict(sql):
        # Past the first word, ROLLBACK is a conflict resolution (OR ROLLBACK, ON CONFLICT
        # ROLLBACK in a table, RAISE(ROLLBACK) in a trigger): it would roll back the SQLite
        # transaction that other clients' committed transactions share until the flush.
        return ("ROLLBACK as a conflict resolution (OR ROLLBACK, ON CONFLICT ROLLBACK, RAISE(ROLLBACK)) is "
                "refused: it would undo other clients' transactions committed in the same group; use ABORT "
                "(the default) or FAIL, which undo this statement only")
    if first == "DROP" and _drops_engine_trigger(sql):
        # By its text: the authorizer sees the same drop when a DROP TABLE takes the
        # table's auto-id trigger with it, which must go on.
        return f"triggers named {ENGINE_PREFIX}... are the engine's own and cannot be dropped"
    if _VACUUM.match(sql):
        return "VACUUM is not allowed: checkpoints compact the database (box.snapshot())"
    return None


def _rolls_back_on_conflict(sql: str) -> bool:
    """`OR ROLLBACK`, `ON CONFLICT ROLLBACK` or `RAISE(ROLLBACK`: ROLLBACK as a word
    elsewhere (a column named rollback) is left alone."""
    words = [t for _, t in meaningful(tokenize(sql))]
    for i, token in enumerate(words):
        if token.is_word("ROLLBACK") and i > 0 and (
                words[i - 1].is_word("OR") or words[i - 1].is_word("CONFLICT")
                or (words[i - 1].text == "(" and i > 1 and words[i - 2].is_word("RAISE"))):
            return True
    return False


def _drops_engine_trigger(sql: str) -> bool:
    """`DROP TRIGGER [IF EXISTS] [schema.]rs_...`."""
    words = [t for _, t in meaningful(tokenize(sql)) if t.text != ";"]
    if len(words) < 3 or not words[1].is_word("TRIGGER"):
        return False
    return words[-1].text.strip('"`[]').lower().startswith(ENGINE_PREFIX)


class Authorizer:
    """The writer connection's authorizer. It refuses only while a client statement runs,
    so that the engine's own statements on that connection (savepoints, versions, temp
    triggers) pass, and it keeps the reason, which SQLite's error does not carry."""

    def __init__(self) -> None:
        self._client_sql = False
        self.deny_reason: str | None = None

    @contextmanager
    def statement(self, *, trusted: bool) -> Iterator[None]:
        """Check what runs inside unless it is `trusted` (the node's own statements)."""
        self.deny_reason = None
        self._client_sql = not trusted
        try:
            yield
        finally:
            self._client_sql = False

    def __call__(self, op: int, p1: str | None, p2: str | None, db: str | None, trigger: str | None) -> int:
        if not self._client_sql:
            return apsw.SQLITE_OK
        reason = None
        if op in (apsw.SQLITE_TRANSACTION, apsw.SQLITE_SAVEPOINT):
            reason = TRANSACTION_CONTROL
        elif op in (apsw.SQLITE_ATTACH, apsw.SQLITE_DETACH):
            reason = "ATTACH and DETACH are not allowed"
        elif op == apsw.SQLITE_PRAGMA and p2 is not None and (p1 or "").lower() not in _INTROSPECTION_PRAGMAS:
            reason = f"PRAGMA {p1} cannot be set by a client"
        elif op == apsw.SQLITE_CREATE_TEMP_TRIGGER:
            # Every client's statements run on the writer's one connection, where the
            # engine's own triggers (auto ids) live too.
            reason = "TEMP triggers are not allowed: the writer's connection is shared by every client"
        elif op in _CREATE_OPS and (p1 or "").startswith(INTERNAL_PREFIX):
            # The engine's tables are read-only to clients and never replicated: an object
            # of a client's under that prefix would be taken for one of them.
            reason = f"names starting with {INTERNAL_PREFIX} are the engine's: give {p1} another name"
        elif op == apsw.SQLITE_DROP_TEMP_TABLE and (p1 or "").startswith(INTERNAL_PREFIX):
            reason = f"table {p1} is the engine's own"
        elif op == apsw.SQLITE_CREATE_TRIGGER and (p1 or "").startswith(ENGINE_PREFIX):
            reason = f"trigger names starting with {ENGINE_PREFIX} are the engine's"
        elif op == apsw.SQLITE_FUNCTION and (p2 or "").startswith(ENGINE_PREFIX) and not (trigger or "").startswith(
                AUTO_ID_TRIGGER_PREFIX):
            reason = f"function {p2} is the engine's own"
        elif op in _TABLE_WRITE_OPS:
            table = p2 if op in _TABLE_IN_P2 else p1
            if table and (table.startswith(INTERNAL_PREFIX) or table in SYSTEM_TABLES):
                reason = f"system table {table} cannot be changed by a client"
        if reason is None:
            return apsw.SQLITE_OK
        self.deny_reason = reason
        return apsw.SQLITE_DENY


def schema_change_refusal(
    conn: apsw.Connection,
    tables: TableCache,
    *,
    sql: str,
    touched: set[str],
    local: bool,
    changed_tables: Iterable[str],
    explicit: bool,
    trusted: bool,
    config: EngineConfig,
) -> str | None:
    """Why a schema change SQLite just ran must be undone, None when it may stay. `touched`
    are the tables whose schema objects it changed, `local` whether they are all local,
    `changed_tables` the tables whose rows the same statement changed."""
    if explicit:
        return "a DDL statement must run alone, outside a stream transaction"
    if not local and _creates_as_select(sql):
        return ("CREATE TABLE ... AS SELECT is refused: every member runs a DDL statement as written, and each "
                "would fill the table from the rows it holds at that moment; create the table, then fill it "
                "with INSERT ... SELECT")
    tables_now = {n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
    for table in touched & tables_now:
        info = tables.get(table)
        if info is not None and info.virtual is not None and info.virtual.refusal is not None:
            return info.virtual.refusal
    if any(table in tables_now for table in changed_tables):
        return (
            "a DDL statement that also changes rows (a cascade, or other statements in the same "
            "request) is refused: change the rows first, in a statement of their own"
        )
    for table in touched & tables_now:
        info = tables.get(table)
        if info is not None and info.virtual is not None and info.virtual.content:
            content = tables.get(info.virtual.content)
            if content is not None and content.virtual_columns:
                return _virtual_columns_refusal(content)
        if info is not None and (info.virtual is not None or info.shadow_of is not None):
            continue  # keyed by rowid, which the client gives; shadow tables stay on each member
        if info is not None and info.virtual_columns and (info.rowid_name is None or tables.external_indexes(table)):
            return _virtual_columns_refusal(info)
        if info is not None and not info.key_columns and table not in config.local_tables:
            return (
                f"table {table!r} has no PRIMARY KEY and its columns take every name of the rowid "
                "(rowid, _rowid_, oid), by which such a table's rows are known on every member: "
                "rename one, declare a key, or list the table in local_tables to keep it local"
            )
    return None


def _creates_as_select(sql: str) -> bool:
    """`CREATE [TEMP] TABLE [IF NOT EXISTS] [schema.]name AS ...`: the table's rows come from
    a query, not from its statement's captured rows."""
    words = [t for _, t in meaningful(tokenize(sql))]
    if len(words) < 4 or not words[0].is_word("CREATE"):
        return False
    at = 2 if words[1].is_word("TEMP") or words[1].is_word("TEMPORARY") else 1
    if not words[at].is_word("TABLE"):
        return False
    at += 4 if len(words) > at + 3 and words[at + 1].is_word("IF") else 1  # IF NOT EXISTS
    at += 3 if len(words) > at + 2 and words[at + 1].text == "." else 1  # [schema.]name
    return len(words) > at and words[at].is_word("AS")


def _virtual_columns_refusal(info: TableInfo) -> str:
    """Capture reads the rows of a table with VIRTUAL generated columns back by rowid
    (capture.py); the upkeep of a full-text index over one reads the hook's values."""
    return (f"table {info.name!r} has VIRTUAL generated columns ({', '.join(info.virtual_columns)}) and is "
            "WITHOUT ROWID or the content of a full-text index, where they cannot be captured: declare them STORED")


StatementStarted = Callable[[apsw.Cursor, str, Any, int], None]


def run_statement(
    cursor: apsw.Cursor,
    sql: str,
    binds: Sequence[Any] | dict[str, Any],
    on_statement: StatementStarted | None = None,
) -> tuple[Columns, list[list[Any]]]:
    """Execute and fetch; the columns are the last statement's. `on_statement` hears of
    each statement of `sql` before it runs: its text, its own bindings, and the rows
    fetched before it.

    A statement's columns are read once its first step is done, never before: apsw hands
    out a statement from its cache as compiled, and SQLite compiles it again for a schema
    changed since (an ADD COLUMN, here or on another connection) only when it is stepped.
    With rows, they are read at the statement's first row; a statement that its first step
    finished without rows is compiled again for them on the same connection, which then
    holds the schema that step ran under. A statement without columns (a change without
    RETURNING) has none whatever the schema, and costs nothing more.
    """
    columns: Columns = []
    rows: list[list[Any]] = []
    unread: list[tuple[str, Any]] = []  # the last statement begun, while its columns are not read

    def first_row(cur: apsw.Cursor, row: apsw.SQLiteValues) -> apsw.SQLiteValues:
        # `get_description`, not `description`: apsw keeps a statement's description from
        # its first reading, and `on_statement` read that one before the step.
        columns[:] = cur.get_description()
        unread.clear()
        cur.row_trace = None
        return row

    def trace(cur: apsw.Cursor, statement: str, statement_binds: Any) -> bool:
        if on_statement is not None:
            on_statement(cur, statement, statement_binds, len(rows))
        columns.clear()
        unread[:] = [(statement, statement_binds)] if cur.description else []
        cur.row_trace = first_row if unread else None
        return True

    cursor.exec_trace = trace
    cursor.execute(sql, binds)
    for row in cursor:
        rows.append(list(row))
    if unread:
        columns[:] = _compiled_columns(cursor, *unread[0])
    return columns, rows


def _compiled_columns(cursor: apsw.Cursor, statement: str, binds: Any) -> Columns:
    """The columns of `statement` compiled on `cursor`'s connection, not run: taken from
    apsw's cache when it holds the text, which its last step compiled again if it had to."""
    columns: Columns = []

    def stop(cur: apsw.Cursor, _statement: str, _binds: Any) -> bool:
        columns[:] = cur.get_description()
        return False

    cursor.exec_trace = stop
    try:
        cursor.execute(statement, binds)
    except apsw.ExecTraceAbort:
        pass
    return columns


def describe(conn: apsw.Connection, sql: str) -> StatementShape:
    """Compile `sql` on `conn` without binding or running it; an error SQLite finds while
    compiling (syntax, unknown table or column) raises `apsw.Error`.

    Only the first statement is compiled for its shape: a later one may name a table the
    first creates. The tail is compiled only to tell a statement from blanks and comments,
    so a tail that does not compile still counts as a statement. SQLite gives parameter
    names without their marker, so a named one is listed with ":" whichever of `:`, `@`
    or `$` the text used.

    Compiling uses the schema `conn` holds, which it loads again only when a statement
    reads the database and finds it changed (by another connection): a probe does so
    first, so that columns added since `conn` last ran are described.
    """
    conn.execute(_SCHEMA_PROBE).fetchall()
    first = apsw.ext.query_info(conn, sql)
    remaining = first.query_remaining
    has_tail = False
    while remaining and not has_tail:
        try:
            after = apsw.ext.query_info(conn, remaining)
        except apsw.Error:
            has_tail = True
        else:
            has_tail, remaining = after.has_vdbe, after.query_remaining
    return StatementShape(
        columns=[(name, decl) for name, decl in first.description],
        parameters=tuple(_parameter_name(name) for name in first.bindings_names),
        is_empty=not first.has_vdbe,
        has_tail=has_tail,
    )


def _parameter_name(bare: str | None) -> str:
    """Tarantool's name of a parameter from SQLite's bare one: `?` for an anonymous
    parameter, `?NNN` for a numbered one, `:name` for a named one."""
    if bare is None:
        return "?"
    return f"?{bare}" if bare.isdigit() else f":{bare}"


def sql_message(exc: apsw.Error) -> str:
    """SQLite's message without apsw's class-name prefix, as a client expects it."""
    message = str(exc)
    kind, sep, rest = message.partition(": ")
    return rest if sep and kind.endswith("Error") else message
