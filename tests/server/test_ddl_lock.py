"""Leaderless DDL (docs/design/README.md §4.6) on real processes: any member accepts a DDL statement by
taking the set's DDL lock through the quorum path; a DDL elsewhere while the lock is held
fails naming the holder; a minority changes no schema; and members end with one schema."""

from __future__ import annotations

import threading
import time

import msgpack
import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.constants import ErrorCode, Key
from replicaset.iproto.errors import ServerError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.storage.keys import SCHEMA_KEY
from tests.server.conftest import REPLICASET_UUID, ReplicaSet, Server, answer_after, wait_for
from tests.server.test_replicaset import rows

LEASE_S = 2.0


@pytest.fixture
def ddl_set(replicaset_factory):
    rs: ReplicaSet = replicaset_factory(f"ddl.lock_lease_seconds = {LEASE_S}\nreplication.synchro_timeout_s = 2\n")
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER DEFAULT 0)")
    second = rs.join(first)
    third = rs.join(second)
    rs.wait_converged()
    return rs, (first, second, third)


def tables(member: Server) -> list[str]:
    with member.client() as client:
        found = client.execute("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_%' ESCAPE '\\' "
                               "ORDER BY name")
    return [name for (name,) in found.rows]


def schema_id(member: Server) -> tuple[int, int]:
    with member.client() as client:
        found = client.execute("SELECT value FROM _rs_meta WHERE name = 'schema_id'")
    origin, lsn = msgpack.unpackb(found.rows[0][0])
    return origin, lsn


def no_errors_logged(*members: Server) -> None:
    for member in members:
        assert not [e for e in member.log_events() if e.get("level") == "error"], member.log_path


def test_any_member_runs_ddl_and_every_member_takes_it(ddl_set) -> None:
    rs, (first, second, third) = ddl_set
    with second.client() as client:
        client.execute("CREATE TABLE t2(id INTEGER PRIMARY KEY, x TEXT)")
    with third.client() as client:
        altered = client.execute("ALTER TABLE kv ADD COLUMN extra TEXT", options={"return_vclock": True})
    # The ALTER is acknowledged at QUORUM, two members of three: member 1 may take it a
    # moment later, so the write naming the new column there waits for the ALTER's vclock.
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v, extra) VALUES (1, 'a', 'e')",
                       options={"consistency": "quorum", "wait_vclock": altered.vclock})
        client.execute("INSERT INTO t2(id, x) VALUES (1, 'x')")
    rs.wait_converged()
    assert tables(first) == tables(second) == tables(third) == ["kv", "t2"]
    assert rows(first) == rows(second) == rows(third) == [[1, "a", 0, "e"]]
    assert schema_id(first) == schema_id(second) == schema_id(third)
    assert schema_id(first)[0] == 3, "the last DDL row is member 3's own"
    no_errors_logged(first, second, third)


def test_a_write_naming_a_new_column_waits_for_the_vclock_of_the_ddl(ddl_set) -> None:
    """A client that knows which row of member 3's brings a column (here: its next one)
    writes it on member 1 with that row in wait_vclock: the write waits for the ALTER,
    sent only while it waits, instead of failing on a column member 1 does not have yet."""
    rs, (first, second, third) = ddl_set
    alter_row = {3: rs.info(third)["vclock"].get(3, 0) + 1}

    def write() -> object:
        with first.client() as client:
            return client.execute("INSERT INTO kv(k, v, extra) VALUES (1, 'a', 'e')", options={"wait_vclock": alter_row})

    def alter() -> None:
        with third.client() as client:
            client.execute("ALTER TABLE kv ADD COLUMN extra TEXT")

    written = answer_after(write, alter, LEASE_S * 3)
    assert not isinstance(written, ServerError), written
    rs.wait_converged()
    assert rows(first) == rows(second) == rows(third) == [[1, "a", 0, "e"]]
    no_errors_logged(first, second, third)


def test_select_star_after_add_column_names_the_new_column_on_every_member(ddl_set) -> None:
    """Each member ran the texts before the ALTER, so SQLite holds them compiled for the
    old table: the ALTER's own member and those that took it by replication describe the
    new column all the same, with rows and without."""
    rs, members = ddl_set
    with members[0].client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'a')")
    rs.wait_converged()
    texts = {"SELECT * FROM kv": [[1, "a", 0, "red"]], "SELECT * FROM kv WHERE k = 2": []}

    def answers() -> list[tuple[list[str], list[list[object]]]]:
        found = []
        for member in members:
            with member.client() as client:
                found.extend((result.columns, result.rows) for result in map(client.execute, texts))
        return found

    assert {tuple(columns) for columns, _ in answers()} == {("k", "v", "n")}
    with members[2].client() as client:
        client.execute("ALTER TABLE kv ADD COLUMN colour TEXT DEFAULT 'red'")
    rs.wait_converged()
    assert answers() == [(["k", "v", "n", "colour"], expected) for expected in texts.values()] * len(members)


def test_ddl_while_another_member_holds_the_lock_names_the_holder(ddl_set) -> None:
    """Members 1 and 2 hold the DDL lock for a transaction of member 3's (a PREPARE made by
    hand in its name): DDL on member 1 fails naming instance 3. Member 3 knows no such
    transaction, so when members 1 and 2 ask it, it aborts and the lock is free again,
    with no lease to wait out."""
    rs, (first, second, third) = ddl_set
    origin, lsn = schema_id(first)
    prepare = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: rs.info(third)["uuid"], PeerKey.TXN_ID: 77,
               PeerKey.COORDINATOR: 3, PeerKey.MEMBERS: [1, 2, 3], PeerKey.READS: [[*SCHEMA_KEY, lsn, origin]]}
    for member in (first, second):
        with Client.connect("127.0.0.1", member.port) as client:
            reply = client.call(PeerRequest.TXN_PREPARE, prepare, replica_id=3)
        assert reply.body[PeerKey.VOTE] == "prepared"
    with first.client() as client, pytest.raises(ServerError) as refused:
        client.execute("CREATE TABLE held(id INTEGER PRIMARY KEY)")
    assert refused.value.code == ErrorCode.TRANSACTION_CONFLICT, refused.value
    assert "DDL lock held by instance 3" in refused.value.message, refused.value
    synchro = rs.info(second)["synchro"]
    assert synchro["ddl_lock"] == {"txn_id": "0x4d", "holder": 3} and synchro["intents"] == 1, synchro
    assert synchro["prepared"] == {"len": 1, "by_coordinator": {3: 1}} and (synchro["quorum"], synchro["total"]) == (2, 3)

    def created() -> bool:
        with first.client() as client:
            try:
                client.execute("CREATE TABLE held(id INTEGER PRIMARY KEY)")
            except ServerError as exc:
                assert exc.code == ErrorCode.TRANSACTION_CONFLICT, exc
                return False
        return True

    wait_for(created, "the DDL lock released once member 3 answered")
    rs.wait_converged()
    assert tables(first) == tables(second) == tables(third) == ["held", "kv"]


def test_concurrent_ddl_on_two_members_ends_in_one_schema(ddl_set) -> None:
    """Members 1 and 2 create tables as fast as they can: each statement is taken or
    refused with a retryable conflict (the lock is held, or the schema moved), and every
    member ends with exactly the tables that were acknowledged."""
    rs, (first, second, third) = ddl_set
    created: list[str] = []
    refusals: list[str] = []
    lock = threading.Lock()

    def create(member: Server, prefix: str) -> None:
        with member.client() as client:
            for i in range(12):
                name = f"{prefix}{i}"
                try:
                    client.execute(f"CREATE TABLE {name}(id INTEGER PRIMARY KEY)")
                except ServerError as exc:
                    assert exc.code == ErrorCode.TRANSACTION_CONFLICT, exc
                    with lock:
                        refusals.append(exc.message)
                else:
                    with lock:
                        created.append(name)

    workers = [threading.Thread(target=create, args=(m, p)) for m, p in ((first, "a"), (second, "b"))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert len(created) + len(refusals) == 24
    assert all("DDL lock held by instance" in r or "schema changed" in r for r in refusals), refusals
    rs.wait_converged()
    assert tables(first) == tables(second) == tables(third) == sorted(created + ["kv"])
    no_errors_logged(first, second, third)


def test_a_minority_changes_no_schema(ddl_set) -> None:
    rs, (first, second, third) = ddl_set
    second.kill()
    third.kill()
    started = time.monotonic()
    with first.client() as client, pytest.raises(ServerError) as refused:
        client.execute("CREATE TABLE lonely(id INTEGER PRIMARY KEY)")
    assert time.monotonic() - started < LEASE_S + 1.5
    assert refused.value.code == ErrorCode.SYNC_QUORUM_TIMEOUT, refused.value
    assert tables(first) == ["kv"]
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'one still writes')")
    assert rows(first) == [[1, "one still writes", 0]]


def test_the_console_shows_each_peers_prepare_state_and_the_outcomes(ddl_set) -> None:
    """While an ALL write waits for a hung member 3, member 1's box.info shows it queued
    with member 2's PREPARED vote, member 3 awaited; afterwards, the outcome per level."""
    rs, (first, second, third) = ddl_set
    failed: list[ServerError] = []

    def write_all() -> None:
        with first.client() as client:
            try:
                client.execute("INSERT INTO kv(k, v) VALUES (1, 'all')", options={"consistency": "all"})
            except ServerError as exc:
                failed.append(exc)

    with third.paused():
        writer = threading.Thread(target=write_all)
        writer.start()

        def prepared_by_two() -> dict | None:
            info = rs.info(first)
            txns = info["synchro"]["queue"]["txns"]
            return info if len(txns) == 1 and txns[0]["prepared"] == [1, 2] else None

        queued = wait_for(prepared_by_two, "the write queued, prepared on members 1 and 2")
        replication = queued["replication"]
        assert queued["synchro"]["queue"]["txns"][0]["level"] == "all"
        assert replication[2]["prepare"]["prepared"] == 1 and replication[2]["prepare"]["idle"] is not None
        assert replication[3]["prepare"]["awaiting"] == 1 and replication[3]["prepare"]["idle"] is None
        writer.join(10)
    assert failed and failed[0].code == ErrorCode.SYNC_QUORUM_TIMEOUT
    before = rs.info(first)["synchro"]["outcomes"]["quorum"]["committed"]  # the fixture's DDL is one
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (2, 'quorum')", options={"consistency": "quorum"})
    outcomes = rs.info(first)["synchro"]["outcomes"]
    assert outcomes["all"]["failed"] == 1 and outcomes["all"]["committed"] == 0
    assert outcomes["quorum"]["committed"] == before + 1 and outcomes["quorum"]["last_ms"] > 0
