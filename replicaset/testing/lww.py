"""A reference model of last-writer-wins, written apart from the engine (docs/design/README.md §4.2).

Randomized checks that compare members with each other cannot see a rule that is wrong the
same way everywhere. This model says what every member must hold, given the WAL rows of the
set, from the rules alone: a plain dict keyed by (table, key), no SQL for the data.

Theory of operation.

1. Versions. A row of a DML record of origin `o` whose payload carries the commit stamp `h`
   has the version `(h, o)`: the stamp first, the origin breaks a tie. Of all rows of a key,
   the latest is the one with the highest version; rows with one version come from one
   origin, so its LSN order, then the order inside the record, settles them (a transaction
   that changes a key twice leaves its last image). A delete's latest row is a tombstone;
   its version stays.
2. UNIQUE. A key whose latest row is a tombstone has no row. Taking the other latest images
   from the newest version down, an image is visible unless it holds the values of the
   primary key or of a UNIQUE index (a NULL holds nothing; the index's collation says what
   is equal) that a newer visible image holds. An image that is not visible is latent: no
   tombstone is written for it, and it is visible again as soon as nothing newer holds its
   values (docs/decisions.md, "Secondary UNIQUE collisions: latent rows"; docs/design/README.md §4.2;
   the first design, which deleted the loser with a tombstone at the winner's version, is
   what the simulator proved wrong).
3. Schema. DDL rows run in version order on an in-memory database of the standard
   library's `sqlite3`, only to learn each table's columns, primary key, UNIQUE indexes
   (with collations) and column defaults. A table holds the rows written since its last
   CREATE; a dropped table holds none. Columns an image lacks get their defaults.
4. Rows of origin 0 (local tables) never leave their member and are ignored.

The order in which records are given does not matter. One `(origin, lsn)` given twice with
different bytes is an error (`ModelError`): the set disagrees on that row.

The model decodes payloads from the WAL row format itself (docs/design/README.md §5: DML `{"h", "s", "r": [{"t",
"op", "k", "o", "n"}]}`, DDL `{"h", "sql", "hb", "ha"}`) and imports nothing from
`replicaset.storage` (`tests/sim/test_lww_model.py` checks that), so a bug in the engine's
decoding or applying cannot hide in both.

Limits: partial and expression UNIQUE indexes and collations other than BINARY, NOCASE and
RTRIM raise `Unsupported`; an image applied after an ALTER TABLE ADD COLUMN takes the
column's default, while the engine keeps the stored value of a row it updates.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import msgpack

DML, DDL = 1, 2  # wal.RecordType values (WAL format, docs/design/README.md §5)
OP_DELETE = 3  # captured row ops: 0 insert, 1 replace, 2 update, 3 delete
LOCAL_ORIGIN = 0
# `_rs_version` stores stamps shifted down by 2^63 (unsigned stamps in signed SQLite integers).
HLC_SQL_OFFSET = 1 << 63
DIFFERENCES_LISTED_MAX = 20

Version = tuple[int, int]
Key = str
PrimaryKey = tuple[Any, ...]


class ModelError(ValueError):
    """The rows given cannot come from one replica set (one (origin, lsn), two payloads) or
    cannot be decoded."""


class Unsupported(ModelError):
    """A schema feature the model does not cover."""


class RecordLike(Protocol):
    type: int
    origin: int
    lsn: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Latest:
    """A key's latest row: its version, where it stands in its origin's log, its image
    (None: a tombstone)."""

    order: tuple[int, int, int, int]  # hlc, origin, lsn, index in the record
    image: dict[str, Any] | None

    @property
    def version(self) -> Version:
        return self.order[0], self.order[1]


@dataclass(frozen=True, slots=True)
class TableSchema:
    name: str
    columns: tuple[str, ...]
    pk: tuple[str, ...]
    groups: tuple[tuple[tuple[str, str], ...], ...]
    """The primary key and every UNIQUE index: (column, collation) pairs."""
    defaults: dict[str, Any]


@dataclass(slots=True)
class TableState:
    """What a member holds of one table: rows by primary-key values (writable columns),
    versions by key `(hlc, origin, deleted)`, and latent images by key."""

    rows: dict[PrimaryKey, dict[str, Any]] = field(default_factory=dict)
    versions: dict[Key, tuple[int, int, bool]] = field(default_factory=dict)
    latent: dict[Key, dict[str, Any]] = field(default_factory=dict)


State = dict[str, TableState]


class Model:
    """Feed it WAL records (`add`), then ask what the tables must be (`state`)."""

    def __init__(self) -> None:
        self._payloads: dict[tuple[int, int], bytes] = {}
        self._latest: dict[tuple[str, Key], _Latest] = {}
        self._ddl: list[tuple[tuple[int, int, int], str]] = []

    @property
    def rows_held(self) -> dict[tuple[int, int], bytes]:
        """The payload of every (origin, lsn) given."""
        return dict(self._payloads)

    def add_all(self, records: Iterable[RecordLike]) -> Model:
        for record in records:
            self.add(record)
        return self

    def add(self, record: RecordLike) -> None:
        origin, lsn, payload = int(record.origin), int(record.lsn), bytes(record.payload)
        if origin == LOCAL_ORIGIN:
            return
        held = self._payloads.get((origin, lsn))
        if held is not None:
            if held != payload:
                raise ModelError(f"{origin}:{lsn} is given with two different payloads")
            return
        doc = _unpack(payload, f"{origin}:{lsn}")
        kind = int(record.type)
        if kind == DDL:
            sql, hlc = doc.get("sql"), doc.get("h")
            if not isinstance(sql, str) or not isinstance(hlc, int):
                raise ModelError(f"DDL row {origin}:{lsn} lacks its sql or stamp")
            self._ddl.append(((hlc, origin, lsn), sql))
        elif kind == DML:
            self._add_rows(origin, lsn, doc)
        else:
            raise ModelError(f"row {origin}:{lsn} has record type {kind}")
        self._payloads[(origin, lsn)] = payload

    def _add_rows(self, origin: int, lsn: int, doc: dict[str, Any]) -> None:
        hlc, rows = doc.get("h"), doc.get("r")
        if not isinstance(hlc, int) or not isinstance(rows, list):
            raise ModelError(f"DML row {origin}:{lsn} lacks its stamp or rows")
        for index, row in enumerate(rows):
            try:
                table, key, op = row["t"], row["k"], row["op"]
                image = None if op == OP_DELETE else row["n"]
            except (KeyError, TypeError) as exc:
                raise ModelError(f"DML row {origin}:{lsn} has a malformed change: {row!r:.120}") from exc
            order = (hlc, origin, lsn, index)
            current = self._latest.get((table, key))
            if current is None or order > current.order:
                self._latest[(table, key)] = _Latest(order, image)

    # ------------------------------------------------------------------ the expected tables

    def schemas(self) -> dict[str, tuple[TableSchema, tuple[int, int, int]]]:
        """Every table at the end, with the order of the DDL row that last created it."""
        conn = sqlite3.connect(":memory:")
        try:
            created: dict[str, tuple[int, int, int]] = {}
            for order, sql in sorted(self._ddl):
                before = set(_table_names(conn))
                try:
                    conn.executescript(sql)
                except sqlite3.Error as exc:
                    raise ModelError(f"DDL row {order[1]}:{order[2]} does not run: {exc}") from exc
                for name in set(_table_names(conn)) - before:
                    created[name] = order
            return {name: (_schema(conn, name), created.get(name, (0, 0, 0))) for name in _table_names(conn)}
        finally:
            conn.close()

    def state(self) -> State:
        """What every member holding exactly the rows given must hold."""
        result: State = {}
        schemas = self.schemas()
        for name, (schema, created) in schemas.items():
            result[name] = TableState()
        live: dict[str, list[tuple[tuple[int, int, int, int], Key, dict[str, Any]]]] = {}
        for (table, key), latest in self._latest.items():
            if table not in schemas or latest.order[:3] < schemas[table][1]:
                continue
            hlc, origin = latest.version
            result[table].versions[key] = (hlc, origin, latest.image is None)
            if latest.image is not None:
                live.setdefault(table, []).append((latest.order, key, latest.image))
        for table, images in live.items():
            schema = schemas[table][0]
            taken: list[set[tuple[Any, ...]]] = [set() for _ in schema.groups]
            for _, key, image in sorted(images, key=lambda entry: entry[0], reverse=True):
                values = [_group_values(image, group) for group in schema.groups]
                if any(v is not None and v in seen for v, seen in zip(values, taken)):
                    result[table].latent[key] = dict(image)
                    continue
                for v, seen in zip(values, taken):
                    if v is not None:
                        seen.add(v)
                row = {column: image.get(column, schema.defaults.get(column)) for column in schema.columns}
                result[table].rows[tuple(row[c] for c in schema.pk)] = row
        return result


def _unpack(payload: bytes, where: str) -> dict[str, Any]:
    try:
        doc = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ModelError(f"row {where} is not msgpack: {exc}") from exc
    if not isinstance(doc, dict):
        raise ModelError(f"row {where} is not a msgpack map")
    return doc


def _table_names(conn: sqlite3.Connection) -> list[str]:
    return [
        name for (name,) in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
        if not name.startswith(("sqlite_", "_rs_"))
    ]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_COLLATIONS = ("BINARY", "NOCASE", "RTRIM")


def _schema(conn: sqlite3.Connection, table: str) -> TableSchema:
    info = conn.execute(f"PRAGMA table_xinfo({_quote(table)})").fetchall()
    columns = tuple(r[1] for r in info if r[6] == 0)
    pk = tuple(name for _, name in sorted((r[5], r[1]) for r in info if r[5] > 0))
    defaults = {r[1]: conn.execute(f"SELECT {r[4]}").fetchone()[0] for r in info if r[4] is not None}
    groups: list[tuple[tuple[str, str], ...]] = []
    has_pk_index = False
    for _, index, unique, origin, partial in conn.execute(f"PRAGMA index_list({_quote(table)})").fetchall():
        if not unique:
            continue
        if partial:
            raise Unsupported(f"table {table!r}: partial UNIQUE index {index!r}")
        group = []
        for _, cid, column, _, collation, is_key in conn.execute(f"PRAGMA index_xinfo({_quote(index)})"):
            if not is_key:
                continue
            if cid < 0 or column is None:
                raise Unsupported(f"table {table!r}: UNIQUE index {index!r} on an expression")
            if collation not in _COLLATIONS:
                raise Unsupported(f"table {table!r}: collation {collation} in index {index!r}")
            group.append((column, collation))
        has_pk_index |= origin == "pk"
        groups.append(tuple(group))
    if pk and not has_pk_index:  # an INTEGER PRIMARY KEY is the rowid: no index of its own
        groups.insert(0, tuple((column, "BINARY") for column in pk))
    return TableSchema(name=table, columns=columns, pk=pk, groups=tuple(groups), defaults=defaults)


def _group_values(image: Mapping[str, Any], group: tuple[tuple[str, str], ...]) -> tuple[Any, ...] | None:
    """The values an image holds in one index, as the index compares them; None when one
    is NULL (SQL NULLs are distinct)."""
    values = []
    for column, collation in group:
        value = image.get(column)
        if value is None:
            return None
        if isinstance(value, str):
            if collation == "NOCASE":
                value = value.translate(_ASCII_LOWER)
            elif collation == "RTRIM":
                value = value.rstrip(" ")
        values.append(value)
    return tuple(values)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


# ---------------------------------------------------------------------- what members hold


class _Queryable(Protocol):
    def query(self, sql: str, binds: Any = ...) -> Any: ...

    def versions(self, table: str) -> dict[str, tuple[int, int, bool]]: ...


def engine_state(engine: _Queryable, *, local_tables: Iterable[str] = ()) -> State:
    """What an open engine holds, read through its reader (`Engine.query`, `Engine.versions`)."""

    def rows(sql: str, binds: tuple[Any, ...] = ()) -> list[list[Any]]:
        return engine.query(sql, binds).rows

    return _read_state(rows, engine.versions, set(local_tables))


def db_state(db_path: Path, *, local_tables: Iterable[str] = ()) -> State:
    """What a member's `db.sqlite` holds (stopped member), read from a copy."""
    with tempfile.TemporaryDirectory(prefix="lww-db-") as tmp:
        copy = Path(tmp) / "db.sqlite"
        shutil.copyfile(db_path, copy)
        side = Path(str(db_path) + "-wal")
        if side.exists():
            shutil.copyfile(side, Path(str(copy) + "-wal"))
        conn = sqlite3.connect(copy)
        try:
            def rows(sql: str, binds: tuple[Any, ...] = ()) -> list[list[Any]]:
                return [list(r) for r in conn.execute(sql, binds)]

            def versions(table: str) -> dict[str, tuple[int, int, bool]]:
                return {key: (hlc + HLC_SQL_OFFSET, origin, bool(deleted)) for key, hlc, origin, deleted in
                        rows("SELECT key, hlc, origin, deleted FROM _rs_version WHERE tbl = ?", (table,))}

            return _read_state(rows, versions, set(local_tables))
        finally:
            conn.close()


def _read_state(rows: Any, versions: Any, local_tables: set[str]) -> State:
    state: State = {}
    for (table,) in rows("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"):
        if table.startswith(("sqlite_", "_rs_")) or table in local_tables:
            continue
        info = rows(f"PRAGMA table_xinfo({_quote(table)})")
        columns = [r[1] for r in info if r[6] == 0]
        pk = [name for _, name in sorted((r[5], r[1]) for r in info if r[5] > 0)]
        select = ", ".join(map(_quote, columns))
        held = TableState(versions=dict(versions(table)))
        for values in rows(f"SELECT {select} FROM {_quote(table)}"):
            row = dict(zip(columns, values))
            held.rows[tuple(row[c] for c in pk)] = row
        for key, image in rows("SELECT key, image FROM _rs_latent WHERE tbl = ?", (table,)):
            held.latent[key] = msgpack.unpackb(image, raw=False)
        state[table] = held
    return state


def differing_tables(expected: State, held: State) -> list[str]:
    """The tables whose rows, versions or latent images differ, or that only one side has."""
    return sorted(t for t in set(expected) | set(held) if expected.get(t) != held.get(t))


def differences(expected: State, held: State, *, limit: int = DIFFERENCES_LISTED_MAX) -> list[str]:
    """What `held` has that `expected` has not and back, one line each (at most `limit`)."""
    found: list[str] = []
    for table in sorted(set(expected) | set(held)):
        if table not in held:
            found.append(f"table {table} is missing")
            continue
        if table not in expected:
            found.append(f"table {table} should not exist")
            continue
        want, have = expected[table], held[table]
        for kind, a, b in (("row", want.rows, have.rows), ("version of", want.versions, have.versions),
                           ("latent image of", want.latent, have.latent)):
            for key in sorted(set(a) | set(b), key=repr):
                if a.get(key) != b.get(key):
                    found.append(f"{table}: {kind} {key!r}: expected {a.get(key)!r}, held {b.get(key)!r}")
    return found[:limit]
