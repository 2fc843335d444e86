"""Resource limits on a real server: a statement past `sql.statement_timeout_s` is stopped
with ER_TIMEOUT, and the server goes on serving that client and everyone else."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.codec import GREETING_SIZE, encode_request
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import Server, wait_for

ADMIT_WAIT_S = 10.0
ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
ENDLESS_WRITE = "INSERT INTO kv(k, v) WITH RECURSIVE r(x) AS (SELECT 100 UNION ALL SELECT x + 1 FROM r) SELECT x, 'flood' FROM r"


def test_an_endless_read_or_write_is_stopped_and_the_server_serves_on(tmp_path: Path) -> None:
    config = tmp_path / "limits.toml"
    config.write_text("[sql]\nstatement_timeout_s = 0.3\n")
    server = Server(tmp_path / "data", tmp_path / "server.log").start("--config", str(config))
    try:
        with server.client() as other:
            other.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
            with server.client() as greedy:
                started = time.monotonic()
                with pytest.raises(ServerError) as refused:
                    greedy.execute(ENDLESS)
                assert time.monotonic() - started < 5.0
                assert refused.value.code == ErrorCode.TIMEOUT
                assert "statement_timeout_s = 0.3 s" in refused.value.message
                assert greedy.execute("SELECT 1").rows == [[1]], "the same connection goes on"
            other.execute("INSERT INTO kv VALUES (1, 'still writing')")
            assert other.execute("SELECT v FROM kv").rows == [["still writing"]]
            for consistency in ("one", "quorum"):
                with pytest.raises(ServerError) as stopped:
                    other.execute(ENDLESS_WRITE, options={"consistency": consistency})
                assert stopped.value.code == ErrorCode.TIMEOUT, consistency
            other.call(RequestType.BEGIN, {}, stream_id=3)
            other.execute("INSERT INTO kv VALUES (2, 'in the stream')", stream_id=3)
            with pytest.raises(ServerError) as stopped:
                other.execute(ENDLESS_WRITE, stream_id=3)
            assert stopped.value.code == ErrorCode.TIMEOUT
            # The stream's earlier rows wait outside SQLite: the stopped statement went alone.
            other.call(RequestType.COMMIT, {}, stream_id=3)
            other.execute("INSERT INTO kv VALUES (3, 'after')")
            assert other.execute("SELECT k, v FROM kv ORDER BY k").rows == [[1, "still writing"], [2, "in the stream"],
                                                                           [3, "after"]]
        assert "session_failed" not in server.log_path.read_text()
    finally:
        assert server.stop() == 0


def admitted_client(server: Server) -> Client:
    """A connection the server took: one closed just before (start's readiness probe, a
    refused attempt) counts until the server has read its end."""
    deadline = time.monotonic() + ADMIT_WAIT_S
    while True:
        client = server.client()
        try:
            client.ping()
            return client
        except ServerError:
            client.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_connections_past_max_connections_are_told_and_closed(tmp_path: Path) -> None:
    config = tmp_path / "limits.toml"
    config.write_text("max_connections = 3\n")
    server = Server(tmp_path / "data", tmp_path / "server.log").start("--config", str(config))
    try:
        held = [admitted_client(server) for _ in range(3)]
        with server.client() as extra:
            with pytest.raises(ServerError, match="too many connections: max_connections = 3"):
                extra.ping()
        for client in held:
            client.ping()
        held.pop().close()

        def admitted() -> bool:
            with server.client() as again:
                try:
                    again.ping()
                except ServerError:
                    return False
                return True

        wait_for(admitted, "a connection admitted once one of the three closed")
        assert '"event": "connection_refused"' in server.log_path.read_text()
        for client in held:
            client.close()
    finally:
        assert server.stop() == 0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_client_that_pipelines_without_reading_costs_bounded_memory(tmp_path: Path) -> None:
    """2 GB of replies asked for, none read: the server stops reading that client once
    about 1 MiB of its replies back up, and serves another meanwhile."""
    server = Server(tmp_path / "data", tmp_path / "server.log").start()
    try:
        assert server.proc is not None
        before = rss_bytes(server.proc.pid)
        request = encode_request(RequestType.EXECUTE, 0, {Key.SQL_TEXT: "SELECT randomblob(10000)", Key.SQL_BIND: []})
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as greedy:
            greedy.recv(GREETING_SIZE, socket.MSG_WAITALL)
            greedy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            greedy.setblocking(False)
            sent, blocked_since = 0, None
            deadline = time.monotonic() + 10
            while sent < 200_000 * len(request) and time.monotonic() < deadline:
                try:
                    sent += greedy.send(request * 100)
                    blocked_since = None
                except BlockingIOError:  # the server stopped reading us: what we want, for a second
                    blocked_since = blocked_since or time.monotonic()
                    if time.monotonic() - blocked_since > 1.0:
                        break
                    time.sleep(0.01)
            with server.client() as other:
                assert other.execute("SELECT 1").rows == [[1]], "another client is served meanwhile"
            grown = rss_bytes(server.proc.pid) - before
            # Without the bound, one 64 KiB read of requests made 17 MiB of replies at once.
            assert grown < 8 * 1024 * 1024, f"the server grew by {grown / 2**20:.0f} MiB for a client that reads nothing"
            assert sent < 200_000 * len(request), "the server kept reading though nothing was read back"
        with server.client() as after:
            after.ping()
    finally:
        assert server.stop() == 0
