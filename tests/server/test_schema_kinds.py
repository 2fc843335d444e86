"""Every kind of table the server accepts, then a fresh connection of each supported
connector: each reads the schema views at connect, so one table those views could not
describe used to reset every new connection (issue 32: an FTS5 table raised KeyError
'rowid' in the view builder). Each kind is checked as net.box and PyPI `tarantool` see its
space, since they build their schema from those rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import tarantool

from tests.server.conftest import Server, running
from tests.server.connectors import run_asynctnt, run_netbox, tarantool_binary  # noqa: F401 - a fixture

NOT_NULL_INTEGER = {"type": "integer", "is_nullable": False}


@dataclass(frozen=True)
class Kind:
    """The DDL making one kind, a query a fresh connection runs on it, and the space net.box
    builds for it: its format, its primary key parts (None: no index) and its flags."""

    ddl: tuple[str, ...]
    space: str
    query: str
    rows: list[list[Any]]
    format: list[dict[str, Any]]
    key_parts: list[dict[str, Any]] | None
    flags: dict[str, Any] = field(default_factory=dict)


def column(name: str, type_: str, nullable: bool = True) -> dict[str, Any]:
    return {"name": name, "type": type_, "is_nullable": nullable}


def part(fieldno: int, type_: str) -> dict[str, Any]:
    """net.box's index part: 1-based field number."""
    return {"fieldno": fieldno, "type": type_, "is_nullable": False}


KINDS = {
    "fts5_external_content": Kind(
        ddl=("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT)",
             "CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id')",
             "INSERT INTO docs(id, body) VALUES (1, 'hello world')",
             "INSERT INTO docs_fts(docs_fts) VALUES ('rebuild')"),
        space="docs_fts", query="SELECT rowid, body FROM docs_fts WHERE docs_fts MATCH 'hello'",
        rows=[[1, "hello world"]],
        format=[column("rowid", "integer", False), column("body", "any")], key_parts=[part(1, "integer")]),
    "fts5_own_content": Kind(
        ddl=("CREATE VIRTUAL TABLE notes USING fts5(title, body)",
             "INSERT INTO notes(rowid, title, body) VALUES (7, 'note', 'hello notes')"),
        space="notes", query="SELECT rowid, title FROM notes WHERE notes MATCH 'hello'", rows=[[7, "note"]],
        format=[column("rowid", "integer", False), column("title", "any"), column("body", "any")],
        key_parts=[part(1, "integer")]),
    "rtree": Kind(
        ddl=("CREATE VIRTUAL TABLE geo USING rtree(id, minx, maxx)", "INSERT INTO geo VALUES (3, 1, 2)"),
        space="geo", query="SELECT id FROM geo WHERE minx <= 1.5 AND maxx >= 1.5", rows=[[3]],
        format=[column("id", "integer", False), column("minx", "double"), column("maxx", "double")],
        key_parts=[part(1, "integer")]),
    "without_rowid": Kind(
        ddl=("CREATE TABLE pairs(a TEXT, b INTEGER, c, PRIMARY KEY (b, a)) WITHOUT ROWID",
             "INSERT INTO pairs VALUES ('x', 1, 2.5)"),
        space="pairs", query="SELECT a, b, c FROM pairs", rows=[["x", 1, 2.5]],
        format=[column("a", "string", False), column("b", "integer", False), column("c", "any")],
        key_parts=[part(2, "integer"), part(1, "string")]),
    "strict": Kind(
        ddl=("CREATE TABLE typed(id INTEGER PRIMARY KEY, n INT NOT NULL, r REAL, x ANY) STRICT",
             "INSERT INTO typed VALUES (1, 2, 0.5, 'any')"),
        space="typed", query="SELECT id, n, r, x FROM typed", rows=[[1, 2, 0.5, "any"]],
        format=[column("id", "integer", False), column("n", "integer", False), column("r", "double"),
                column("x", "any")],
        key_parts=[part(1, "integer")]),
    "generated_columns": Kind(
        ddl=("CREATE TABLE gen(id INTEGER PRIMARY KEY, a INT, b INT GENERATED ALWAYS AS (a * 2) STORED)",
             "INSERT INTO gen(id, a) VALUES (1, 21)"),
        space="gen", query="SELECT * FROM gen", rows=[[1, 21, 42]],
        format=[column("id", "integer", False), column("a", "integer"), column("b", "integer")],
        key_parts=[part(1, "integer")]),
    "view": Kind(
        ddl=("CREATE TABLE base(id INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO base VALUES (1, 'abc')",
             "CREATE VIEW lengths AS SELECT id, v, length(v) AS n FROM base"),
        space="lengths", query="SELECT * FROM lengths", rows=[[1, "abc", 3]],
        format=[column("id", "integer"), column("v", "string"), column("n", "any")], key_parts=None,
        flags={"view": True, "sql": "CREATE VIEW lengths AS SELECT id, v, length(v) AS n FROM base"}),
    "local_table": Kind(
        ddl=("CREATE TABLE scratch(x, y TEXT)", "INSERT INTO scratch VALUES (1, 'one')"),
        space="scratch", query="SELECT x, y FROM scratch", rows=[[1, "one"]],
        format=[column("x", "any"), column("y", "string")], key_parts=None, flags={"group_id": 1}),
}

NETBOX_SCRIPT = r"""
    local ok, result = pcall(conn.execute, conn, arg[2])
    report.rows = ok and result.rows or nil
    report.execute_error = not ok and tostring(result) or nil
    local space = conn.space[arg[3]]
    report.format = space and space:format()
    report.key_parts = space and space.index[0] and space.index[0].parts
"""


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[Server]:
    """A fresh single instance as README starts one, with a local table configured; its DDL
    changes this member only, which a write at the default QUORUM refuses."""
    config = tmp_path / "local.toml"
    config.write_text('local_tables = ["scratch"]\n[replication]\ndefault_write_consistency = "one"\n')
    with running(tmp_path, "--config", str(config)) as srv:
        yield srv


def create(server: Server, ddl: tuple[str, ...]) -> None:
    conn = tarantool.connect("127.0.0.1", server.port)
    try:
        for statement in ddl:
            conn.execute(statement)
    finally:
        conn.close()


def pypi_session(server: Server, kind: Kind) -> tuple[list[list[Any]], list[Any]]:
    """A fresh PyPI connection: the query's rows and the space's `_vspace` row."""
    conn = tarantool.connect("127.0.0.1", server.port)
    try:
        rows = list(conn.execute(kind.query))
        space = conn.select(281, [kind.space], index=2)
        return rows, list(space)
    finally:
        conn.close()


@pytest.mark.parametrize("name", KINDS)
def test_a_fresh_connection_of_every_connector_works_after_each_kind_of_table(
        name: str, local_server: Server, tarantool_binary: str, tmp_path: Path) -> None:  # noqa: F811
    kind = KINDS[name]
    create(local_server, kind.ddl)

    rows, vspace = pypi_session(local_server, kind)
    assert rows == kind.rows
    assert vspace[0][5] == kind.flags, "the space's flags, as _vspace lists them"

    async def asynctnt_session(conn: Any) -> list[list[Any]]:
        assert conn.schema.spaces[kind.space].name == kind.space
        return [list(row) for row in await conn.execute(kind.query)]

    assert run_asynctnt(local_server.port, asynctnt_session) == kind.rows

    report = run_netbox(tarantool_binary, tmp_path, NETBOX_SCRIPT, f"127.0.0.1:{local_server.port}", kind.query,
                     kind.space)
    assert report["connected"] is True, report.get("connect_error")
    assert report.get("rows") == kind.rows, report.get("execute_error")
    assert report["format"] == kind.format
    assert report.get("key_parts") == kind.key_parts


def test_an_object_the_views_cannot_describe_is_listed_bare_and_logged(
        server: Server, tarantool_binary: str, tmp_path: Path) -> None:  # noqa: F811
    """A view over a dropped table: SQLite cannot list its columns. Every connector still
    connects, the view is listed without a format, and the member says which one."""
    create(server, ("CREATE TABLE gone(id INTEGER PRIMARY KEY)", "CREATE VIEW orphan AS SELECT id FROM gone",
                    "DROP TABLE gone", "CREATE TABLE kept(id INTEGER PRIMARY KEY, v TEXT)",
                    "INSERT INTO kept VALUES (1, 'x')"))
    kept = Kind(ddl=(), space="kept", query="SELECT * FROM kept", rows=[[1, "x"]],
                format=[column("id", "integer", False), column("v", "string")], key_parts=[part(1, "integer")])
    rows, _ = pypi_session(server, kept)
    assert rows == kept.rows

    async def asynctnt_session(conn: Any) -> list[Any]:
        return [conn.schema.spaces["orphan"].name, [list(row) for row in await conn.execute(kept.query)]]

    assert run_asynctnt(server.port, asynctnt_session) == ["orphan", kept.rows]
    report = run_netbox(tarantool_binary, tmp_path, NETBOX_SCRIPT, f"127.0.0.1:{server.port}", kept.query, "orphan")
    assert report["connected"] is True, report.get("connect_error")
    assert report.get("rows") == kept.rows
    assert report["format"] == []
    incomplete = [e for e in server.log_events() if e.get("event") == "system_view_incomplete"]
    assert incomplete and incomplete[0]["table"] == "orphan" and "no such table" in incomplete[0]["error"]
    assert all(e["level"] == "warning" and e["instance_id"] == 1 for e in incomplete)
