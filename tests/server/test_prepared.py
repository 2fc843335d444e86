"""Prepared statements against a real server: asynctnt's `prepare` (PREPARE, EXECUTE by
STMT_ID, unprepare) beside the PyPI `tarantool` connector's plain EXECUTE of the same text.

asynctnt connects with its defaults, as a user would: ID, then (as guest, no AUTH) the
schema from `_vspace` and `_vindex`, which the server answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asynctnt
import pytest
import tarantool
from asynctnt.exceptions import TarantoolDatabaseError

from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from replicaset.iproto.prepared import statement_id

T = TypeVar("T")

INSERT = "INSERT INTO people(name, age) VALUES (?, ?)"
SELECT = "SELECT id, name, age FROM people WHERE age >= :age ORDER BY id"


@pytest.fixture
def conn(server):
    connection = tarantool.connect("127.0.0.1", server.port)
    connection.execute("CREATE TABLE people(id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER)")
    yield connection
    connection.close()


def with_asynctnt(server, body: Callable[[asynctnt.Connection], Awaitable[T]]) -> T:
    """Run `body` on a fresh asynctnt connection (its own session) and close it."""

    async def main() -> T:
        connection = asynctnt.Connection(host="127.0.0.1", port=server.port, connect_timeout=5, reconnect_timeout=0)
        await connection.connect()
        try:
            return await asyncio.wait_for(body(connection), timeout=10)
        finally:
            await connection.disconnect()

    return asyncio.run(main())


def fields(metadata: Any) -> list[tuple[str, str]]:
    return [(field.name, field.type) for field in metadata.fields]


def body_fields(body: dict[int, Any]) -> list[tuple[str, str]]:
    return [(column[0], column[1]) for column in body[Key.METADATA]]


def test_prepared_statements_answer_as_plain_execute(server, conn):
    async def prepared(connection: asynctnt.Connection) -> dict[str, Any]:
        insert = connection.prepare(INSERT)
        insert_id = await insert.prepare()
        inserted = [await insert.execute([name, age]) for name, age in (("ann", 31), ("bob", 40), ("cid", 25))]
        described = await connection.prepare_iproto(SELECT)
        select = connection.prepare(SELECT)
        await select.prepare()
        selected = await select.execute([{":age": 30}])
        return {
            "insert_id": insert_id, "insert_params": fields(insert.params), "insert_count": insert.params_count,
            "inserted": [(r.rowcount, r.autoincrement_ids) for r in inserted],
            "described": described, "rows": [list(row) for row in selected], "metadata": fields(selected.metadata),
            "again": (await connection.prepare_iproto(SELECT)).stmt_id,
        }

    plain = [conn.execute(INSERT, [name, age]) for name, age in (("dan", 52), ("eve", 19), ("fay", 33))]
    got = with_asynctnt(server, prepared)

    assert got["insert_id"] == statement_id(INSERT)
    assert (got["insert_count"], got["insert_params"]) == (2, [("?", "ANY"), ("?", "ANY")])
    assert [count for count, _ in got["inserted"]] == [r.affected_row_count for r in plain] == [1, 1, 1]
    assert [len(auto) for _, auto in got["inserted"]] == [len(r.autoincrement_ids) for r in plain] == [1, 1, 1]
    ids = dict(zip(["ann", "bob", "cid"], [i for _, auto in got["inserted"] for i in auto]))
    ids.update(zip(["dan", "eve", "fay"], [i for r in plain for i in r.autoincrement_ids]))
    assert len(set(ids.values())) == 6, "each INSERT, prepared or not, reports the id it issued"

    expected = conn.execute(SELECT, {"age": 30})
    assert got["rows"] == list(expected) == sorted([[ids["ann"], "ann", 31], [ids["bob"], "bob", 40],
                                                    [ids["dan"], "dan", 52], [ids["fay"], "fay", 33]])
    columns = [("id", "integer"), ("name", "string"), ("age", "integer")]
    assert got["metadata"] == body_fields(expected.body) == columns
    described = got["described"]
    assert described.stmt_id == got["again"] == statement_id(SELECT), "the same text, the same id"
    assert (described.params_count, fields(described.params)) == (1, [(":age", "ANY")])
    assert fields(described.metadata) == columns, "PREPARE describes the columns EXECUTE returns"


def test_prepare_after_add_column_describes_the_new_column(server, conn):
    """The reader that compiles PREPARE loads a schema another connection changed only when
    it reads a table: PREPARE must describe the column added since it last did."""

    async def prepare_around_alter(connection: asynctnt.Connection) -> tuple[list[Any], list[Any]]:
        before = await connection.prepare_iproto("SELECT * FROM people")
        conn.execute("ALTER TABLE people ADD COLUMN colour TEXT DEFAULT 'red'")
        after = await connection.prepare_iproto("SELECT * FROM people")
        return fields(before.metadata), fields(after.metadata)

    columns = [("id", "integer"), ("name", "string"), ("age", "integer")]
    assert with_asynctnt(server, prepare_around_alter) == (columns, [*columns, ("colour", "string")])


def test_an_unprepared_or_foreign_id_is_a_wrong_query_id(server, conn):
    async def unprepare_then_execute(connection: asynctnt.Connection) -> tuple[int, list[Any], list[Any]]:
        kept = await connection.prepare_iproto("SELECT count(*) FROM people")
        dropped = connection.prepare("SELECT 1 + 1")
        stmt_id = await dropped.prepare()
        before = list((await connection.execute(stmt_id))[0])
        await dropped.unprepare()
        errors = []
        for attempt in (connection.execute(stmt_id), connection.unprepare_iproto(stmt_id)):
            with pytest.raises(TarantoolDatabaseError) as exc:
                await attempt
            errors.append((exc.value.code, exc.value.message))
        return kept.stmt_id, before, errors

    kept_id, before, errors = with_asynctnt(server, unprepare_then_execute)
    stmt_id = statement_id("SELECT 1 + 1")
    assert before == [2]
    assert errors == [(ErrorCode.WRONG_QUERY_ID, f"Prepared statement with id {stmt_id} does not exist")] * 2

    async def execute_foreign(connection: asynctnt.Connection) -> tuple[int, str]:
        with pytest.raises(TarantoolDatabaseError) as exc:
            await connection.execute(kept_id)
        return exc.value.code, exc.value.message

    # The first session is gone, and its statements with it; ids never cross sessions.
    assert with_asynctnt(server, execute_foreign) == (
        ErrorCode.WRONG_QUERY_ID, f"Prepared statement with id {kept_id} does not exist")


def test_a_bad_prepare_fails_cleanly_and_the_connection_keeps_serving(server, conn):
    bad = {
        "SELEKT 1": (ErrorCode.SQL_EXECUTE, "syntax error"),
        "INSERT INTO nowhere VALUES (1)": (ErrorCode.SQL_EXECUTE, "no such table: nowhere"),
        "  -- nothing": (ErrorCode.SQL_STATEMENT_EMPTY, "empty SQL statement"),
        "SELECT 1; SELECT 2": (ErrorCode.SQL_PREPARE, "more than one statement"),
    }

    async def prepare_bad(connection: asynctnt.Connection) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for sql in bad:
            with pytest.raises(TarantoolDatabaseError) as exc:
                await connection.prepare_iproto(sql)
            with pytest.raises(TarantoolDatabaseError) as unknown:
                await connection.execute(statement_id(sql))
            seen[sql] = (exc.value.code, exc.value.message, unknown.value.code)
        good = connection.prepare("SELECT count(*) FROM people WHERE age > ?")
        await good.prepare()
        seen["good"] = list((await good.execute([0]))[0])
        return seen

    seen = with_asynctnt(server, prepare_bad)
    for sql, (code, message) in bad.items():
        got_code, got_message, unknown_code = seen[sql]
        assert (got_code, unknown_code) == (code, ErrorCode.WRONG_QUERY_ID), sql
        assert message in got_message, sql
    assert seen["good"] == [0]
    assert list(conn.execute("SELECT count(*) FROM people")) == [[0]], "the server serves everyone else"


def test_a_prepared_statement_is_refused_as_its_text(server, conn):
    refused = ["BEGIN", "DELETE FROM _cluster", "VACUUM"]
    plain = {}
    for sql in refused:
        with pytest.raises(tarantool.error.DatabaseError) as exc:
            conn.execute(sql)
        plain[sql] = (exc.value.args[0], exc.value.args[1])

    async def execute_prepared(connection: asynctnt.Connection) -> dict[str, tuple[int, str]]:
        seen = {}
        for sql in refused:
            stmt_id = await connection.prepare(sql).prepare()  # compiled only, as Tarantool does
            with pytest.raises(TarantoolDatabaseError) as exc:
                await connection.execute(stmt_id)
            seen[sql] = (exc.value.code, exc.value.message)
        return seen

    assert with_asynctnt(server, execute_prepared) == plain
    assert list(conn.execute("SELECT count(*) FROM _cluster")) == [[1]]


def test_prepared_statements_in_a_stream_transaction(server, conn):
    async def transactions(connection: asynctnt.Connection) -> None:
        stream = connection.stream()
        insert = stream.prepare(INSERT)
        await insert.prepare()
        await stream.begin()
        await insert.execute(["gone", 1])
        assert list((await stream.execute("SELECT count(*) FROM people"))[0]) == [1]
        await stream.rollback()
        async with stream:
            await insert.execute(["kept", 2])
            await insert.execute(["also", 3])

    with_asynctnt(server, transactions)
    assert list(conn.execute("SELECT name FROM people ORDER BY age")) == [["kept"], ["also"]]


def test_wire_shapes_and_consistency_options_with_a_statement_id(server, conn):
    with server.client() as client:
        dml = client.call(RequestType.PREPARE, {Key.SQL_TEXT: INSERT}).body
        assert dml == {Key.STMT_ID: statement_id(INSERT), Key.BIND_COUNT: 2,
                       Key.BIND_METADATA: [{0: "?", 1: "ANY"}, {0: "?", 1: "ANY"}]}
        dql = client.call(RequestType.PREPARE, {Key.SQL_TEXT: SELECT}).body
        assert set(dql) == {Key.STMT_ID, Key.BIND_COUNT, Key.BIND_METADATA, Key.METADATA}

        quorum = client.call(RequestType.EXECUTE, {Key.STMT_ID: dml[Key.STMT_ID], Key.SQL_BIND: ["gus", 60],
                                                   Key.OPTIONS: {"consistency": "quorum"}})
        assert quorum.body[Key.SQL_INFO][0] == 1
        with pytest.raises(ServerError) as bad_level:
            client.call(RequestType.EXECUTE, {Key.STMT_ID: dml[Key.STMT_ID], Key.SQL_BIND: ["hal", 61],
                                              Key.OPTIONS: {"consistency": "most"}})
        assert bad_level.value.code == ErrorCode.ILLEGAL_PARAMS
        with pytest.raises(ServerError) as both:
            client.call(RequestType.EXECUTE, {Key.STMT_ID: dml[Key.STMT_ID], Key.SQL_TEXT: INSERT})
        assert both.value.code == ErrorCode.ILLEGAL_PARAMS

        assert client.call(RequestType.PREPARE, {Key.STMT_ID: dml[Key.STMT_ID]}).body == {}
        with pytest.raises(ServerError) as gone:
            client.call(RequestType.EXECUTE, {Key.STMT_ID: dml[Key.STMT_ID], Key.SQL_BIND: ["ivy", 62]})
        assert gone.value.code == ErrorCode.WRONG_QUERY_ID
    assert [row[1:] for row in conn.execute(SELECT, {"age": 0})] == [["gus", 60]]
