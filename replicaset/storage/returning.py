"""RETURNING for the rows whose key the auto-id trigger assigned (docs/design/README.md §4.1).

Theory of operation. The trigger of auto_ids.py inserts such a row itself, one trigger
level down, and makes SQLite skip the client's own insert of it; SQLite's RETURNING, which
reports the rows the statement itself writes, never sees that row. `ReturningRows` puts
the answer back together as SQLite would have given it:
- `statement_started` (from the cursor's exec trace) marks where each statement of a
  request starts: its text, its bindings, and how many rows the request returned before it.
- `observe` (from the preupdate hook) records, in order, each row the statement writes
  itself (depth 0: the rows SQLite's RETURNING reports, in that order) and each row the
  trigger inserted in its place (depth 1), with its image as inserted, before any AFTER
  trigger ran, which is what RETURNING reports.
- `complete` evaluates the statement's RETURNING clause over the image of each trigger row
  and puts the result in its place among SQLite's own rows. The clause is read from the
  statement's text with SQLite's tokenizer rules (tokens.py), its parameters renumbered to
  the values the statement was bound with. It is evaluated in a TEMP mirror of the table,
  aliased to the table's name, with the same stored columns, declared types, collations,
  rowid alias and strictness: a column, `*`, `rowid`, affinity and comparison mean in it
  what they mean in the statement's RETURNING. The mirror holds rows only while one
  statement's are evaluated.
An expression that reads the database (a subquery) sees it as the whole statement left it,
where SQLite shows it as it was after that row: the one difference left (docs/decisions.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

from replicaset.storage.capture import Change
from replicaset.storage.errors import SqlError
from replicaset.storage.schema import ROWID_NAMES, quote
from replicaset.storage.tokens import Kind, meaningful, parameter_numbers, tokenize

MIRROR_PREFIX = "_rs_returning."

Bindings = Sequence[Any] | Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Mirror:
    name: str
    key: str  # the rowid alias, or the name the rowid goes by in a table without a key
    key_position: int  # among the stored columns, which the images hold; -1 for the rowid
    columns: tuple[str, ...]  # the stored columns
    # The table has VIRTUAL generated columns, which the mirror cannot compute: the clause
    # is evaluated over the table's own rows as the statement left them.
    computes: bool = False

    @property
    def width(self) -> int:
        return len(self.columns)


def install_mirror(conn: apsw.Connection, table: str) -> Mirror:
    """The mirror of `table`, made when missing and made again when the table's columns
    changed. The triggers' `install` makes it outside client transactions, so that it
    survives one rolled back, as every QUORUM transaction is once captured."""
    mirror, sql = _mirror_of(conn, table)
    stored = conn.execute("SELECT sql FROM temp.sqlite_schema WHERE type = 'table' AND name = ?", (mirror.name,))
    if (stored.fetchone() or (None,))[0] != sql:
        conn.execute(f"DROP TABLE IF EXISTS temp.{quote(mirror.name)}", can_cache=False)
        conn.execute("CREATE TEMP" + sql.removeprefix("CREATE"), can_cache=False)
    return mirror


def _mirror_of(conn: apsw.Connection, table: str) -> tuple[Mirror, str]:
    """The mirror of `table` and the CREATE statement SQLite keeps for it."""
    described = conn.execute(f"PRAGMA main.table_xinfo({quote(table)})").fetchall()
    columns = [r for r in described if r[6] in (0, 3)]
    strict = conn.execute(
        "SELECT strict FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)
    ).fetchone()
    definitions = []
    key, key_position = "", -1
    for position, (_, column, declared, _, _, pk, _) in enumerate(columns):
        collation = conn.column_metadata("main", table, column)[1]
        parts = [quote(column), declared, "PRIMARY KEY" if pk else "", f"COLLATE {quote(collation)}"]
        definitions.append(" ".join(p for p in parts if p))
        if pk:
            key, key_position = column, position
    if key_position < 0:
        taken = {r[1].lower() for r in described}
        key = next((n for n in ROWID_NAMES if n not in taken), "")
        if not key:
            raise SqlError(f"table {table!r} has no rowid to assign")
    name = MIRROR_PREFIX + table
    sql = f"CREATE TABLE {quote(name)}({', '.join(definitions)}){' STRICT' if strict and strict[0] else ''}"
    return Mirror(name=name, key=key, key_position=key_position, columns=tuple(c[1] for c in columns),
                  computes=any(r[6] == 2 for r in described)), sql


def drop_mirrors(conn: apsw.Connection) -> None:
    for (name,) in conn.execute(
        "SELECT name FROM temp.sqlite_schema WHERE type = 'table' AND substr(name, 1, ?) = ?",
        (len(MIRROR_PREFIX), MIRROR_PREFIX),
    ).fetchall():
        conn.execute(f"DROP TABLE temp.{quote(name)}", can_cache=False)


@dataclass(slots=True, kw_only=True)
class _Statement:
    sql: str
    bindings: Bindings
    bindings_count: int
    first_row: int
    # In write order: None for a row SQLite returns, (table, image, rowid) for a trigger row.
    slots: list[tuple[str, tuple[Any, ...], int] | None] = field(default_factory=list)
    assigned: int = 0


class ReturningRows:
    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self._statements: list[_Statement] = []
        self._current: _Statement | None = None
        # ORMs send the same statements again and again: what their text tells is kept.
        self._clauses: dict[str, Clause] = {}
        self._mirrors: dict[str, tuple[int, Mirror]] = {}  # table -> (schema version, mirror)

    def start(self) -> None:
        """A new request: forget the last one's statements."""
        self._statements.clear()
        self._current = None

    def statement_started(self, cursor: apsw.Cursor, sql: str, bindings: Bindings, rows_before: int) -> None:
        """A statement of the request is about to run; only one with result columns can
        have RETURNING rows to complete."""
        self._current = None
        if cursor.description:
            self._current = _Statement(
                sql=sql, bindings=bindings, bindings_count=cursor.bindings_count, first_row=rows_before
            )
            self._statements.append(self._current)

    def observe(self, change: Change, assigned: bool) -> None:
        """A row change of the running statement; `assigned` when it is the insert of a row
        whose key the trigger assigned."""
        statement = self._current
        if statement is None:
            return
        if change.depth == 0 and change.op != "DELETE":
            statement.slots.append(None)
        elif assigned and change.depth == 1:
            statement.slots.append((change.table_name, change.new, change.rowid_new))
            statement.assigned += 1

    def complete(self, rows: list[list[Any]]) -> list[list[Any]]:
        """The request's rows with those of the trigger rows in their places."""
        if not any(s.assigned for s in self._statements):
            return rows
        ends = [s.first_row for s in self._statements[1:]] + [len(rows)]
        completed = rows[: self._statements[0].first_row]
        for statement, end in zip(self._statements, ends):
            returned = rows[statement.first_row:end]
            completed += self._merged(statement, returned) if statement.assigned else returned
        return completed

    def _merged(self, statement: _Statement, returned: list[list[Any]]) -> list[list[Any]]:
        if statement.slots.count(None) != len(returned):
            raise SqlError(
                f"RETURNING gave {len(returned)} rows for the {statement.slots.count(None)} rows the statement "
                "wrote itself: its rows cannot be put in order with those whose key was assigned"
            )
        evaluated = iter(self._evaluate(statement))
        own = iter(returned)
        return [next(own) if slot is None else next(evaluated) for slot in statement.slots]

    def _evaluate(self, statement: _Statement) -> list[list[Any]]:
        images = [slot for slot in statement.slots if slot is not None]
        tables = {table for table, _, _ in images}
        if len(tables) != 1:
            raise SqlError(f"rows whose key was assigned belong to several tables: {sorted(tables)}")
        (table,) = tables
        clause = self._clause(statement.sql)
        values = clause.values(statement.bindings, statement.bindings_count)
        mirror = self._mirror(table)
        if any(len(image) != mirror.width for _, image, _ in images):
            raise SqlError(f"the rows of table {table!r} do not match its columns")
        conn = self._conn
        if mirror.computes:
            return self._evaluate_in_table(table, mirror, clause, values, [rowid for _, _, rowid in images])
        target, alias = f"temp.{quote(mirror.name)}", quote(table)
        # A table without a key is given the rowid beside the stored columns.
        rowid_apart = mirror.key_position < 0
        key_column = f", {quote(mirror.key)}" if rowid_apart else ""
        # The mirror is empty between two evaluations: rows are deleted below, or go
        # with the transaction when it is rolled back.
        try:
            conn.executemany(
                f"INSERT INTO {target}({', '.join(map(quote, mirror.columns))}{key_column})"
                f" VALUES ({', '.join('?' * (mirror.width + rowid_apart))})",
                [(*image, rowid) if rowid_apart else image for _, image, rowid in images],
                can_cache=False,
            )
            found = {
                row[0]: list(row[1:])
                for row in conn.execute(
                    f"SELECT {alias}.{quote(mirror.key)}, {clause.text}\nFROM {target} AS {alias}",
                    values,
                    can_cache=False,
                )
            }
        finally:
            conn.execute(f"DELETE FROM {target}", can_cache=False)
        return [found[rowid] for _, _, rowid in images]

    def _evaluate_in_table(self, table: str, mirror: Mirror, clause: Clause, values: list[Any],
                           rowids: list[int]) -> list[list[Any]]:
        alias, key = quote(table), quote(mirror.key)
        found = {
            row[0]: list(row[1:])
            for row in self._conn.execute(
                f"SELECT {alias}.{key}, {clause.text}\nFROM main.{alias} AS {alias}"
                f" WHERE {alias}.{key} IN (SELECT value FROM json_each(?{len(values) + 1}))",
                [*values, json.dumps(rowids)],
                can_cache=False,
            )
        }
        missing = [rowid for rowid in rowids if rowid not in found]
        if missing:
            raise SqlError(f"RETURNING of table {table!r}, which has VIRTUAL generated columns, reads its rows as the "
                           f"statement left them, and the statement deleted row {missing[0]}")
        return [found[rowid] for rowid in rowids]

    def _clause(self, sql: str) -> Clause:
        clause = self._clauses.get(sql)
        if clause is None:
            if len(self._clauses) >= CLAUSES_KEPT:
                self._clauses.clear()
            clause = self._clauses[sql] = Clause.of(sql)
        return clause

    def _mirror(self, table: str) -> Mirror:
        """The table's mirror, checked to exist (a transaction rolled back may have taken
        it) and made again when the schema moved since it was last made."""
        version = self._conn.execute("PRAGMA main.schema_version", can_cache=False).fetchone()[0]
        kept = self._mirrors.get(table)
        if kept is not None and kept[0] == version and self._conn.execute(
            "SELECT 1 FROM temp.sqlite_schema WHERE type = 'table' AND name = ?", (kept[1].name,)
        ).fetchone():
            return kept[1]
        mirror = install_mirror(self._conn, table)
        self._mirrors[table] = (version, mirror)
        return mirror


CLAUSES_KEPT = 256


@dataclass(frozen=True, slots=True)
class Clause:
    """A statement's RETURNING clause as a result-column list whose parameters are numbered
    from 1 in order of first use; `parameters` holds, for each, its number in the statement
    and its text."""

    text: str
    parameters: tuple[tuple[int, str], ...]
    parameters_max: int  # the highest parameter number of the whole statement

    @classmethod
    def of(cls, sql: str) -> Clause:
        """RETURNING is a reserved word (a quoted name is never it) and its clause runs to
        the end of the statement."""
        tokens = tokenize(sql)
        starts = [i for i, token in meaningful(tokens) if token.is_word("RETURNING") and token.depth == 0]
        if len(starts) != 1:
            raise SqlError("cannot find the RETURNING clause of the statement")
        first = starts[0] + 1
        while first < len(tokens) and tokens[first].kind is Kind.SPACE:
            first += 1
        last = first
        for index in range(first, len(tokens)):
            token = tokens[index]
            if token.kind is Kind.PUNCT and token.text == ";" and token.depth == 0:
                break
            if token.kind is not Kind.SPACE:
                last = index + 1
        numbers = parameter_numbers(tokens)
        renumbered: dict[int, int] = {}
        parameters: list[tuple[int, str]] = []
        parts = []
        for index in range(first, last):
            token = tokens[index]
            if token.kind is not Kind.PARAM:
                parts.append(token.text)
                continue
            number = numbers[index]
            if number not in renumbered:
                renumbered[number] = len(renumbered) + 1
                parameters.append((number, token.text))
            parts.append(f"?{renumbered[number]}")
        if last == first:
            raise SqlError("the RETURNING clause is empty")
        return cls(text="".join(parts), parameters=tuple(parameters),
                   parameters_max=max(numbers.values(), default=0))

    def values(self, bindings: Bindings, bindings_count: int) -> list[Any]:
        """The values the clause's parameters were bound to, as apsw binds them: a sequence
        by number, a mapping by the name without its first character."""
        if self.parameters_max != bindings_count:
            raise SqlError("cannot match the parameters of the RETURNING clause with the statement's")
        if isinstance(bindings, Mapping):
            return [bindings[text[1:]] for _, text in self.parameters]
        sequence = bindings if bindings is not None else ()
        if self.parameters and self.parameters_max > len(sequence):
            raise SqlError("the parameters of the RETURNING clause have no values")
        return [sequence[number - 1] for number, _ in self.parameters]
