"""Renamed tables and columns, dropped columns and tables, and the rows written before them
(docs/decisions.md, "Renames and dropped columns follow the schema id").

Theory of operation. Replicated DDL rows are totally ordered: each is written under the
set's DDL lock against the schema hash its predecessor left. Every data row names the last
DDL row it was captured under (its schema id), and an applier holds it back until that DDL
row is here; so every DDL row this member applied after that one was unknown to the row's
writer, and every member applies them in the same order. Each member logs the replicated
DDL rows it applies, in that order, with what each renamed or dropped (`_rs_schema_log`,
written in the DDL row's own SQLite transaction). A row is carried forward through the
changes logged after its schema id (`carry`): its table and columns take their new names,
a dropped column leaves its images, and a row of a dropped table is discarded, even when
another table took the name later. When the DDL row applies, `follow` moves what the
engine keeps by table and column name (versions, latent images), so a row that arrived
before the change ends where one carried after it does.

Names are compared as SQLite compares identifiers: ASCII letters without case.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

import apsw
import msgpack

from replicaset.storage.keys import intent_key
from replicaset.storage.rows import CapturedRow, Op
from replicaset.storage.tokens import Kind, Token, meaningful, quote, tokenize

SCHEMA_LOG_DDL = (
    # One row per replicated DDL row applied here, in apply order; `changes` is None for a
    # DDL row that renamed and dropped nothing.
    "CREATE TABLE IF NOT EXISTS _rs_schema_log(seq INTEGER PRIMARY KEY, origin INTEGER NOT NULL,"
    " lsn INTEGER NOT NULL, changes BLOB)",
    "CREATE UNIQUE INDEX IF NOT EXISTS _rs_schema_log_id ON _rs_schema_log(origin, lsn)",
)

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold(name: str) -> str:
    """`name` as SQLite matches identifiers: only ASCII letters fold case."""
    return name.translate(_ASCII_LOWER)


class ChangeKind(IntEnum):
    TABLE_RENAMED = 0
    COLUMN_RENAMED = 1
    COLUMN_DROPPED = 2
    TABLE_DROPPED = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """What one DDL row did to a name rows carry: `new` is the new table or column name."""

    kind: ChangeKind
    table: str
    column: str = ""
    new: str = ""

    def to_wire(self) -> list[Any]:
        return [int(self.kind), self.table, self.column, self.new]

    @classmethod
    def from_wire(cls, item: Sequence[Any]) -> Change:
        return cls(kind=ChangeKind(item[0]), table=item[1], column=item[2], new=item[3])


def parse_alter(sql: str) -> Change | None:
    """The rename or column drop of an `ALTER TABLE` statement SQLite accepted, None for any
    other statement. The names are as written, unquoted; `changes_of` settles the table's."""
    words = [t for _, t in meaningful(tokenize(sql)) if t.text != ";"]
    if len(words) < 4 or not (words[0].is_word("ALTER") and words[1].is_word("TABLE")):
        return None
    rest = words[2:]
    if len(rest) > 2 and rest[1].text == ".":  # schema.table
        rest = rest[2:]
    if len(rest) < 2:
        return None
    table, verb, args = _name(rest[0]), rest[1], rest[2:]
    if verb.is_word("RENAME"):
        if len(args) == 2 and args[0].is_word("TO"):
            return Change(kind=ChangeKind.TABLE_RENAMED, table=table, new=_name(args[1]))
        if len(args) == 4 and args[0].is_word("COLUMN"):
            args = args[1:]
        if len(args) == 3 and args[1].is_word("TO"):
            return Change(kind=ChangeKind.COLUMN_RENAMED, table=table, column=_name(args[0]), new=_name(args[2]))
    elif verb.is_word("DROP"):
        if len(args) == 2 and args[0].is_word("COLUMN"):
            args = args[1:]
        if len(args) == 1:
            return Change(kind=ChangeKind.COLUMN_DROPPED, table=table, column=_name(args[0]))
    return None


def _name(token: Token) -> str:
    """An identifier token's name: quotes taken off, doubled quotes made single."""
    text = token.text
    if token.kind is Kind.QUOTED and text[0] == "[":
        return text[1:-1]
    if token.kind in (Kind.QUOTED, Kind.STRING):
        return text[1:-1].replace(text[0] * 2, text[0])
    return text


def changes_of(sql: str, tables_before: Iterable[str], tables_after: Iterable[str]) -> tuple[Change, ...]:
    """What a DDL statement that ran did to the names rows carry: its rename or column drop,
    read off its text, then every table it dropped, read off the tables it left."""
    before = {fold(t): t for t in tables_before}
    after = {fold(t): t for t in tables_after}
    changes = []
    alter = parse_alter(sql)
    if alter is not None and fold(alter.table) in before:
        new = after.get(fold(alter.new), alter.new) if alter.kind is ChangeKind.TABLE_RENAMED else alter.new
        alter = replace(alter, table=before[fold(alter.table)], new=new)
        changes.append(alter)
        if alter.kind is ChangeKind.TABLE_RENAMED:
            after[fold(alter.table)] = alter.table  # gone by its new name, not dropped
    changes.extend(Change(kind=ChangeKind.TABLE_DROPPED, table=table)
                   for name, table in sorted(before.items()) if name not in after)
    return tuple(changes)


def carry(rows: Sequence[CapturedRow], changes: Sequence[Change],
          pk_columns: Callable[[str], Sequence[str] | None]) -> list[CapturedRow]:
    """`rows`, captured before `changes`, as they read after them: rows of a dropped table
    left out. `pk_columns` gives a table's primary key now, for a composite key whose
    column was renamed (its parts are in column-name order)."""
    if not changes:
        return list(rows)
    carried = []
    for row in rows:
        moved = _carry_row(row, changes, pk_columns)
        if moved is not None:
            carried.append(moved)
    return carried


def _carry_row(row: CapturedRow, changes: Sequence[Change],
               pk_columns: Callable[[str], Sequence[str] | None]) -> CapturedRow | None:
    table, key, old, new = row.table, row.key, row.old, row.new
    renamed_column = False
    for change in changes:
        if fold(change.table) != fold(table):
            continue
        if change.kind is ChangeKind.TABLE_DROPPED:
            return None
        if change.kind is ChangeKind.TABLE_RENAMED:
            key = change.new + key[len(table):]
            table = change.new
        elif change.kind is ChangeKind.COLUMN_RENAMED:
            old, new = _rename_column(old, change), _rename_column(new, change)
            renamed_column = True
        else:
            old, new = _drop_column(old, change.column), _drop_column(new, change.column)
    if renamed_column and key.startswith(f"{table}:c:"):
        pk = pk_columns(table)
        image = (old if row.op is Op.DELETE else new) or {}
        if pk and all(c in image for c in pk):
            key = intent_key(table, pk, [image[c] for c in pk])
    if table == row.table and key == row.key and old is row.old and new is row.new:
        return row
    return CapturedRow(table=table, op=row.op, key=key, old=old, new=new, rowid=row.rowid)


def _rename_column(image: dict[str, Any] | None, change: Change) -> dict[str, Any] | None:
    if image is None:
        return None
    wanted = fold(change.column)
    return {change.new if fold(name) == wanted else name: value for name, value in image.items()}


def _drop_column(image: dict[str, Any] | None, column: str) -> dict[str, Any] | None:
    if image is None:
        return None
    wanted = fold(column)
    return {name: value for name, value in image.items() if fold(name) != wanted}


class SchemaLog:
    """The replicated DDL rows applied here and what they renamed and dropped, with the
    changes since a schema id kept until the next DDL row (rows around a DDL row ask for
    the same few)."""

    def __init__(self) -> None:
        self._since: dict[tuple[int, int], tuple[Change, ...]] = {}

    def forget(self) -> None:
        """What is kept is stale: a DDL row applied, or a batch rolled back."""
        self._since.clear()

    def record(self, conn: apsw.Connection, schema_id: tuple[int, int], changes: Sequence[Change]) -> None:
        """Log the DDL row `schema_id` that just ran on `conn` and move what the engine keeps
        by name (`follow`), in the DDL row's SQLite transaction."""
        packed = msgpack.packb([c.to_wire() for c in changes], use_bin_type=True) if changes else None
        conn.execute("INSERT OR REPLACE INTO _rs_schema_log(origin, lsn, changes) VALUES (?, ?, ?)",
                     (*schema_id, packed))
        follow(conn, changes)
        self.forget()

    def changes_since(self, conn: apsw.Connection, schema_id: tuple[int, int]) -> tuple[Change, ...]:
        """The renames and drops applied here after the DDL row `schema_id`, in order. A
        schema id the log does not hold is older than the log (the database predates it,
        when no rename or drop ran): every logged change came after it."""
        found = self._since.get(schema_id)
        if found is None:
            row = conn.execute("SELECT seq FROM _rs_schema_log WHERE origin = ? AND lsn = ?", schema_id).fetchone()
            found = tuple(
                Change.from_wire(item)
                for (packed,) in conn.execute(
                    "SELECT changes FROM _rs_schema_log WHERE seq > ? AND changes IS NOT NULL ORDER BY seq",
                    (row[0] if row else 0,))
                for item in msgpack.unpackb(packed, raw=False))
            self._since[schema_id] = found
        return found


def touched(changes: Sequence[Change], tables: Iterable[str]) -> str | None:
    """The first of `tables` that one of `changes` renamed, dropped, or changed a column of."""
    changed = {fold(c.table) for c in changes}
    return next((t for t in tables if fold(t) in changed), None)


def follow(conn: apsw.Connection, changes: Sequence[Change]) -> None:
    """Move the versions and latent images kept by the old names to the new ones."""
    for change in changes:
        if change.kind is ChangeKind.TABLE_RENAMED:
            for internal in ("_rs_version", "_rs_latent"):
                conn.execute(f"UPDATE {internal} SET tbl = ?1, key = ?1 || substr(key, length(tbl) + 1)"
                             " WHERE tbl = ?2 COLLATE NOCASE", (change.new, change.table))
        elif change.kind is ChangeKind.COLUMN_RENAMED:
            _edit_latent(conn, change.table, lambda image, c=change: _rename_column(image, c))
            _rekey_composite(conn, change)
        elif change.kind is ChangeKind.COLUMN_DROPPED:
            _edit_latent(conn, change.table, lambda image, c=change: _drop_column(image, c.column))


def _edit_latent(conn: apsw.Connection, table: str, edit: Callable[[dict[str, Any]], dict[str, Any] | None]) -> None:
    for key, blob in conn.execute("SELECT key, image FROM _rs_latent WHERE tbl = ? COLLATE NOCASE",
                                  (table,)).fetchall():
        image = edit(msgpack.unpackb(blob, raw=False))
        conn.execute("UPDATE _rs_latent SET image = ? WHERE tbl = ? COLLATE NOCASE AND key = ?",
                     (msgpack.packb(image, use_bin_type=True), table, key))


def _rekey_composite(conn: apsw.Connection, change: Change) -> None:
    """A composite key lists its values in column-name order: renaming one of its columns
    can change that order, so the kept keys are written again in the new one."""
    pk = [name for _, name in sorted((r[5], r[1]) for r in conn.execute(
        f"PRAGMA main.table_info({quote(change.table)})") if r[5] > 0)]
    if len(pk) < 2 or fold(change.new) not in {fold(c) for c in pk}:
        return
    new_order = sorted(pk)
    old_order = sorted(change.column if fold(c) == fold(change.new) else c for c in pk)
    renamed = {change.column: change.new}
    moves = [new_order.index(renamed.get(name, name)) for name in old_order]
    if moves == list(range(len(pk))):
        return
    for internal in ("_rs_version", "_rs_latent"):
        # Read, delete, then write again: keys swapped in place would collide on the way.
        kept = conn.execute(f"SELECT * FROM {internal} WHERE tbl = ? COLLATE NOCASE", (change.table,)).fetchall()
        conn.execute(f"DELETE FROM {internal} WHERE tbl = ? COLLATE NOCASE", (change.table,))
        for tbl, key, *rest in kept:
            prefix = f"{tbl}:c:"
            if key.startswith(prefix):
                parts = key[len(prefix):].split(":")
                ordered = [""] * len(parts)
                for position, part in zip(moves, parts):
                    ordered[position] = part
                key = prefix + ":".join(ordered)
            conn.execute(f"INSERT INTO {internal} VALUES ({', '.join('?' * (2 + len(rest)))})", (tbl, key, *rest))
