"""The engine's `_rs_*` tables are shown read-only, the same way everywhere a client looks
(issue 32: they were listed, but one that was listed could not be read). Each place is
checked: sqlite_master and sqlite_schema, PRAGMA table_list and table_info, the schema views
connectors read, SELECT, writes, and `replicaset sql`."""

from __future__ import annotations

import pytest
import tarantool
from tarantool.const import ITERATOR_ALL

from replicaset.iproto.errors import ServerError
from tests.server.conftest import Server
from tests.server.test_cli import cli

ENGINE_TABLES = ["_rs_latent", "_rs_meta", "_rs_quorum", "_rs_schema_log", "_rs_vclock", "_rs_version"]
READ_ONLY = "cannot be changed by a client"


def listed(server: Server, sql: str) -> set[str]:
    with server.client() as client:
        return {row[0] for row in client.execute(sql).rows}


def test_sqlite_master_and_table_list_list_the_same_tables_and_each_one_reads(server: Server) -> None:
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        client.execute("INSERT INTO kv(v) VALUES ('auto id')")  # the engine's RETURNING mirror of kv is made
    master = listed(server, "SELECT name FROM sqlite_master WHERE type = 'table'")
    schema = listed(server, "SELECT name FROM sqlite_schema WHERE type = 'table'")
    with server.client() as client:
        table_list = client.execute("PRAGMA table_list").rows
        assert set(ENGINE_TABLES) <= master == schema
        assert {(row[0], row[1]) for row in table_list} == {("main", name) for name in master | {"sqlite_schema"}} | {
            ("temp", "sqlite_temp_schema")}, "the writer's TEMP tables are no client's"
        for name in sorted(master):
            client.execute(f'SELECT * FROM "{name}"')
            columns = client.execute(f'PRAGMA table_info("{name}")').rows
            assert columns, name
        assert client.execute("SELECT origin FROM _rs_vclock WHERE origin = 1").rows == [[1]]


@pytest.mark.parametrize("statement", [
    "INSERT INTO _rs_meta(name, value) VALUES ('x', 1)",
    "UPDATE _rs_vclock SET lsn = lsn + 1",
    "DELETE FROM _rs_version",
    "DROP TABLE _rs_latent",
    "CREATE INDEX mine ON _rs_quorum(lsn)",
    "ALTER TABLE _rs_meta ADD COLUMN extra TEXT",
])
def test_every_write_to_an_engine_table_is_refused_by_name(server: Server, statement: str) -> None:
    with server.client() as client:
        before = client.execute("SELECT * FROM _rs_vclock").rows
        with pytest.raises(ServerError, match=READ_ONLY):
            client.execute(statement)
        assert client.execute("SELECT * FROM _rs_vclock").rows == before


@pytest.mark.parametrize("statement", [
    "CREATE TABLE _rs_mine(id INTEGER PRIMARY KEY)",
    "CREATE VIEW _rs_view AS SELECT 1",
    "CREATE TABLE kv(k INTEGER PRIMARY KEY)",  # then an index named as the engine's on it
    "CREATE VIRTUAL TABLE _rs_text USING fts5(body)",
])
def test_a_client_cannot_make_an_object_in_the_engines_namespace(server: Server, statement: str) -> None:
    with server.client() as client:
        if statement.startswith("CREATE TABLE kv"):
            client.execute(statement)
            statement = "CREATE INDEX _rs_mine ON kv(k)"
        with pytest.raises(ServerError, match="_rs_.* are the engine's"):
            client.execute(statement)
        names = {row[0] for row in client.execute("SELECT name FROM sqlite_schema").rows}
    assert not {n for n in names if n.startswith("_rs_") and n not in ENGINE_TABLES} - {
        "_rs_tombstones", "_rs_schema_log_id"}, "only the engine's own objects bear its prefix"


def test_the_schema_views_list_the_engine_tables_as_system_spaces(server: Server) -> None:
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    conn = tarantool.connect("127.0.0.1", server.port)
    try:
        spaces = {row[2]: row[0] for row in conn.select(281, [], iterator=ITERATOR_ALL)}
        assert spaces["kv"] == 512
        assert spaces["_cluster"] == 320, "Tarantool's id of _cluster"
        assert [spaces[name] for name in ENGINE_TABLES] == list(range(400, 400 + len(ENGINE_TABLES)))
        assert not [name for name in spaces if name.startswith("sqlite_")]
        (version,) = conn.select(281, ["_rs_version"], index=2)
        assert [f["name"] for f in version[6]] == ["tbl", "key", "hlc", "origin", "deleted", "lsn"]
        assert [part[0] for part in conn.schema.get_index("_rs_version", 0).parts] == [0, 1]
        assert list(conn.execute("SELECT count(*) FROM _rs_meta")) == [[1]]
    finally:
        conn.close()


def test_replicaset_sql_reads_an_engine_table_and_names_why_a_write_is_refused(server: Server) -> None:
    address = f"127.0.0.1:{server.port}"
    shown = cli("sql", address, "SELECT origin FROM _rs_vclock")
    assert shown.returncode == 0 and "(1 row)" in shown.stdout, shown.stderr
    refused = cli("sql", address, "DELETE FROM _rs_vclock")
    assert refused.returncode == 1 and READ_ONLY in refused.stderr
    listed_tables = cli("sql", address, "SELECT name FROM sqlite_master WHERE type = 'table'")
    assert all(name in listed_tables.stdout for name in ENGINE_TABLES)
