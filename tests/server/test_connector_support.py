"""README's list of what works from each supported connector, claim by claim, with the real
connector (issue 32: "any Tarantool connector works" overstated it). What is not served
gets a Tarantool error a user can act on, and the connection goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asynctnt
import pytest
import tarantool

from replicaset.iproto.constants import ErrorCode
from tests.server.conftest import Server, running
from tests.server.connectors import run_asynctnt, run_netbox, tarantool_binary  # noqa: F401 - a fixture

SQL_INSTEAD = "use SQL (EXECUTE)"


@pytest.fixture
def kv(server: Server) -> Server:
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        client.execute("INSERT INTO kv VALUES (1, 'one')")
    return server


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(tarantool.error.DatabaseError) as error:
        call(*args, **kwargs)
    return error.value.args[0], error.value.args[1]


def test_the_tarantool_connector_calls_box_info_and_box_snapshot_and_evals_console_expressions(kv: Server) -> None:
    conn = tarantool.connect("127.0.0.1", kv.port)
    try:
        conn.ping()
        (info,) = conn.call("box.info").data
        assert info["status"] == "running" and info["ro"] is False and info["id"] == 1
        assert conn.call("box.snapshot").data == ["ok"]
        assert list((kv.data_dir / "snap").glob("*.snap"))
        assert conn.eval("return box.info.status").data == ["running"]
        assert conn.eval("box.cfg.read_only").data == [False]
        assert list(conn.execute("SELECT v FROM kv WHERE k = ?", [1])) == [["one"]]
    finally:
        conn.close()


def test_the_tarantool_connector_gets_an_error_to_act_on_for_what_is_not_served(kv: Server) -> None:
    conn = tarantool.connect("127.0.0.1", kv.port)
    try:
        code, message = refused(conn.select, "kv", [1])
        assert code == ErrorCode.UNSUPPORTED and "read data with SQL (EXECUTE)" in message
        for request, args in (("insert", ((2, "two"),)), ("replace", ((2, "two"),)), ("delete", (1,)),
                              ("update", (1, [("=", 1, "uno")])), ("upsert", ((1, "x"), [("=", 1, "y")]))):
            code, message = refused(getattr(conn, request), "kv", *args)
            assert code == ErrorCode.UNSUPPORTED and SQL_INSTEAD in message, (request, message)
        code, message = refused(conn.call, "box.space.kv:select")
        assert code == ErrorCode.NO_SUCH_PROC and "box.info and box.snapshot" in message
        code, message = refused(conn.call, "box.info", 1)
        assert code == ErrorCode.ILLEGAL_PARAMS and "no arguments" in message
        code, message = refused(conn.eval, "return 1 + 1")
        assert code == ErrorCode.ILLEGAL_PARAMS and "box.info" in message
        assert list(conn.execute("SELECT count(*) FROM kv")) == [[1]], "the connection goes on"
    finally:
        conn.close()
    old = tarantool.Connection("127.0.0.1", kv.port, call_16=True)
    try:
        code, message = refused(old.call, "box.info")
        assert code == ErrorCode.UNSUPPORTED and "use CALL (request 10)" in message
    finally:
        old.close()


def test_the_tarantool_connection_pool_finds_the_instance_healthy_and_writable(kv: Server) -> None:
    """ConnectionPool calls box.info for `ro` and `status`; an instance that refused it was
    left UNHEALTHY, and the pool had no server to send anything to."""
    pool = tarantool.ConnectionPool([{"host": "127.0.0.1", "port": kv.port}], refresh_delay=0.1)
    try:
        pool.execute("INSERT INTO kv VALUES (2, 'two')", mode=tarantool.Mode.RW)
        assert list(pool.execute("SELECT count(*) FROM kv", mode=tarantool.Mode.ANY)) == [[2]]
    finally:
        pool.close()


def test_a_user_without_admin_may_not_call_box_functions(tmp_path: Path) -> None:
    config = tmp_path / "users.toml"
    config.write_text('[auth.users.alice]\npassword = "secret"\ngrants = { "*" = ["read", "write"] }\n')
    with running(tmp_path, "--config", str(config)) as server:
        conn = tarantool.connect("127.0.0.1", server.port, user="alice", password="secret")
        try:
            code, message = refused(conn.call, "box.info")
            assert code == ErrorCode.ACCESS_DENIED
            assert message == "Execute access to function 'box.info' is denied for user 'alice'"
            assert list(conn.execute("SELECT 1")) == [[1]]
        finally:
            conn.close()


def test_asynctnt_calls_evals_and_gets_errors_for_what_is_not_served(kv: Server) -> None:
    async def session(conn: asynctnt.Connection) -> None:
        (info,) = (await conn.call("box.info")).body
        assert info["status"] == "running"
        assert (await conn.eval("return box.info.ro")).body == [False]
        for request in (conn.select("kv", [1]), conn.insert("kv", [2, "two"]), conn.call("dostuff")):
            with pytest.raises(asynctnt.exceptions.TarantoolDatabaseError) as error:
                await request
            assert error.value.code in (ErrorCode.UNSUPPORTED, ErrorCode.NO_SUCH_PROC), error.value
        assert [list(row) for row in await conn.execute("SELECT v FROM kv")] == [["one"]]

    run_asynctnt(kv.port, session)


NETBOX_SCRIPT = r"""
    local function try(f, ...)
        local ok, result = pcall(f, ...)
        return ok and {value = result} or {error = tostring(result)}
    end
    report.info = try(conn.call, conn, 'box.info')
    report.eval = try(conn.eval, conn, 'return box.info.status')
    report.execute = try(conn.execute, conn, 'SELECT v FROM kv')
    report.select = try(function() return conn.space.kv:select{1} end)
    report.unknown = try(conn.call, conn, 'nothing_here')
    report.after = try(conn.execute, conn, 'SELECT count(*) FROM kv')
"""


def test_netbox_calls_box_info_evals_and_gets_errors_for_what_is_not_served(
        kv: Server, tarantool_binary: str, tmp_path: Path) -> None:  # noqa: F811
    report = run_netbox(tarantool_binary, tmp_path, NETBOX_SCRIPT, f"127.0.0.1:{kv.port}")
    assert report["connected"] is True
    assert report["info"]["value"]["status"] == "running", report["info"]
    assert report["eval"] == {"value": "running"}
    assert report["execute"]["value"]["rows"] == [["one"]]
    assert "read data with SQL (EXECUTE)" in report["select"]["error"]
    assert "Procedure 'nothing_here' is not defined" in report["unknown"]["error"]
    assert report["after"]["value"]["rows"] == [[1]]
