"""The admin console as a Tarantool operator types it, against real members: paths into
`box.info` and `box.cfg`, `box.info.gc()`, and `box.cfg{...}` changing a running member."""

from __future__ import annotations

import time
from typing import Any

import pytest

from replicaset.iproto.errors import ServerError
from tests.server.conftest import Server, quorum_set_of, wait_for
from tests.server.test_followers import follower_of

ER_READONLY, ER_TIMEOUT, ER_RELOAD_CFG, ER_CFG = 7, 78, 58, 59


def ev(member: Server, expr: str) -> Any:
    with member.client() as client:
        return client.eval(expr)[0]


def refused(member: Server, expr: str) -> ServerError:
    with member.client() as client:
        with pytest.raises(ServerError) as caught:
            client.eval(expr)
    return caught.value


def snaps(member: Server) -> list[str]:
    return sorted(p.name for p in (member.data_dir / "snap").glob("*.snap"))


@pytest.fixture
def three(replicaset) -> list[Server]:
    """A real three-member set, each following the two others."""
    first = replicaset.bootstrap()
    second = replicaset.join(first)
    third = replicaset.join(second)
    replicaset.wait_full_mesh()
    return [first, second, third]


def test_paths_into_replication_vclock_and_cfg_evaluate_on_a_three_member_set(replicaset, three):
    first, second, third = three
    ids = {ev(m, "box.info.id"): m for m in three}
    assert sorted(ids) == [1, 2, 3]
    with first.client() as client:
        client.execute("CREATE TABLE t(k INTEGER PRIMARY KEY)")
    replicaset.wait_converged()
    for member in three:
        me = ev(member, "box.info.id")
        for peer in set(ids) - {me}:
            assert ev(member, f"box.info.replication[{peer}].upstream.status") == "follow"
            assert ev(member, f"return box.info.replication[{peer}].downstream.status") == "follow"
            assert ev(member, f"box.info.replication[{peer}].uuid") == ev(ids[peer], "box.info.uuid")
            assert ev(member, f"box.info.replication[{peer}].upstream.peer") == f"127.0.0.1:{ids[peer].port}"
            assert isinstance(ev(member, f"box.info.replication[{peer}].upstream.lag"), float)
            assert ev(member, f"box.info.replication[{peer}].downstream.vclock[1]") >= 1
        assert ev(member, f"box.info.replication[{me}].upstream") is None, "no upstream to itself, as Tarantool"
        assert ev(member, "box.info.vclock[1]") == ev(first, "box.info.lsn")
        assert ev(member, "box.info.cluster.uuid") == ev(first, "box.info.cluster.uuid")
        # What it follows, found in _cluster: the two others' URIs, not the config's empty list.
        assert ev(member, "box.cfg.replication") == sorted(f"127.0.0.1:{m.port}" for m in three if m is not member)
        assert ev(member, "box.cfg.replication_timeout") == 0.1


def test_box_info_gc_is_a_function_answering_in_tarantools_shape(three):
    first, second, third = three
    assert ev(first, "box.snapshot()") == "ok"
    gc = ev(first, "box.info.gc()")
    assert set(gc) == {"vclock", "signature", "checkpoint_is_in_progress", "checkpoints", "consumers"}
    assert gc["vclock"] == ev(first, "box.info.gc.log_start") and gc["signature"] == sum(gc["vclock"].values())
    assert gc["checkpoint_is_in_progress"] is False
    assert [c["signature"] for c in gc["checkpoints"]] == [int(name.split(".")[0]) for name in snaps(first)]
    assert all(c["references"] == [] and sum(c["vclock"].values()) == c["signature"] for c in gc["checkpoints"])
    peers = sorted(f"replica {ev(m, 'box.info.uuid')}" for m in (second, third))
    assert sorted(c["name"] for c in gc["consumers"]) == peers
    assert ev(first, "box.info.gc().consumers[1].name") in peers
    assert ev(first, "box.info.gc().checkpoints[1].signature") == gc["checkpoints"][0]["signature"]


def test_read_only_refuses_writes_at_once_until_set_back_and_a_restart_takes_the_file_again(server):
    with server.client() as client:
        client.execute("CREATE TABLE t(k INTEGER PRIMARY KEY)")
        assert client.eval("box.cfg{read_only = true}") == [None]
        assert client.eval("box.cfg.read_only") == [True] and client.eval("box.info.ro") == [True]
        with pytest.raises(ServerError) as caught:
            client.execute("INSERT INTO t VALUES (1)")
        assert caught.value.code == ER_READONLY
        assert caught.value.message == "Can't modify data on a read-only instance - box.cfg.read_only is true"
        client.eval("box.cfg({read_only = false})")
        client.execute("INSERT INTO t VALUES (2)")
        assert client.eval("box.info.ro") == [False]
        client.eval("box.cfg{read_only = true}")
    assert any(e["event"] == "box_cfg" and e["changed"] == {"read_only": True} for e in server.log_events())
    server.stop()
    server.start()
    assert ev(server, "box.cfg.read_only") is False, "the config file wins at a restart, as Tarantool's init script"


def test_options_a_running_member_cannot_change_are_refused_in_tarantools_words(server):
    for expr, code, message in [
        ("box.cfg{wal_mode = 'fsync'}", ER_RELOAD_CFG, "Can't set option 'wal_mode' dynamically"),
        ("box.cfg{listen = '127.0.0.1:1'}", ER_RELOAD_CFG, "Can't set option 'listen' dynamically"),
        ("box.cfg{replication = {'127.0.0.1:1'}}", ER_RELOAD_CFG, "Can't set option 'replication' dynamically"),
        ("box.cfg{read_only = true, wal_max_size = 65536}", ER_RELOAD_CFG,
         "Can't set option 'wal_max_size' dynamically"),
        ("box.cfg{checkpoint_count = 0}", ER_CFG, "Incorrect value for option 'checkpoint_count': 0 is invalid, "
                                                  "must be >= 1"),
        ("box.cfg{no_such_option = 1}", ER_CFG, "Incorrect value for option 'no_such_option': unexpected option"),
    ]:
        error = refused(server, expr)
        assert (error.code, error.message) == (code, message), expr
    assert ev(server, "box.cfg.read_only") is False and ev(server, "box.cfg.wal_mode") == "write", "nothing changed"
    with server.client() as client:
        client.execute("CREATE TABLE t(k INTEGER PRIMARY KEY)")


def test_log_level_changes_what_is_logged(server):
    def checkpoints_logged() -> int:
        return sum(e["event"] == "checkpoint_created" for e in server.log_events())

    ev(server, "box.cfg{log_level = 'warning'}")
    ev(server, "box.snapshot()")
    ev(server, "box.cfg{log_level = 'info'}")
    assert checkpoints_logged() == 0 and len(snaps(server)) == 1, "a checkpoint made, its info line not logged"
    with server.client() as client:
        client.execute("CREATE TABLE t(k INTEGER PRIMARY KEY)")
    ev(server, "box.snapshot()")
    wait_for(lambda: checkpoints_logged() == 1, "the checkpoint logged once the level is info again")
    assert len(snaps(server)) == 2


def test_checkpoint_interval_and_count_change_the_checkpoint_daemon(server):
    assert snaps(server) == [] and ev(server, "box.cfg.checkpoint_interval") == 3600
    with server.client() as client:
        client.execute("CREATE TABLE t(k INTEGER PRIMARY KEY)")
        client.eval("box.cfg{checkpoint_interval = 0.2, checkpoint_count = 1}")
        for k in range(3):
            client.execute("INSERT INTO t VALUES (?)", [k])
            done = len(snaps(server)) and snaps(server)[-1]
            wait_for(lambda: snaps(server) and snaps(server)[-1] != done, "a checkpoint every 0.2 s")
    ev(server, "box.cfg{checkpoint_interval = 0}")  # never
    wait_for(lambda: len(snaps(server)) == 1, "checkpoint_count = 1 keeps one")


def test_replication_synchro_timeout_under_tarantools_name_bounds_a_wait_at_once(server):
    ev(server, "box.cfg{replication_synchro_timeout = 0.3}")
    assert ev(server, "box.cfg.replication.synchro_timeout_s") == 0.3
    assert ev(server, "box.cfg.replication_synchro_timeout") == 0.3
    with server.client() as client:
        started = time.monotonic()
        with pytest.raises(ServerError) as caught:
            client.execute("SELECT 1", options={"wait_vclock": {1: 10**6}})
        assert caught.value.code == ER_TIMEOUT and "within 0.3 s" in caught.value.message
        assert time.monotonic() - started < 3, "not the 5 s of the config"


def test_an_anonymous_follower_stays_read_only_whatever_box_cfg_says(replicaset_factory):
    rs, (first, _) = quorum_set_of(replicaset_factory, 2)
    follower = follower_of(rs, first)
    error = refused(follower, "box.cfg{read_only = false}")
    assert (error.code, error.message) == (ER_CFG, "Incorrect value for option 'read_only': an anonymous follower is "
                                                   "always read-only")
    assert ev(follower, "box.info.ro") is True
    with follower.client() as client:
        with pytest.raises(ServerError, match="read-only"):
            client.execute("INSERT INTO kv(k, v) VALUES (1, 'on the follower')")
