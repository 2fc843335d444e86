"""Tombstone purge on real processes: deletes stop costing space on every member once the
whole set holds them, a stopped member holds the purge back, a removed member's origin is
settled and the purge goes on without it; and a delete stays deleted throughout."""

from __future__ import annotations

import time

from tests.server.conftest import ReplicaSet, Server, kv_count, quorum_set_of, wait_for, write_kv
from tests.server.test_removal import console, swim_state
from tests.server.test_swim import SWIM_FAST

PURGE_CONFIG = "gc.interval_s = 0.1\ngc.min_retention_s = 0\nreplication.delta_sync_threshold_seconds = 0\n"


def tombstones(rs: ReplicaSet, member: Server) -> dict:
    return rs.info(member)["gc"]["tombstones"]


def delete_kv(member: Server, keys: range) -> None:
    with member.client() as client:
        for k in keys:
            client.execute("DELETE FROM kv WHERE k = ?", [k])


def keys_of(member: Server) -> list[int]:
    with member.client() as client:
        return [row[0] for row in client.execute("SELECT k FROM kv ORDER BY k").rows]


def quiet(member: Server) -> list[dict]:
    return [e for e in member.log_events() if e.get("level") in ("error", "critical")]


def test_tombstones_are_purged_on_every_member_and_the_deletes_stay(replicaset_factory):
    rs, members = quorum_set_of(replicaset_factory, 3, PURGE_CONFIG)
    write_kv(members[0], 0, 30, "a")
    write_kv(members[1], 30, 30, "b")
    rs.wait_converged()
    delete_kv(members[2], range(0, 20))
    delete_kv(members[0], range(40, 50))
    rs.wait_converged()
    wait_for(lambda: all(tombstones(rs, m)["purged"] == 30 for m in members),
             "the 30 tombstones purged on every member")
    survivors = list(range(20, 40)) + list(range(50, 60))
    assert [keys_of(m) for m in members] == [survivors] * 3
    info = tombstones(rs, members[0])
    assert info["stopped"] is None and info["leaving"] == []
    assert all(not quiet(m) for m in members), [quiet(m) for m in members]


def test_a_stopped_member_holds_the_purge_back(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, PURGE_CONFIG)
    write_kv(first, 0, 20, "a")
    rs.wait_converged()
    with third.paused():
        delete_kv(first, range(0, 10))
        wait_for(lambda: keys_of(second) == list(range(10, 20)), "member 2 applied the deletes")
        time.sleep(1.0)  # ten purge passes
        held = [tombstones(rs, m) for m in (first, second)]
        assert [t["purged"] for t in held] == [0, 0], "member 3 has not acknowledged the deletes"
        assert all(t["waiting_for"] for t in held), held
    wait_for(lambda: all(tombstones(rs, m)["purged"] == 10 for m in (first, second, third)),
             "purged everywhere once member 3 is back")
    assert [keys_of(m) for m in (first, second, third)] == [list(range(10, 20))] * 3


def test_after_a_removal_the_purge_goes_on_without_the_removed_member(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, PURGE_CONFIG + SWIM_FAST)
    write_kv(third, 0, 10, "from 3")
    rs.wait_converged()
    third.kill()
    wait_for(lambda: swim_state(rs, first, 3) == "dead", "member 3 DEAD on member 1")
    console(first, "box.remove(3)")
    delete_kv(first, range(0, 5))
    # Five deletes, and the removal's own: member 3's `_cluster` row.
    wait_for(lambda: all(tombstones(rs, m)["purged"] == 6 for m in (first, second)),
             "the deletes purged once member 3's origin settled")
    for member in (first, second):
        events = [e for e in member.log_events() if e.get("event") == "removed_origin_settled"]
        assert [(e["member"], e["last_lsn"]) for e in events] == [(3, 10)], events
        assert keys_of(member) == list(range(5, 10))

    # A restart keeps the settled end: the purge goes on at once, counting only 1 and 2.
    assert second.stop() == 0
    second.start()
    delete_kv(first, range(5, 7))
    wait_for(lambda: tombstones(rs, second)["purged"] == 2, "member 2 purges after its restart")
    assert tombstones(rs, second)["leaving"] == []
    assert kv_count(second) == 3
