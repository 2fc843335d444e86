"""The PyPI `tarantool` connector (1.3) accepts our encodings: parsed directly and over a socket."""

import pytest
import tarantool
import tarantool.dbapi
from tarantool.error import DatabaseError, NetworkError
from tarantool.response import Response, ResponseExecute, ResponseProtocolVersion
from tarantool.schema import SchemaIndex, SchemaSpace
from tarantool.utils import greeting_decode, version_id

from iproto_fake_server import INSTANCE_UUID, SALT, USERS_SPACE_ID, FakeServer
from replicaset.iproto import (
    GREETING_VERSION,
    ErrorCode,
    Feature,
    Field,
    Key,
    encode_error,
    encode_greeting,
    encode_ok,
    metadata,
    sql_info,
    vindex_tuple,
    vspace_tuple,
)

_PREFIX_BYTES = 5  # the connector reads exactly 5 bytes of length prefix, then the frame


@pytest.fixture
def offline_conn() -> tarantool.Connection:
    """A connector object that never connects: enough for its Response classes."""
    return tarantool.Connection("127.0.0.1", 1, connect_now=False)


def ok_payload(body: dict) -> bytes:
    """An OK reply as the connector's Response classes take it: without the length prefix."""
    return encode_ok(sync=0, schema_version=1, body=body)[_PREFIX_BYTES:]


def test_connector_parses_greeting() -> None:
    greeting = greeting_decode(
        encode_greeting(version=GREETING_VERSION, instance_uuid=INSTANCE_UUID, salt=SALT)
    )
    assert greeting.protocol == "Binary"
    assert str(greeting.uuid) == INSTANCE_UUID
    assert greeting.salt == SALT[:20]
    # 2.10.0 or later makes the connector send ID; earlier it would skip it.
    assert greeting.version_id == version_id(2, 10, 0)


def test_connector_raises_database_error_from_error_reply(offline_conn) -> None:
    reply = encode_error(
        sync=0, schema_version=1, code=ErrorCode.SQL_EXECUTE, message="no such table: T"
    )
    with pytest.raises(DatabaseError) as info:
        Response(offline_conn, reply[_PREFIX_BYTES:])
    assert info.value.code == ErrorCode.SQL_EXECUTE
    assert info.value.message == "no such table: T"
    extra = info.value.extra_info
    assert (extra.type, extra.message, extra.errcode) == ("ClientError", "no such table: T", 159)


def test_connector_reads_execute_query_reply(offline_conn) -> None:
    body = {
        Key.METADATA: metadata([("ID", "integer"), ("NAME", "string")]),
        Key.DATA: [[1, "ann"], [2, None]],
    }
    response = ResponseExecute(offline_conn, ok_payload(body))
    assert list(response) == [[1, "ann"], [2, None]]
    assert response.affected_row_count is None
    assert response.body[Key.METADATA] == [{0: "ID", 1: "integer"}, {0: "NAME", 1: "string"}]


def test_connector_reads_execute_change_reply(offline_conn) -> None:
    body = {Key.SQL_INFO: sql_info(2, [10, 11])}
    response = ResponseExecute(offline_conn, ok_payload(body))
    assert response.affected_row_count == 2
    assert response.autoincrement_ids == [10, 11]
    no_ids = {Key.SQL_INFO: sql_info(1, [])}
    response = ResponseExecute(offline_conn, ok_payload(no_ids))
    assert (response.affected_row_count, response.autoincrement_ids) == (1, None)


def test_connector_reads_id_reply(offline_conn) -> None:
    body = {Key.VERSION: 3, Key.FEATURES: [Feature.STREAMS], Key.AUTH_TYPE: "chap-sha1"}
    response = ResponseProtocolVersion(offline_conn, ok_payload(body))
    assert (response.protocol_version, response.features) == (3, [0])
    assert response.auth_type == "chap-sha1"


def test_connector_schema_loader_accepts_schema_tuples() -> None:
    schema: dict = {}
    fields = [
        Field(name="ID", type="integer", is_nullable=False),
        Field(name="V", type="string", is_nullable=True),
    ]
    space = SchemaSpace(vspace_tuple(600, "T", fields), schema)
    assert schema["T"] is space and space.sid == 600
    assert space.format["V"]["id"] == 1
    index = SchemaIndex(vindex_tuple(600, 0, "PK", fields, [0]), space)
    assert space.indexes["PK"] is index
    assert (index.iid, index.unique, index.parts) == (0, {"unique": True}, [(0, "integer")])


def test_connector_talks_sql_over_socket() -> None:
    with FakeServer() as server:
        host, port = server.address
        conn = tarantool.connect(host, port)
        try:
            assert conn._server_protocol_version == 3
            assert conn.schema.get_space("USERS").sid == USERS_SPACE_ID
            assert conn.schema.get_index("USERS", "BY_NAME").parts == [(1, "string")]
            assert list(conn.execute("SELECT ID, NAME FROM USERS")) == [[1, "ann"], [2, "bob"]]
            inserted = conn.execute("INSERT INTO USERS(NAME) VALUES ('cid')")
            assert (inserted.affected_row_count, inserted.autoincrement_ids) == (1, [3])
            named = conn.execute("ECHO BINDS", {"a": 1, "b": "x"})
            assert list(named) == [["a", 1], ["b", "x"]]
            assert list(conn.execute("ECHO BINDS", [None, 2.5])) == [[1, None], [2, 2.5]]
            with pytest.raises(DatabaseError) as info:
                conn.execute("SELECT * FROM MISSING")
            assert info.value.code == ErrorCode.SQL_EXECUTE
            assert "SELECT * FROM MISSING" in info.value.message
            with pytest.raises(DatabaseError) as info:
                conn.execute("ECHO BINDS", [[1, 2]])
            assert info.value.code == ErrorCode.SQL_BIND_TYPE
            assert conn.ping() >= 0
        finally:
            conn.close()
    sent = [frame.request_type for frame in server.requests]
    assert sent[:3] == [73, 1, 1]  # ID, then SELECT _vspace and _vindex


def test_connector_authenticates() -> None:
    with FakeServer() as server:
        host, port = server.address
        conn = tarantool.connect(host, port, user="alice", password="secret")
        conn.close()
        with pytest.raises(NetworkError, match="credentials"):
            tarantool.connect(host, port, user="alice", password="wrong")


def test_connector_dbapi_cursor() -> None:
    with FakeServer() as server:
        host, port = server.address
        conn = tarantool.dbapi.connect(host=host, port=port)
        try:
            cursor = conn.cursor()
            cursor.execute("SELECT ID, NAME FROM USERS")
            assert cursor.fetchall() == [[1, "ann"], [2, "bob"]]
            cursor.execute("INSERT INTO USERS(NAME) VALUES ('cid')")
            assert (cursor.rowcount, cursor.lastrowid) == (1, 3)
            conn.commit()
        finally:
            conn.close()
