"""Resource limits on a real server: a read past `sql.statement_timeout_s` is stopped with
ER_TIMEOUT, and the server goes on serving that client and everyone else."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from replicaset.iproto.constants import ErrorCode
from replicaset.iproto.errors import ServerError
from tests.server.conftest import Server, wait_for

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


def test_an_endless_read_is_stopped_and_the_server_serves_on(tmp_path: Path) -> None:
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
        assert "session_failed" not in server.log_path.read_text()
    finally:
        assert server.stop() == 0


def test_connections_past_max_connections_are_told_and_closed(tmp_path: Path) -> None:
    config = tmp_path / "limits.toml"
    config.write_text("max_connections = 3\n")
    server = Server(tmp_path / "data", tmp_path / "server.log").start("--config", str(config))
    try:
        held = [server.client() for _ in range(3)]
        for client in held:
            client.ping()
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
