"""Quorum writes on real processes (docs/design/README.md §4.5): a write at QUORUM or ALL is answered once
the level's members hold it, counted on the total membership; a minority commits nothing;
a row held by a live transaction's intent refuses another transaction with a conflict
error naming it; and members agree whatever happened."""

from __future__ import annotations

import re
import threading
import time

import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.codec import encode_request
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from replicaset.iproto.peer import PeerKey, PeerRequest
from tests.server.conftest import QUORUM, REPLICASET_UUID, SYNCHRO_TIMEOUT_S, answer_after, wait_for
from tests.server.test_cli import cli
from tests.server.test_replicaset import rows

def test_a_quorum_write_is_answered_with_a_vclock_any_member_can_read_at(quorum_set) -> None:
    rs, (first, second, third) = quorum_set
    with second.client() as client:
        written = client.execute("INSERT INTO kv(k, v) VALUES (1, 'q')", options={**QUORUM, "return_vclock": True})
    assert written.row_count == 1 and written.vclock and written.vclock[2] >= 1
    with third.client() as client:
        seen = client.execute("SELECT v FROM kv WHERE k = 1", options={"wait_vclock": written.vclock})
    assert seen.rows == [["q"]]
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[1, "q", 0]]


def test_a_write_with_a_vclock_not_reached_waits_and_writes_nothing_at_the_timeout(quorum_set) -> None:
    """wait_vclock holds writes too: one naming a row member 3 never writes is refused
    after synchro_timeout_s, and nothing of it is anywhere."""
    rs, (first, second, third) = quorum_set
    ahead = {3: rs.info(third)["vclock"].get(3, 0) + 100}
    started = time.monotonic()
    with first.client() as client, pytest.raises(ServerError) as refused:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'too early')", options={"wait_vclock": ahead})
    assert refused.value.code == ErrorCode.TIMEOUT and "did not reach" in refused.value.message, refused.value
    assert SYNCHRO_TIMEOUT_S - 0.1 < time.monotonic() - started < SYNCHRO_TIMEOUT_S + 1.5
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == []


def test_any_statement_of_a_stream_waits_for_its_vclock(quorum_set) -> None:
    """A stream transaction holds the writer only while a statement runs, so any of its
    statements may wait for a wait_vclock: here the second one waits for a row of member
    2's written only while it waits, reads it, and the transaction commits."""
    rs, (first, second, third) = quorum_set
    with second.client() as client:
        written = client.execute("INSERT INTO kv(k, v) VALUES (1, 'from 2')", options={**QUORUM, "return_vclock": True})
    ahead = {2: written.vclock[2] + 1}
    with first.client() as client:
        client.call(RequestType.BEGIN, {}, stream_id=1)
        client.execute("INSERT INTO kv(k, v) VALUES (3, 'in the stream')", stream_id=1,
                       options={"wait_vclock": written.vclock})

        def write_awaited() -> None:
            with second.client() as other:
                other.execute("INSERT INTO kv(k, v) VALUES (2, 'awaited')", options=QUORUM)

        seen = answer_after(lambda: client.execute("SELECT v FROM kv WHERE k = 2", stream_id=1,
                                                   options={"wait_vclock": ahead}),
                            write_awaited, SYNCHRO_TIMEOUT_S * 3)
        assert not isinstance(seen, ServerError), seen
        assert seen.rows == [["awaited"]]
        client.call(RequestType.COMMIT, {}, stream_id=1)
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[1, "from 2", 0], [2, "awaited", 0],
                                                          [3, "in the stream", 0]]


def test_a_member_with_the_built_in_configuration_writes_at_quorum(server) -> None:
    """Marmot's default: a write without a level is a QUORUM transaction (here of one
    member, which is its own majority)."""
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'by default')")
        synchro = client.eval("box.info")[0]["synchro"]
    assert synchro["default_consistency"] == "quorum"
    assert synchro["outcomes"]["quorum"]["committed"] == 2, "the DDL and the INSERT"


def test_quorum_commits_without_one_member_and_all_does_not(quorum_set) -> None:
    """With member 3 hung, two of three prepare: QUORUM commits, ALL aborts at its
    deadline and leaves nothing; member 3 catches up once it runs again."""
    rs, (first, second, third) = quorum_set
    with third.paused():
        with first.client() as client:
            client.execute("INSERT INTO kv(k, v) VALUES (1, 'quorum')", options=QUORUM)
            started = time.monotonic()
            with pytest.raises(ServerError) as refused:
                client.execute("INSERT INTO kv(k, v) VALUES (2, 'all')", options={"consistency": "all"})
            elapsed = time.monotonic() - started
        assert refused.value.code == ErrorCode.SYNC_QUORUM_TIMEOUT, refused.value
        assert "2 of 3 members prepared, 3 needed" in refused.value.message
        assert elapsed < SYNCHRO_TIMEOUT_S + 1.5
        assert rows(first) == rows(second) == [[1, "quorum", 0]]
    rs.wait_converged()
    assert rows(third) == [[1, "quorum", 0]]


def test_an_all_write_with_two_members_hung_names_both(quorum_set) -> None:
    """Issue 32: with members 2 and 3 SIGSTOPped, an ALL write failed naming one of them.
    The error names every member that did not prepare, with why (no answer, or dead once
    SWIM holds it so)."""
    rs, (first, second, third) = quorum_set
    with second.paused(), third.paused():
        with first.client() as client:
            with pytest.raises(ServerError) as refused:
                client.execute("INSERT INTO kv(k, v) VALUES (1, 'all')", options={"consistency": "all"})
    message = refused.value.message
    assert "1 of 3 members prepared" in message, message
    named = re.findall(r"member (\d) \((no answer|dead)\)", message)
    assert sorted(int(member) for member, _ in named) == [2, 3], message
    rs.wait_converged()
    assert rows(first) == []


def test_a_minority_commits_nothing_and_says_so_in_bounded_time(quorum_set) -> None:
    rs, (first, second, third) = quorum_set
    address = f"127.0.0.1:{first.port}"
    assert cli("sql", address, "INSERT INTO kv(k, v) VALUES (9, 'cli')", "--consistency", "quorum").returncode == 0
    rs.wait_converged()
    second.kill()
    third.kill()
    refused_by_cli = cli("sql", address, "DELETE FROM kv WHERE k = 9", "--consistency", "quorum")
    assert refused_by_cli.returncode == 1 and "error 216" in refused_by_cli.stderr, refused_by_cli
    with first.client() as client:
        assert client.execute("DELETE FROM kv WHERE k = 9").row_count == 1  # ONE still writes locally
        started = time.monotonic()
        with pytest.raises(ServerError) as refused:
            client.execute("INSERT INTO kv(k, v) VALUES (1, 'lost')", options=QUORUM)
        assert time.monotonic() - started < SYNCHRO_TIMEOUT_S + 1.5
        assert refused.value.code == ErrorCode.SYNC_QUORUM_TIMEOUT
        assert "1 of 3 members prepared, 2 needed" in refused.value.message
        assert client.execute("SELECT * FROM kv").rows == []


def test_a_row_under_a_live_intent_refuses_another_transaction(quorum_set) -> None:
    """An ALL write on member 1 holds its intents on members 1 and 2 while member 3 does
    not answer: a QUORUM write of the same row on member 2 gets a conflict naming the
    holder, and once both are over the members agree."""
    rs, (first, second, third) = quorum_set
    outcome: dict[str, object] = {}

    def hold() -> None:
        with first.client() as client:
            try:
                client.execute("INSERT INTO kv(k, v) VALUES (7, 'all')", options={"consistency": "all"})
            except ServerError as exc:
                outcome["all"] = exc

    with third.paused():
        holder = threading.Thread(target=hold)
        holder.start()
        time.sleep(SYNCHRO_TIMEOUT_S / 4)
        with second.client() as client, pytest.raises(ServerError) as refused:
            client.execute("INSERT INTO kv(k, v) VALUES (7, 'rival')", options=QUORUM)
        holder.join(SYNCHRO_TIMEOUT_S * 3)
    assert refused.value.code == ErrorCode.TRANSACTION_CONFLICT, refused.value
    assert "row kv:7 of table kv" in refused.value.message and "held by transaction" in refused.value.message
    assert isinstance(outcome.get("all"), ServerError) and outcome["all"].code == ErrorCode.SYNC_QUORUM_TIMEOUT
    with second.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (7, 'after')", options=QUORUM)
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[7, "after", 0]]
    for member in (first, second, third):
        assert not [e for e in member.log_events() if e.get("level") == "error"], member.log_path


def test_concurrent_increments_lose_no_update(quorum_set) -> None:
    """Two members add one to the same counter at QUORUM as fast as they can: every
    increment acknowledged is in the final value on every member, and the rest were
    refused with a conflict (retryable), not lost."""
    rs, (first, second, third) = quorum_set
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v, n) VALUES (1, 'counter', 0)", options=QUORUM)
    rs.wait_converged()
    counts = {"ok": 0, "conflict": 0}
    lock = threading.Lock()

    def add(member) -> None:
        with member.client() as client:
            for _ in range(30):
                try:
                    client.execute("UPDATE kv SET n = n + 1 WHERE k = 1", options=QUORUM)
                    kind = "ok"
                except ServerError as exc:
                    assert exc.code == ErrorCode.TRANSACTION_CONFLICT, exc
                    kind = "conflict"
                with lock:
                    counts[kind] += 1

    workers = [threading.Thread(target=add, args=(m,)) for m in (first, second)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert counts["ok"] + counts["conflict"] == 60
    rs.wait_converged()
    expected = [[1, "counter", counts["ok"]]]
    wait_for(lambda: rows(first) == rows(second) == rows(third) == expected, f"counter at {counts['ok']} everywhere")


def test_hand_made_prepares_are_refused_and_the_member_goes_on(quorum_set) -> None:
    rs, (first, second, third) = quorum_set
    second_uuid = rs.info(second)["uuid"]
    good = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: second_uuid, PeerKey.TXN_ID: 5,
            PeerKey.COORDINATOR: 2, PeerKey.MEMBERS: [1, 2, 3], PeerKey.READS: [["kv", "kv:1", 0, 0]]}
    with Client.connect("127.0.0.1", first.port) as client:
        for body, replica_id, code, words in [
            ({**good, PeerKey.READS: "x"}, 2, ErrorCode.PROTOCOL, "READS"),
            ({**good, PeerKey.COORDINATOR: 9}, 2, ErrorCode.PROTOCOL, "COORDINATOR"),
            (good, 3, ErrorCode.UNKNOWN_REPLICA, "not registered as id 3"),
            ({**good, Key.REPLICASET_UUID: "8c5e4a52-0000-4000-8000-00000000ffff"}, 2,
             ErrorCode.REPLICASET_UUID_MISMATCH, "mismatch"),
        ]:
            with pytest.raises(ServerError) as refused:
                client.call(PeerRequest.TXN_PREPARE, body, replica_id=replica_id)
            assert refused.value.code == code and words in refused.value.message, refused.value
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'still serving')", options=QUORUM)
    rs.wait_converged()
    assert rows(third) == [[1, "still serving", 0]]


def test_a_write_waiting_for_its_level_does_not_hold_up_the_requests_behind_it(quorum_set) -> None:
    """A pipelined ALL write that cannot be decided (member 3 hung) and a PING and a read
    sent right after it on the same connection: the PING and the read are answered at
    once, the write when its deadline passes, each by its own sync."""
    rs, (first, second, third) = quorum_set
    with third.paused(), first.client() as client:
        write = {Key.SQL_TEXT: "INSERT INTO kv(k, v) VALUES (5, 'all')", Key.SQL_BIND: [],
                 Key.OPTIONS: {"consistency": "all"}}
        read = {Key.SQL_TEXT: "SELECT count(*) FROM kv", Key.SQL_BIND: []}
        client._sock.sendall(encode_request(RequestType.EXECUTE, 1, write) + encode_request(RequestType.PING, 2, {})
                             + encode_request(RequestType.EXECUTE, 3, read))
        started = time.monotonic()
        replies = [client._read_frame() for _ in range(3)]
        waited_s = time.monotonic() - started
    assert [frame.sync for frame in replies] == [2, 3, 1], "the PING and the read first, the write at its deadline"
    assert replies[2].is_error and replies[2].request_type & 0x7FFF == ErrorCode.SYNC_QUORUM_TIMEOUT
    assert replies[1].body[Key.DATA] == [[0]]
    assert waited_s >= SYNCHRO_TIMEOUT_S * 0.9
    rs.wait_converged()


def test_prepares_pipelined_on_one_link_are_all_answered_and_share_the_metastore_fsyncs(quorum_set) -> None:
    """Eight PREPAREs of member 2, for eight keys, in one write on one connection: each
    is answered "prepared" by its sync, and the PENDING records they wrote are made
    durable together. Before, each answer held the connection's read loop through its own
    fsync, so the PREPAREs a coordinator sent meanwhile took one fsync each, one after
    the other. Then member 2 aborts them and the keys take other writes."""
    rs, (first, second, third) = quorum_set
    sender = rs.info(second)["uuid"]
    txn_ids = [0x5150 + n for n in range(8)]
    prepares = b"".join(
        encode_request(PeerRequest.TXN_PREPARE, n + 1, {
            Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: sender, PeerKey.TXN_ID: txn_id,
            PeerKey.COORDINATOR: 2, PeerKey.MEMBERS: [1, 2, 3], PeerKey.READS: [["kv", f"kv:{100 + n}", 0, 0]]},
            replica_id=2)
        for n, txn_id in enumerate(txn_ids))
    syncs_before = rs.info(first)["synchro"]["meta_syncs"]
    with first.client() as client:
        client._sock.sendall(prepares)
        replies = [client._read_frame() for _ in txn_ids]
        assert sorted(frame.sync for frame in replies) == list(range(1, 9))
        assert all(frame.body[PeerKey.VOTE] == "prepared" for frame in replies), replies
        synchro = rs.info(first)["synchro"]
        assert synchro["prepared"]["len"] == 8
        assert synchro["meta_syncs"] - syncs_before <= 3, "the eight records share their fsyncs"
        for txn_id in txn_ids:
            client.call(PeerRequest.TXN_ABORT, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: sender,
                                                PeerKey.TXN_ID: txn_id}, replica_id=2)
    assert rs.info(first)["synchro"]["prepared"]["len"] == 0
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (100, 'free again')", options=QUORUM)
    rs.wait_converged()


def test_a_client_never_conflicts_with_its_own_acknowledged_writes(quorum_set) -> None:
    """One client writes one row at QUORUM again and again, and creates tables one after
    the other: each statement is acknowledged before the next, so none may be refused for
    the one before it. A peer releases a row's intent only once the row is durable there,
    which may be after the client heard: its PREPARE waits for that sync instead of
    answering CONFLICT."""
    rs, (first, second, third) = quorum_set
    with first.client() as client:
        for n in range(30):
            client.execute("INSERT INTO kv(k, v, n) VALUES (1, 'again', ?) ON CONFLICT(k) DO UPDATE SET n = excluded.n",
                           [n], options=QUORUM)
        for n in range(8):
            client.execute(f"CREATE TABLE t{n}(id INTEGER PRIMARY KEY)")
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[1, "again", 29]]


def test_a_join_under_quorum_writes_on_every_member_loses_nothing(quorum_set) -> None:
    """Every member writes at QUORUM while member 4 joins through member 3 (its
    registration is one more quorum transaction among them): each write acknowledged is on
    all four members afterwards, and a write refused was refused with a retryable conflict
    (members seeing different memberships for a moment), nothing else."""
    rs, (first, second, third) = quorum_set
    stop = threading.Event()
    acknowledged: list[int] = []
    refused: list[ServerError] = []
    lock = threading.Lock()

    def write(member, base: int) -> None:
        with member.client() as client:
            for n in range(1, 10_000):
                if stop.is_set():
                    return
                try:
                    client.execute("INSERT INTO kv(k, v) VALUES (?, 'during the join')", [base + n], options=QUORUM)
                except ServerError as exc:
                    with lock:
                        refused.append(exc)
                    continue
                with lock:
                    acknowledged.append(base + n)

    writers = [threading.Thread(target=write, args=(m, i * 100_000)) for i, m in enumerate((first, second, third))]
    for writer in writers:
        writer.start()
    try:
        wait_for(lambda: len(acknowledged) >= 10, "writes under way")
        fourth = rs.join(third)
        rs.wait_status(fourth, "running")
        during = len(acknowledged)
        wait_for(lambda: len(acknowledged) >= during + 10, "writes go on once member 4 runs")
    finally:
        stop.set()
        for writer in writers:
            writer.join(30)
    assert all(exc.code == ErrorCode.TRANSACTION_CONFLICT for exc in refused), refused
    rs.wait_converged()
    for member in (first, second, third, fourth):
        held = {row[0] for row in rows(member, "SELECT k FROM kv")}
        assert set(acknowledged) <= held, f"{member.log_path}: {sorted(set(acknowledged) - held)[:5]} missing"
        assert not [e for e in member.log_events() if e.get("level") == "error"], member.log_path


def test_returning_at_quorum_gives_the_keys_every_member_holds(quorum_set) -> None:
    """The reply of a QUORUM write comes from the run that was captured: the keys it
    returns are those of the decided row, on every member, in the residue of the member
    that ran it (docs/design/README.md §4.1)."""
    rs, (first, second, third) = quorum_set
    with second.client() as client:
        written = client.execute("INSERT INTO kv(k, v) VALUES (NULL, 'a'), (5, 'b'), (NULL, 'c') RETURNING k, v, n",
                                 options=QUORUM).rows
    member_id = rs.info(second)["id"]
    assert [row[1] for row in written] == ["a", "b", "c"] and written[1][0] == 5
    assert all(row[0] % 32 == member_id for row in (written[0], written[2]))
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == sorted(written)
