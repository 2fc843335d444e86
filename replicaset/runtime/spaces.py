"""The SQLite schema as Tarantool spaces, for the system views connectors read at connect.

Why this exists: every connector reads `_vspace` and `_vindex` before anything else and
drops the connection when that read fails, so one table these views cannot describe would
lock every new client out. Each schema object is therefore described on its own, and one
that cannot be (a view over a dropped table, a kind SQLite adds later) is listed by name
with an empty format and no index, and logged, rather than failing the whole view.

Theory of operation: `sqlite_schema` tells each object's kind (table, view, virtual table)
and `table_xinfo` its columns; both are read per object, so that only the object SQLite
cannot describe (a virtual table whose module is gone, a view over a dropped table) is
affected. Each kind gets the closest Tarantool description:
- a table (rowid, WITHOUT ROWID, STRICT): every column a `SELECT *` returns, generated
  ones included, its primary key as index 0 (none for a local table without one);
- an FTS5 table: its hidden `rowid` as field 0 and key, then its columns; an R*Tree: its
  columns, keyed by the first (its rowid); a shadow table of either is a plain table;
- a view: its columns, no index, and Tarantool's `{"view": true, "sql": ...}` flags;
- a local table (`local_tables`) carries Tarantool's flag of a local space, `group_id` 1.
Client objects are numbered from 512 in name order; the system tables, which clients read
and never write, get ids below that, as Tarantool's system spaces do: `_cluster` its
Tarantool id, 320, and the engine's `_rs_*` tables 400 on, in name order (docs/decisions.md,
"The engine's tables are shown read-only"). SQLite's own catalog (`sqlite_*`) is not a
space: Tarantool's catalog is these views themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apsw

from replicaset.iproto.sql_wire import sql_type_name
from replicaset.iproto.system_views import Field, Space
from replicaset.storage.schema import INTERNAL_PREFIX, is_internal, quote
from replicaset.storage.virtual import declared

USER_SPACE_ID_MIN = 512
#: Tarantool's own id of `_cluster`; the engine's tables come after Tarantool's system spaces.
SYSTEM_SPACE_IDS = {"_cluster": 320}
ENGINE_SPACE_ID_MIN = 400
LOCAL_FLAGS = {"group_id": 1}  # Tarantool's is_local space
_ROWID = Field(name="rowid", type="integer", is_nullable=False)

#: Told of an object that could not be described: its name and what went wrong.
Skipped = Callable[[str, Exception], None]


def describe_spaces(conn: apsw.Connection, *, local_tables: frozenset[str], skipped: Skipped) -> list[Space]:
    """Every table and view of `conn`'s main schema as a space (see the module docstring)."""
    rows = conn.execute("SELECT name, type, coalesce(sql, '') FROM sqlite_schema WHERE type IN ('table', 'view')"
                        " ORDER BY name").fetchall()
    modules = {name: vt.module for name, vt in declared(conn).items()}
    objects = [(name, "virtual" if name in modules else kind) for name, kind, _ in rows]
    sql = {name: text for name, _, text in rows}
    try:
        strict = {name for (name,) in conn.execute("SELECT name FROM pragma_table_list WHERE schema = 'main' AND strict")}
    except apsw.Error as exc:  # it describes every table at once: one it cannot must not hide the others
        skipped("pragma_table_list", exc)
        strict = set()
    engine = [name for name, _ in objects if name.startswith(INTERNAL_PREFIX)]
    clients = [name for name, _ in objects if not is_internal(name) and name not in SYSTEM_SPACE_IDS]
    ids = {
        **{name: SYSTEM_SPACE_IDS[name] for name, _ in objects if name in SYSTEM_SPACE_IDS},
        **{name: ENGINE_SPACE_ID_MIN + n for n, name in enumerate(engine)},
        **{name: USER_SPACE_ID_MIN + n for n, name in enumerate(clients)},
    }
    spaces = []
    for name, kind in objects:
        if name not in ids:  # SQLite's own catalog
            continue
        flags: dict[str, Any] = dict(LOCAL_FLAGS) if name in local_tables else {}
        try:
            fields, primary_key = _describe(conn, name, kind, modules.get(name), name in strict)
        except Exception as exc:  # noqa: BLE001 - whatever SQLite says of one object, the others are listed
            skipped(name, exc)
            fields, primary_key = (), ()
        if kind == "view":
            flags.update(view=True, sql=sql[name])
        spaces.append(Space(id=ids[name], name=name, fields=fields, primary_key=primary_key, flags=flags))
    return spaces


def _describe(conn: apsw.Connection, name: str, kind: str, module: str | None,
              strict: bool) -> tuple[tuple[Field, ...], tuple[int, ...]]:
    """The fields and the primary key (field numbers) of one object."""
    # cid, name, declared type, notnull, default, pk (1-based rank), hidden (1: a virtual
    # table's hidden column; 2, 3: a generated column, which SELECT * returns)
    columns = [row for row in conn.execute(f"PRAGMA main.table_xinfo({quote(name)})") if row[6] != 1]
    if kind == "view":
        return tuple(Field(name=c[1], type=sql_type_name(c[2]), is_nullable=True) for c in columns), ()
    if strict:  # ANY keeps every value as given, where a plain table's ANY is NUMERIC
        columns = [(*c[:2], "" if c[2].upper() == "ANY" else c[2], *c[3:]) for c in columns]
    if kind == "virtual" and module == "fts5":
        return (_ROWID, *(Field(name=c[1], type=sql_type_name(c[2]), is_nullable=True) for c in columns)), (0,)
    if kind == "virtual" and module in ("rtree", "rtree_i32"):
        return tuple(Field(name=c[1], type=sql_type_name(c[2]), is_nullable=n > 0 and not c[3])
                     for n, c in enumerate(columns)), (0,)
    key = [position for _, position in sorted((c[5], n) for n, c in enumerate(columns) if c[5] > 0)]
    fields = tuple(Field(name=c[1], type=sql_type_name(c[2]), is_nullable=not c[3] and not c[5]) for c in columns)
    return fields, tuple(key)
