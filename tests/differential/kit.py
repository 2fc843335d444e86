"""The differential kit's machinery: cases, the SQLite reference, the replica set, the comparison.

Theory of operation. A `Case` is a list of steps; a step is a few statements that run on one
member of a three-member set, and the same statements on an in-process SQLite connection
set up as the server sets up its writer (`replicaset/storage/connections.py`: foreign keys
on, defensive mode). Every answer is compared as it comes (rows and columns, or that both
sides failed, and a write's row count); after each step the set must converge (equal
vclocks, `ReplicaSet.wait_converged`) and every member must then hold what SQLite holds:
the same user schema objects, with the same SQL, and the same rows in every table but
shadow tables. The next step may go to another member only once the set has converged, so
what is compared is the server's SQL, never the replication lag that a write on another
member may race (that is the chaos harness's subject, docs/reliability.md).

Case files (`cases/*.sql`) hold one statement after another; a statement ends where SQLite
says it is complete (`apsw.complete`), so a trigger's body may hold `;`. A comment line
directly before a statement may mark it:
- `-- @error`: SQLite refuses it (a constraint, a bad name); the server must refuse it too,
  and neither side changes anything.
- `-- @refused`: SQLite takes it and the server refuses it today (a known gap, only in
  `known_gaps.sql`); SQLite's change is undone so that both sides still hold the same.
A line `-- @keys-differ TABLE.COLUMN` anywhere in a file says that column's values are
assigned by the database (an INTEGER PRIMARY KEY left out of the INSERT): the server gives
cluster-unique ids (`replicaset/storage/auto_ids.py`), never SQLite's, so that column is
left out of the comparison of the table's rows; such a file must not read those ids back.
Statements without ORDER BY have their rows compared in any order; with ORDER BY, in order.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from replicaset.iproto.client import Client
from replicaset.iproto.errors import ServerError
from tests.server.conftest import ReplicaSet

# The user's objects in sqlite_schema: not SQLite's own (autoindexes, sqlite_sequence) nor the
# engine's (`_rs_*`, `_cluster`, docs/decisions.md "The engine's tables are shown read-only").
USER_OBJECTS = ("SELECT type, name, tbl_name, sql FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                "AND name NOT LIKE '\\_rs\\_%' ESCAPE '\\' AND name <> '_cluster' ORDER BY type, name")
# A virtual table's shadow tables are each member's own (docs/design/virtual_tables.md): the
# virtual table's rows are compared, not how its module stores them.
SHADOW_TABLES = "SELECT name FROM pragma_table_list WHERE type = 'shadow'"
# Statements whose row count the server reports (SQL_INFO) and SQLite's changes() counts.
_COUNTED = re.compile(r"^\s*(INSERT|REPLACE|UPDATE|DELETE)\b", re.IGNORECASE)
_ORDERED = re.compile(r"\bORDER\s+BY\b", re.IGNORECASE)
_MARKER = re.compile(r"^--\s*@(\S+)\s*(.*)$")


class Expect(enum.Enum):
    AGREE = "agree"  # both sides answer the same, whatever that is
    ERROR = "error"  # both sides refuse it
    REFUSED = "refused"  # SQLite takes it, the server refuses it (a known gap)


@dataclass(frozen=True, slots=True, kw_only=True)
class Statement:
    sql: str
    expect: Expect
    where: str  # "file.sql:LINE" or "seed S, statement N": what a failure points at


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    name: str
    steps: list[list[Statement]]  # each runs on one member, then the set converges and is compared
    keys_differ: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (table, column)

    @property
    def statement_count(self) -> int:
        return sum(len(step) for step in self.steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """What one side said to a statement: its columns and rows, or the error's message."""

    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] = field(default_factory=list)
    row_count: int | None = None
    error: str | None = None


class Difference(AssertionError):
    """The server and SQLite disagree; the message says on what, where and how."""


def parse_case(path: Path) -> Case:
    """The statements of a case file, one step each."""
    return parse_case_text(path.stem, path.read_text(), file_name=path.name)


def parse_case_text(name: str, text: str, *, file_name: str = "") -> Case:
    """The statements of `text`, written as a case file is, one step each."""
    file_name = file_name or name
    statements: list[Statement] = []
    keys_differ: set[tuple[str, str]] = set()
    expect, buffer, first_line = Expect.AGREE, "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not buffer:
            marker = _MARKER.match(line.strip())
            if marker and marker[1] == "keys-differ":
                table, column = marker[2].strip().split(".")
                keys_differ.add((table, column))
                continue
            if marker:
                expect = Expect(marker[1])
                continue
            if not line.strip() or line.lstrip().startswith("--"):
                continue
            first_line = number
        buffer += line + "\n"
        if apsw.complete(buffer):
            statements.append(Statement(sql=buffer.strip(), expect=expect, where=f"{file_name}:{first_line}"))
            expect, buffer = Expect.AGREE, ""
    if buffer.strip():
        raise ValueError(f"{file_name}:{first_line}: statement not terminated by ';'")
    return Case(name=name, steps=[[s] for s in statements], keys_differ=frozenset(keys_differ))


def open_reference() -> apsw.Connection:
    """Plain SQLite with the writer's settings (`open_connections`). No statement cache: a
    cached `SELECT *` describes the columns it had before an ADD COLUMN until its first step."""
    conn = apsw.Connection(":memory:", statementcachesize=0)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    return conn


def reference_answer(conn: apsw.Connection, sql: str) -> Answer:
    """SQLite's answer to `sql`: an error is an answer too, as the server's is."""
    cursor = conn.cursor()
    columns: list[str] = []

    def note_columns(prepared: apsw.Cursor, _sql: str, _bindings: object) -> bool:
        """Before the first step: a query with no rows still has its columns, and once it
        has run to its end apsw no longer describes it."""
        columns.extend(name for name, _ in prepared.get_description())
        return True

    cursor.exec_trace = note_columns
    try:
        rows = [list(row) for row in cursor.execute(sql)]
    except apsw.Error as exc:
        return Answer(error=f"{type(exc).__name__}: {exc}")
    return Answer(columns=columns, rows=rows, row_count=None if columns else conn.changes())


def reference_refused(conn: apsw.Connection, sql: str) -> Answer:
    """SQLite's answer to a statement the server refuses, its change then undone."""
    conn.execute("SAVEPOINT differential_refused")
    try:
        return reference_answer(conn, sql)
    finally:
        conn.execute("ROLLBACK TO differential_refused; RELEASE differential_refused")


def server_answer(client: Client, sql: str) -> Answer:
    """The member's answer to `sql`; a lost connection is no answer, and raises."""
    try:
        result = client.execute(sql)
    except ServerError as exc:
        return Answer(error=str(exc))
    return Answer(columns=result.columns, rows=result.rows, row_count=result.row_count)


def _typed(value: Any) -> tuple[Any, ...]:
    """A total order over SQLite's values (NULL, numbers, text, blobs), that also tells 1
    from 1.0: the wire must keep a REAL a float."""
    if value is None:
        return (0, 0)
    if isinstance(value, (int, float)):
        return (1, value, isinstance(value, float))
    if isinstance(value, str):
        return (2, value)
    return (3, bytes(value))


def _rows_key(rows: Sequence[Sequence[Any]]) -> list[tuple[tuple[Any, ...], ...]]:
    return sorted(tuple(_typed(v) for v in row) for row in rows)


def _ordered_key(rows: Sequence[Sequence[Any]]) -> list[tuple[tuple[Any, ...], ...]]:
    return [tuple(_typed(v) for v in row) for row in rows]


def disagreement(statement: Statement, server: Answer, reference: Answer) -> str | None:
    """Why the two answers differ for `statement`'s purpose, or None when they agree."""
    if statement.expect is Expect.REFUSED:
        if reference.error is not None:
            return f"SQLite refused a statement listed as a known gap: {reference.error}"
        if server.error is None:
            return "the server took a statement listed as refused: the gap closed, move it to a case file"
        return None
    if statement.expect is Expect.ERROR and reference.error is None:
        return "SQLite took a statement marked @error: the case is wrong"
    if (server.error is None) != (reference.error is None):
        return f"only one side failed: server {server.error!r}, SQLite {reference.error!r}"
    if server.error is not None:
        return None
    if server.columns != reference.columns:
        return f"columns: server {server.columns}, SQLite {reference.columns}"
    key = _ordered_key if _ORDERED.search(statement.sql) else _rows_key
    if key(server.rows) != key(reference.rows):
        return f"rows: server {server.rows}, SQLite {reference.rows}"
    if not server.columns and _COUNTED.match(statement.sql) and server.row_count != reference.row_count:
        return f"row count: server {server.row_count}, SQLite {reference.row_count}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """A database as a user sees it: its objects' SQL and every table's rows, in order."""

    objects: list[list[Any]]
    tables: dict[str, list[list[Any]]]  # rows sorted by `_typed`


def snapshot(run: Callable[[str], tuple[list[str], list[list[Any]]]], *, skip: frozenset[str],
             keys_differ: frozenset[tuple[str, str]]) -> Snapshot:
    """What `run` (one side's SELECT: columns and rows) shows, but for the objects in `skip`.
    Columns are named, never `SELECT *`: the server describes a `SELECT *` it ran before an
    ADD COLUMN with the old columns (test_select_star_after_add_column_names_the_new_column),
    which would hide rows' values here instead of failing the case that shows it."""
    _, objects = run(USER_OBJECTS)
    objects = [obj for obj in objects if obj[1] not in skip]
    _, shadows = run(SHADOW_TABLES)
    shadow_names = {name for (name,) in shadows}
    tables = {}
    for kind, name, _, _ in objects:
        if kind != "table" or name in shadow_names:
            continue
        _, described = run(f"SELECT name FROM pragma_table_xinfo('{name}') WHERE hidden <> 1 ORDER BY cid")
        kept = ", ".join(f'"{column}"' for (column,) in described if (name, column) not in keys_differ)
        _, rows = run(f'SELECT {kept} FROM "{name}"')
        tables[name] = sorted(rows, key=lambda row: tuple(map(_typed, row)))
    return Snapshot(objects=[list(obj) for obj in objects], tables=tables)


def reference_select(conn: apsw.Connection) -> Callable[[str], tuple[list[str], list[list[Any]]]]:
    def run(sql: str) -> tuple[list[str], list[list[Any]]]:
        answer = reference_answer(conn, sql)
        assert answer.error is None, answer.error
        return answer.columns, answer.rows
    return run


def server_select(client: Client) -> Callable[[str], tuple[list[str], list[list[Any]]]]:
    def run(sql: str) -> tuple[list[str], list[list[Any]]]:
        result = client.execute(sql)
        return result.columns, result.rows
    return run


class Differential:
    """One case's run against a replica set that earlier cases may have used: the objects
    they left are not this case's to compare. The reference starts empty for each case."""

    def __init__(self, rs: ReplicaSet, clients: list[Client]) -> None:
        self.rs = rs
        self.clients = clients
        self.reference = open_reference()
        self._earlier = frozenset(obj[1] for obj in server_select(clients[0])(USER_OBJECTS)[1])

    def run(self, case: Case, member_of_step: Callable[[int], int]) -> None:
        """Every step of `case` on member `member_of_step(step index)` and on SQLite; the
        first difference raises `Difference`."""
        for index, step in enumerate(case.steps):
            member = member_of_step(index)
            for statement in step:
                self.run_statement(statement, member)
            self.check_converged(case, f"after {step[-1].where} (member {member + 1})")

    def run_statement(self, statement: Statement, member: int) -> None:
        server = server_answer(self.clients[member], statement.sql)
        if statement.expect is Expect.REFUSED:
            reference = reference_refused(self.reference, statement.sql)
        else:
            reference = reference_answer(self.reference, statement.sql)
        why = disagreement(statement, server, reference)
        if why is not None:
            raise Difference(f"{statement.where} on member {member + 1}: {why}\n  {statement.sql}")

    def check_converged(self, case: Case, when: str) -> None:
        """The set converges, and every member then holds what SQLite holds: a member
        reads what its vclock counts."""
        self.rs.wait_converged()
        expected = snapshot(reference_select(self.reference), skip=frozenset(), keys_differ=case.keys_differ)
        for member in range(len(self.clients)):
            if why := self._differs(member, expected, case):
                raise Difference(f"{when}: {why}")

    def _differs(self, member: int, expected: Snapshot, case: Case) -> str | None:
        held = snapshot(server_select(self.clients[member]), skip=self._earlier, keys_differ=case.keys_differ)
        if held.objects != expected.objects:
            return f"member {member + 1}'s schema objects {held.objects}, SQLite's {expected.objects}"
        for table, rows in expected.tables.items():
            if _ordered_key(held.tables[table]) != _ordered_key(rows):
                return f"member {member + 1}'s table {table}: {held.tables[table]}, SQLite's {rows}"
        return None
