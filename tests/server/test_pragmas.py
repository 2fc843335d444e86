"""The PRAGMAs applications send on every new connection are answered as SQLite answers
them; one that would change a member alone is refused with the reason, and changes nothing
(replicaset/storage/pragmas.py)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest
import tarantool

from replicaset.iproto.constants import RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import QUORUM, Server

HARMLESS = ["PRAGMA foreign_keys = ON", "PRAGMA foreign_keys=1", "pragma main.foreign_keys = yes;",
            "PRAGMA journal_mode = WAL", "PRAGMA journal_mode='wal'", "PRAGMA synchronous = NORMAL",
            "PRAGMA busy_timeout = 5000", "PRAGMA busy_timeout(250)"]
REFUSED = {"PRAGMA foreign_keys = OFF": "every member enforces foreign keys",
           "PRAGMA journal_mode = DELETE": "WAL journal mode",
           "PRAGMA synchronous = FULL": "synchronous = NORMAL on every member",
           "PRAGMA busy_timeout = soon": "number of milliseconds",
           "PRAGMA cache_size = 10": "cannot be set by a client"}


def sqlite_answer(tmp_path: Path, sql: str) -> list[list]:
    """What plain SQLite, set up as every member's writer is, answers to `sql`."""
    conn = apsw.Connection(str(tmp_path / "plain.db"))
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return [list(row) for row in conn.execute(sql)]


def test_connection_pragmas_answer_as_sqlite_and_the_rest_are_refused_with_the_reason(server: Server,
                                                                                       tmp_path: Path) -> None:
    with server.client() as client:
        client.execute("CREATE TABLE parent(id INTEGER PRIMARY KEY)")
        client.execute("CREATE TABLE child(id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent(id))")
        for sql in HARMLESS:
            assert client.execute(sql).rows == sqlite_answer(tmp_path, sql), sql
        for sql, reason in REFUSED.items():
            with pytest.raises(ServerError, match=reason):
                client.execute(sql)
        with pytest.raises(ServerError, match="FOREIGN KEY constraint failed"):
            client.execute("INSERT INTO child(id, parent) VALUES (1, 7)", options=QUORUM)
        assert client.execute("PRAGMA foreign_keys").rows == [[1]]
        assert client.execute("PRAGMA journal_mode").rows == [["wal"]]
        client.call(RequestType.BEGIN, {}, stream_id=7)  # inside a transaction too
        client.execute("INSERT INTO parent(id) VALUES (1)", stream_id=7)
        assert client.execute("PRAGMA busy_timeout = 100", stream_id=7).rows == [[100]]
        client.execute("INSERT INTO child(id, parent) VALUES (1, 1)", stream_id=7)
        client.call(RequestType.COMMIT, {}, stream_id=7)
        client.eval("box.cfg{read_only = true}")  # a member that takes no writes answers them too
        for sql in ("PRAGMA foreign_keys", "PRAGMA journal_mode", "PRAGMA synchronous", *HARMLESS):
            assert client.execute(sql).rows == sqlite_answer(tmp_path, sql), sql
        with pytest.raises(ServerError, match="read_only"):
            client.execute("INSERT INTO parent(id) VALUES (2)")
        client.eval("box.cfg{read_only = false}")
    conn = tarantool.connect("127.0.0.1", server.port)  # as a Python application would, on connecting
    try:
        assert not conn.execute("PRAGMA foreign_keys = ON").data, "no rows, as SQLite answers"
        assert conn.execute("PRAGMA busy_timeout = 3000").data == [[3000]]
        assert conn.execute("SELECT count(*) FROM child").data == [[1]]
    finally:
        conn.close()
