"""Our blocking Client against the loopback fake server."""

import socket
import threading

import pytest

from iproto_fake_server import INSTANCE_UUID, SALT, FakeServer
from replicaset.iproto import (
    GREETING_VERSION,
    Client,
    ErrorCode,
    Key,
    RemoteProtocolError,
    RequestType,
    ServerError,
    SqlResult,
    encode_greeting,
    encode_ok,
)


@pytest.fixture(scope="module")
def server():
    with FakeServer() as fake:
        yield fake


def test_client_reads_greeting_and_pings(server) -> None:
    with Client.connect(*server.address) as client:
        assert client.greeting.version == GREETING_VERSION
        assert client.greeting.instance_uuid == INSTANCE_UUID
        assert client.greeting.salt == SALT
        client.ping()


def test_client_executes_sql(server) -> None:
    with Client.connect(*server.address, user="alice", password="secret") as client:
        assert client.execute("SELECT ID, NAME FROM USERS") == SqlResult(
            columns=["ID", "NAME"],
            rows=[[1, "ann"], [2, "bob"]],
            row_count=None,
            autoincrement_ids=[],
        )
        inserted = client.execute("INSERT INTO USERS(NAME) VALUES ('cid')")
        assert (inserted.row_count, inserted.autoincrement_ids, inserted.rows) == (1, [3], [])
        assert client.execute("DELETE FROM USERS").autoincrement_ids == []
        assert client.execute("ECHO BINDS", {"a": 1}).rows == [["a", 1]]
        assert client.execute("ECHO BINDS", [b"\x00", None]).rows == [[1, b"\x00"], [2, None]]
        assert client.execute("ECHO STREAM", stream_id=5).rows == [[5]]


def test_client_raises_server_error_and_stays_usable(server) -> None:
    with Client.connect(*server.address) as client:
        with pytest.raises(ServerError) as info:
            client.execute("BOGUS")
        assert info.value.code == ErrorCode.SQL_EXECUTE
        assert info.value.message == "Failed to execute SQL statement: BOGUS"
        with pytest.raises(ServerError) as info:
            client.call(RequestType.JOIN, {})
        assert info.value.code == ErrorCode.UNKNOWN_REQUEST_TYPE
        assert client.eval("return ...", [1, "a"]) == [1, "a"]
        frame = client.call(RequestType.PING, {})
        assert frame.request_type == RequestType.OK


def test_client_authentication_failure(server) -> None:
    with pytest.raises(ServerError) as info:
        Client.connect(*server.address, user="alice", password="wrong")
    assert info.value.code == ErrorCode.CREDS_MISMATCH


def test_client_rejects_reply_with_wrong_sync() -> None:
    """A server that answers out of turn breaks the connection; the client closes it."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5.0)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5.0)
            greeting = encode_greeting(
                version=GREETING_VERSION, instance_uuid=INSTANCE_UUID, salt=SALT
            )
            conn.sendall(greeting)
            conn.recv(1024)
            conn.sendall(encode_ok(sync=12345, schema_version=1, body={Key.DATA: []}))
            conn.recv(1024)  # returns b"" once the client closes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        client = Client.connect(*listener.getsockname(), timeout_s=5.0)
        with pytest.raises(RemoteProtocolError, match="sync"):
            client.ping()
        with pytest.raises(OSError):
            client.ping()  # closed: nothing half-works
    finally:
        thread.join(timeout=5.0)
        listener.close()
