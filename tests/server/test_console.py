"""The admin console as a Tarantool operator types it, against real members: paths into
`box.info` and `box.cfg`, and `box.info.gc()`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import Server

def ev(member: Server, expr: str) -> Any:
    with member.client() as client:
        return client.eval(expr)[0]


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

