"""The PyPI `tarantool` connector, default options, against a real server process."""

from __future__ import annotations

import uuid

import pytest
import tarantool
from tarantool.const import IPROTO_FEATURE_ERROR_EXTENSION
from tarantool.utils import version_id

from replicaset import __version__
from replicaset.iproto.constants import GREETING_VERSION, IPROTO_PROTOCOL_VERSION, Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import wait_for


@pytest.fixture
def conn(server):
    connection = tarantool.connect("127.0.0.1", server.port)
    yield connection
    connection.close()


def test_connector_reads_the_uuid_and_negotiates_features_with_id(server, conn):
    # The connector sends ID only to a server greeting as 2.10.0 or later, and reads the
    # UUID only from 1.6.7 on; tarantool 1.3 keeps what ID settled in private attributes.
    assert conn.version_id == version_id(*map(int, GREETING_VERSION.split(".")))
    with server.client() as client:
        assert conn.uuid == uuid.UUID(client.eval("box.info.uuid")[0])
        assert client.eval("box.info.version") == [__version__], "box.info keeps our own version"
    assert conn._protocol_version == IPROTO_PROTOCOL_VERSION
    assert conn._features[IPROTO_FEATURE_ERROR_EXTENSION] is True
    assert list(conn.execute("SELECT 1 + 1")) == [[2]]


def test_sql_round_trip_through_the_connector(conn):
    conn.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER)")
    inserted = conn.execute("INSERT INTO users(id, name, age) VALUES (?, ?, ?)", [1, "ann", 31])
    assert inserted.affected_row_count == 1
    named = conn.execute("INSERT INTO users(name, age) VALUES (:name, :age)", {"name": "bob", "age": 40})
    assert named.affected_row_count == 1
    (bob_id,) = named.autoincrement_ids
    assert bob_id != 1

    rows = conn.execute("SELECT id, name, age FROM users ORDER BY name")
    assert list(rows) == [[1, "ann", 31], [bob_id, "bob", 40]]

    assert conn.execute("UPDATE users SET age = age + 1 WHERE name = ?", ["ann"]).affected_row_count == 1
    assert list(conn.execute("SELECT age FROM users WHERE id = 1")) == [[32]]
    assert conn.execute("DELETE FROM users WHERE id = ?", [bob_id]).affected_row_count == 1
    assert list(conn.execute("SELECT count(*) FROM users")) == [[1]]


def test_bad_statement_is_an_error_and_the_connection_stays_usable(conn):
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT UNIQUE)")
    conn.execute("INSERT INTO t VALUES (1, 'x')")
    with pytest.raises(tarantool.error.DatabaseError) as syntax:
        conn.execute("SELEKT * FROM t")
    assert "syntax error" in syntax.value.args[1]
    with pytest.raises(tarantool.error.DatabaseError) as unique:
        conn.execute("INSERT INTO t VALUES (2, 'x')")
    assert "UNIQUE" in unique.value.args[1]
    with pytest.raises(tarantool.error.DatabaseError) as refused:
        conn.execute("BEGIN")
    assert "stream" in refused.value.args[1]
    for empty in ("", "  -- nothing here", ";"):  # it answered row_count 1, a past statement's
        with pytest.raises(tarantool.error.DatabaseError) as nothing:
            conn.execute(empty)
        assert nothing.value.args[0] == 182 and "empty SQL statement" in nothing.value.args[1], empty
    assert list(conn.execute("SELECT * FROM t")) == [[1, "x"]]


def test_schema_is_visible_to_the_connector(server, conn):
    conn.execute("CREATE TABLE kv(k TEXT PRIMARY KEY, v INTEGER)")
    fresh = tarantool.connect("127.0.0.1", server.port)
    try:
        space = fresh.schema.get_space("kv")
        assert space.name == "kv"
        assert {"k", "v"} <= set(space.format)
        assert fresh.schema.get_index("kv", 0).name == "pk"
    finally:
        fresh.close()


def test_stream_transaction_commits_atomically_and_rolls_back(server):
    # tarantool 1.3 has no stream API (docs/decisions.md): our client sends the frames.
    with server.client() as client:
        client.execute("CREATE TABLE acc(id INTEGER PRIMARY KEY, balance INTEGER)")
        client.execute("INSERT INTO acc VALUES (1, 100), (2, 0)")
        client.call(RequestType.BEGIN, {}, stream_id=7)
        client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "UPDATE acc SET balance = balance - 30 WHERE id = 1"}, stream_id=7)
        client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "UPDATE acc SET balance = balance + 30 WHERE id = 2"}, stream_id=7)
        inside = client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "SELECT balance FROM acc ORDER BY id"}, stream_id=7)
        assert inside.body[Key.DATA] == [[70], [30]]
        with server.client() as other:
            assert other.execute("SELECT balance FROM acc ORDER BY id").rows == [[100], [0]]
        client.call(RequestType.COMMIT, {}, stream_id=7)
        assert client.execute("SELECT balance FROM acc ORDER BY id").rows == [[70], [30]]

        client.call(RequestType.BEGIN, {}, stream_id=8)
        client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "DELETE FROM acc"}, stream_id=8)
        client.call(RequestType.ROLLBACK, {}, stream_id=8)
        assert client.execute("SELECT count(*) FROM acc").rows == [[2]]


def test_an_open_stream_transaction_holds_up_no_other_write(server):
    """Its rows wait outside SQLite between its statements: another client's write runs at
    once, however long the stream's client thinks."""
    with server.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        client.call(RequestType.BEGIN, {Key.TIMEOUT: 60}, stream_id=3)
        client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "INSERT INTO t VALUES (1)"}, stream_id=3)
        with server.client(timeout_s=5) as other:  # the writer held for 60 s failed this at 5 s
            other.execute("INSERT INTO t VALUES (2)")
            assert other.execute("SELECT id FROM t").rows == [[2]]
        client.call(RequestType.COMMIT, {}, stream_id=3)
        assert client.execute("SELECT id FROM t ORDER BY id").rows == [[1], [2]]


def test_stream_transaction_times_out_and_leaves_nothing(server):
    with server.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        client.call(RequestType.BEGIN, {Key.TIMEOUT: 0.2}, stream_id=3)
        client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "INSERT INTO t VALUES (1)"}, stream_id=3)

        def expired() -> str | None:
            try:
                client.call(RequestType.EXECUTE, {Key.SQL_TEXT: "SELECT count(*) FROM t"}, stream_id=3)
            except ServerError as exc:
                return exc.message
            return None

        assert "timeout" in wait_for(expired, "the stream transaction's timeout")
        with pytest.raises(ServerError) as refused:
            client.call(RequestType.COMMIT, {}, stream_id=3)
        assert "timeout" in refused.value.message
        assert client.execute("SELECT id FROM t").rows == []


def test_oversize_transaction_is_refused(server):
    with server.client() as client:
        client.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, b BLOB)")
        with pytest.raises(ServerError) as refused:
            client.execute("INSERT INTO blobs VALUES (1, zeroblob(9000000))")
        assert "max_txn_bytes" in refused.value.message
        assert client.execute("SELECT count(*) FROM blobs").rows == [[0]]


def test_introspection_pragmas_work_and_settings_do_not(conn):
    conn.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    columns = [row[1] for row in conn.execute("PRAGMA table_info(t)")]
    assert columns == ["id", "v"]
    with pytest.raises(tarantool.error.DatabaseError) as refused:
        conn.execute("PRAGMA user_version = 5")
    assert "cannot be set" in refused.value.args[1]


def test_returning_gives_the_assigned_keys_at_quorum_at_one_and_in_a_stream(server, conn):
    """ORMs learn new keys from RETURNING: the connector's INSERT goes at the server's
    default level (QUORUM: the reply comes from the captured run), ours at ONE and in a
    stream, and each key returned is the one the row was stored with."""
    conn.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    at_quorum = [list(row) for row in conn.execute("INSERT INTO notes(body) VALUES (?), (?) RETURNING id, body",
                                                   ["q1", "q2"])]
    with server.client() as client:
        at_one = client.execute("INSERT INTO notes(id, body) VALUES (NULL, 'o1'), (7, 'o2') RETURNING id, body",
                                options={"consistency": "one"}).rows
        client.call(RequestType.BEGIN, {}, stream_id=5)
        streamed = "INSERT INTO notes(body) VALUES ('s1') RETURNING id, upper(body)"
        in_stream = client.call(RequestType.EXECUTE, {Key.SQL_TEXT: streamed}, stream_id=5).body[Key.DATA]
        client.call(RequestType.COMMIT, {}, stream_id=5)
        stored = client.execute("SELECT id, body FROM notes ORDER BY body").rows
    assert [body for _, body in at_quorum + at_one] == ["q1", "q2", "o1", "o2"] and at_one[1][0] == 7
    assert in_stream[0][1] == "S1"
    returned = at_quorum + at_one + [[in_stream[0][0], "s1"]]
    assert sorted(returned, key=lambda row: row[1]) == stored
    assert len({key for key, _ in returned}) == 5
