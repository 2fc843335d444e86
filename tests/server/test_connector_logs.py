"""Normal replies make no supported connector log anything (issue 32): asynctnt warned
"Unknown key with code ... in header" on every write reply (VCLOCK, 0x26) and every stream
reply (STREAM_ID echoed). The reply vclock is sent only to a request whose OPTIONS asks
for it (`return_vclock`), which no connector sends on its own."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import tarantool

from replicaset.iproto.client import Client
from replicaset.iproto.constants import Key, RequestType
from tests.server.conftest import Server
from tests.server.connectors import run_asynctnt

ONE = {"consistency": "one"}


@pytest.fixture
def captured(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def loud(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.WARNING]


def test_asynctnt_logs_nothing_over_a_session_of_every_kind_of_request(server: Server, captured) -> None:
    async def session(conn: Any) -> None:
        await conn.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        await conn.execute("INSERT INTO kv(k, v) VALUES (?, ?)", [1, "one"])
        await conn.execute("UPDATE kv SET v = 'uno' WHERE k = 1")
        assert [list(r) for r in await conn.execute("SELECT k, v FROM kv")] == [[1, "uno"]]
        stream = conn.stream()
        await stream.begin()
        await stream.execute("INSERT INTO kv(k, v) VALUES (2, 'two')")
        assert [list(r) for r in await stream.execute("SELECT count(*) FROM kv")] == [[2]]
        await stream.commit()
        other = conn.stream()
        await other.begin()
        await other.execute("INSERT INTO kv(k, v) VALUES (3, 'three')")
        await other.rollback()
        prepared = conn.prepare("SELECT v FROM kv WHERE k = ?")
        async with prepared:
            assert [list(r) for r in await prepared.execute([2])] == [["two"]]
        inserting = conn.prepare("INSERT INTO kv(k, v) VALUES (?, ?)")
        async with inserting:
            assert (await inserting.execute([4, "four"])).rowcount == 1
        for bad in ("SELEKT 1", "INSERT INTO kv(k, v) VALUES (1, 'dup')", "SELECT * FROM nowhere"):
            with pytest.raises(Exception, match="syntax error|UNIQUE|no such table"):
                await conn.execute(bad)
        await conn.ping()
        assert [list(r) for r in await conn.execute("SELECT count(*) FROM kv")] == [[3]]

    run_asynctnt(server.port, session)
    assert loud(captured) == []


def test_the_tarantool_connector_logs_and_warns_nothing_over_a_session(server: Server, captured) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the connector warns through `warnings` as well as logging
        conn = tarantool.connect("127.0.0.1", server.port)
        try:
            conn.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
            assert conn.execute("INSERT INTO kv(k, v) VALUES (?, ?)", [1, "one"]).affected_row_count == 1
            assert conn.execute("INSERT INTO kv(v) VALUES (?)", ["auto"]).autoincrement_ids
            assert list(conn.execute("SELECT v FROM kv WHERE k = 1")) == [["one"]]
            with pytest.raises(tarantool.error.DatabaseError):
                conn.execute("INSERT INTO kv(k, v) VALUES (1, 'dup')")
            conn.execute("DELETE FROM kv WHERE k = 1")
            conn.ping()
        finally:
            conn.close()
    assert loud(captured) == []


def test_replies_carry_only_the_header_keys_tarantool_sends(server: Server) -> None:
    """REQUEST_TYPE, SYNC and SCHEMA_VERSION, on stream replies and write replies alike."""
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        replies = [
            client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "INSERT INTO kv VALUES (1, 'a')", Key.SQL_BIND: []}),
            client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "INSERT INTO kv VALUES (2, 'b')", Key.SQL_BIND: [],
                                              Key.OPTIONS: ONE}),
            client.call(RequestType.BEGIN, {}, stream_id=5),
            client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "INSERT INTO kv VALUES (3, 'c')", Key.SQL_BIND: []},
                        stream_id=5),
            client.call(RequestType.COMMIT, {}, stream_id=5),
        ]
    for reply in replies:
        assert set(reply.header) == {Key.REQUEST_TYPE, Key.SYNC, Key.SCHEMA_VERSION}, reply.header


@pytest.mark.parametrize("options", [{}, ONE], ids=["quorum", "one"])
def test_a_write_asked_for_its_vclock_gets_it_and_a_read_waits_for_it(server: Server, options) -> None:
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        written = client.execute("INSERT INTO kv VALUES (1, 'a')", options={**options, "return_vclock": True})
        assert written.vclock is not None and written.vclock[1] >= 1 and 0 not in written.vclock
        plain = client.execute("INSERT INTO kv VALUES (2, 'b')", options=options)
        assert plain.vclock is None
        seen = client.execute("SELECT v FROM kv WHERE k = 1", options={"wait_vclock": written.vclock})
        assert seen.rows == [["a"]]


def test_return_vclock_must_be_a_boolean(server: Server) -> None:
    with Client.connect("127.0.0.1", server.port) as client:
        with pytest.raises(Exception, match="return_vclock must be true or false"):
            client.execute("SELECT 1", options={"return_vclock": 1})
        assert client.execute("SELECT 1").rows == [[1]]
