"""A set of one decides its QUORUM and ALL writes by itself (core.quorum.decides_alone): each
is its own row, fsynced before the answer, with no two-phase commit and no metastore record,
so the default level costs a new user what a durable write costs. Once a second member is
registered, writes go through the quorum again."""

from __future__ import annotations

import threading

import pytest

from replicaset.iproto.constants import Key, RequestType
from replicaset.iproto.errors import ServerError
from tests.server.conftest import QUORUM, ReplicaSet, Server
from tests.server.test_replicaset import rows

WRITERS = 8
WRITES_EACH = 25


def synchro(member: Server) -> dict:
    with member.client() as client:
        return client.eval("box.info")[0]["synchro"]


def test_a_set_of_one_commits_its_quorum_writes_alone_until_a_second_member_joins(replicaset: ReplicaSet) -> None:
    first = replicaset.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")  # under the DDL lock, a quorum transaction
    syncs_before = synchro(first)["meta_syncs"]
    failures: list[BaseException] = []

    def write(index: int) -> None:
        try:
            with first.client() as client:
                for n in range(WRITES_EACH):  # every writer on the same few keys
                    client.execute("INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)", [n % 3, f"w{index}"],
                                   options={"consistency": "all" if n % 2 else "quorum"})
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    with first.client() as client:
        client.call(RequestType.BEGIN, {Key.OPTIONS: QUORUM}, stream_id=1)
        client.execute("INSERT INTO kv(k, v) VALUES (10, 'in a stream')", stream_id=1)
        client.call(RequestType.COMMIT, {}, stream_id=1)
    assert failures == [], "no write of a set of one meets a conflict: nothing else is in flight"
    alone = synchro(first)
    assert alone["meta_syncs"] == syncs_before, "no transaction record was written"
    outcomes = alone["outcomes"]
    assert outcomes["quorum"]["committed"] + outcomes["all"]["committed"] == 1 + WRITERS * WRITES_EACH + 1
    assert [k for k, _ in rows(first, "SELECT k, v FROM kv ORDER BY k")] == [0, 1, 2, 10]

    second = replicaset.join(first)
    replicaset.wait_converged()
    with second.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (20, 'two members')", options=QUORUM)
    replicaset.wait_converged()
    assert synchro(second)["meta_syncs"] > 0, "with two members the write went through the quorum"
    assert rows(first, "SELECT k FROM kv ORDER BY k") == rows(second, "SELECT k FROM kv ORDER BY k") == [
        [0], [1], [2], [10], [20]]


def test_a_set_of_one_refuses_a_local_table_at_quorum_as_any_set_does(replicaset_factory) -> None:
    first = replicaset_factory('local_tables = ["scratch"]\n').bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE scratch(v)", options={"consistency": "one"})
        with pytest.raises(ServerError, match="local to each member"):
            client.execute("INSERT INTO scratch VALUES (1)", options=QUORUM)
        client.execute("INSERT INTO scratch VALUES (2)", options={"consistency": "one"})
    assert rows(first, "SELECT v FROM scratch") == [[2]]
