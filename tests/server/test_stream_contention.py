"""Stream transactions on one member under contention, on three healthy members: an open
stream holds up nobody (another stream's statements, a quorum transaction's decided row, a
peer's applied rows), and two transactions on one member that write the same key conflict
at once, as they do on two members. Each client's socket timeout is shorter than the
stream timeout, so a statement that waited for another stream fails the test."""

from __future__ import annotations

import time

import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import QUORUM, SYNCHRO_TIMEOUT_S, Server
from tests.server.test_ddl_lock import no_errors_logged
from tests.server.test_replicaset import rows

CLIENT_TIMEOUT_S = 8.0  # the default stream_timeout_s is 10 s


def _stream(client: Client, stream_id: int, *statements: str) -> None:
    client.call(RequestType.BEGIN, {}, stream_id=stream_id)
    for sql in statements:
        client.execute(sql, stream_id=stream_id)


def _commit(client: Client, stream_id: int) -> float:
    started = time.monotonic()
    client.call(RequestType.COMMIT, {}, stream_id=stream_id)
    return time.monotonic() - started


def _seed(member: Server) -> None:
    with member.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (502, 'seed')", options=QUORUM)


@pytest.mark.parametrize("level", ["quorum", "one"])
def test_two_streams_on_one_member_writing_one_key_conflict_at_once(quorum_set, level: str) -> None:
    """The issue's run: both streams UPDATE k = 502, A commits (promptly, confirmed by a
    majority), then B's COMMIT conflicts; nothing of B is anywhere."""
    rs, (first, second, third) = quorum_set
    _seed(first)
    with first.client(timeout_s=CLIENT_TIMEOUT_S) as client:
        for stream_id in (1, 2):
            client.call(RequestType.BEGIN, {Key.OPTIONS: {"consistency": level}},
                        stream_id=stream_id)
        client.execute("UPDATE kv SET v = 'A' WHERE k = 502", stream_id=1)
        client.execute("UPDATE kv SET v = 'B' WHERE k = 502", stream_id=2)
        assert _commit(client, 1) < SYNCHRO_TIMEOUT_S
        with pytest.raises(ServerError) as refused:
            _commit(client, 2)
        assert refused.value.code == ErrorCode.TRANSACTION_CONFLICT, refused.value
        assert "502" in refused.value.message
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[502, "A", 0]]
    no_errors_logged(first, second, third)


def test_a_stream_whose_key_another_committed_conflicts_at_its_next_statement(quorum_set) -> None:
    rs, (first, second, third) = quorum_set
    _seed(first)
    with first.client(timeout_s=CLIENT_TIMEOUT_S) as client:
        _stream(client, 1, "UPDATE kv SET v = 'stream' WHERE k = 502")
        with second.client() as other:  # another member's write, applied here by its row
            other.execute("UPDATE kv SET v = 'other' WHERE k = 502", options=QUORUM)
        rs.wait_converged()
        with pytest.raises(ServerError) as refused:
            client.execute("SELECT v FROM kv WHERE k = 502", stream_id=1)
        assert refused.value.code == ErrorCode.TRANSACTION_CONFLICT, refused.value
        with pytest.raises(ServerError) as again:  # the transaction stays aborted until ROLLBACK
            client.execute("INSERT INTO kv(k, v) VALUES (1, 'after')", stream_id=1)
        assert again.value.code == ErrorCode.TRANSACTION_CONFLICT
        client.call(RequestType.ROLLBACK, {}, stream_id=1)
        _stream(client, 1, "UPDATE kv SET v = 'retried' WHERE k = 502")
        _commit(client, 1)
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[502, "retried", 0]]


def test_an_open_stream_holds_up_no_decided_row_and_no_applied_row(quorum_set) -> None:
    """While a stream on member 1 stays open, ALL writes coordinated by members 1 and 2
    (each needs member 1 to write or apply its row) are answered as usual."""
    rs, (first, second, third) = quorum_set
    _seed(first)
    with first.client(timeout_s=CLIENT_TIMEOUT_S) as client:
        _stream(client, 1, "UPDATE kv SET v = 'open' WHERE k = 502")
        for k, member in enumerate((first, second, first, second), start=1):
            with member.client(timeout_s=CLIENT_TIMEOUT_S) as other:
                other.execute("INSERT INTO kv(k, v) VALUES (?, 'all')", [k], options={"consistency": "all"})
        assert client.execute("SELECT count(*) FROM kv", stream_id=1).rows == [[5]]
        _commit(client, 1)
    rs.wait_converged()
    expected = [[k, "all", 0] for k in range(1, 5)] + [[502, "open", 0]]
    assert rows(first) == rows(second) == rows(third) == expected
    no_errors_logged(first, second, third)


def test_a_stream_past_its_timeout_is_aborted_and_says_so_until_it_ends(server: Server) -> None:
    """BEGIN's TIMEOUT (or `stream_timeout_s`) bounds a transaction: past it the rows are
    dropped, and every request of the stream hears ER_TRANSACTION_TIMEOUT until COMMIT or
    ROLLBACK, as on Tarantool; the stream then takes a new transaction."""
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        client.call(RequestType.BEGIN, {Key.TIMEOUT: 0.3}, stream_id=5)
        client.execute("INSERT INTO kv VALUES (1, 'dropped')", stream_id=5)
        with pytest.raises(ServerError) as again:
            client.call(RequestType.BEGIN, {}, stream_id=5)
        assert again.value.code == ErrorCode.ACTIVE_TRANSACTION
        time.sleep(0.6)
        heard = []
        for request in (lambda: client.execute("INSERT INTO kv VALUES (2, 'late')", stream_id=5),
                        lambda: client.call(RequestType.BEGIN, {}, stream_id=5),
                        lambda: client.call(RequestType.COMMIT, {}, stream_id=5)):
            with pytest.raises(ServerError) as refused:
                request()
            heard.append((refused.value.code, "timeout" in str(refused.value)))
        assert heard == [(ErrorCode.TRANSACTION_TIMEOUT, True), (ErrorCode.ACTIVE_TRANSACTION, False),
                         (ErrorCode.TRANSACTION_TIMEOUT, True)], "until COMMIT, which ends it"
        client.call(RequestType.BEGIN, {}, stream_id=5)
        client.execute("INSERT INTO kv VALUES (3, 'kept')", stream_id=5)
        client.call(RequestType.COMMIT, {}, stream_id=5)
        assert rows(server, "SELECT k, v FROM kv") == [[3, "kept"]]
