"""SWIM on real processes: every member sees the others ALIVE; a hung member is suspected,
then DEAD, and ALIVE again at a higher incarnation once it answers; a killed one is DEAD
everywhere; stray and forged datagrams change nothing."""

from __future__ import annotations

import socket
import time

import msgpack
import pytest

from replicaset.iproto.errors import ServerError

from tests.server.conftest import REPLICASET_UUID, ReplicaSet, Server, wait_for

SWIM_FAST = ("cluster.gossip_interval_ms = 100\ncluster.suspect_timeout_ms = 400\n"
             "cluster.dead_timeout_ms = 800\n")


def states(rs: ReplicaSet, member: Server) -> dict[int, tuple[str, int]]:
    return {m["id"]: (m["state"], m["incarnation"]) for m in rs.info(member)["members"]}


def three(replicaset_factory) -> tuple[ReplicaSet, list[Server]]:
    rs = replicaset_factory(SWIM_FAST)
    members = [rs.bootstrap()]
    members += [rs.join(members[0]), rs.join(members[0])]
    rs.wait_converged()
    return rs, members


def all_alive(rs: ReplicaSet, members: list[Server]) -> bool:
    return all({state for state, _ in states(rs, m).values()} == {"alive"} and len(states(rs, m)) == 3
               for m in members)


def test_a_hung_member_is_suspected_then_dead_and_alive_again_once_it_answers(replicaset_factory):
    rs, (first, second, third) = three(replicaset_factory)
    wait_for(lambda: all_alive(rs, [first, second, third]), "every member sees three ALIVE members")

    def changes_of_3() -> list[str]:
        return [e["state"] for e in first.log_events() if e.get("event") == "member_state" and e.get("member") == 3]

    # On a loaded machine a member may be suspected, and refute, before the pause: only
    # what follows the pause is asserted exactly.
    before = changes_of_3()
    assert "dead" not in before, before
    with third.paused():
        wait_for(lambda: all(states(rs, m)[3][0] == "dead" for m in (first, second)), "member 3 DEAD on 1 and 2")
        assert states(rs, first)[1][0] == "alive" and states(rs, first)[2][0] == "alive"
    wait_for(lambda: all_alive(rs, [first, second, third]), "member 3 ALIVE again everywhere")
    assert all(states(rs, m)[3][1] > 0 for m in (first, second, third)), "it refuted at a higher incarnation"
    after = changes_of_3()[len(before):]
    assert "dead" in after and after[after.index("dead") + 1:][:1] == ["alive"], changes_of_3()
    assert after[0] in ("suspect", "dead") and "alive" not in after[:after.index("dead")], changes_of_3()


def test_a_killed_member_is_dead_on_every_other_member_and_no_write_waits_for_it(replicaset_factory):
    rs, (first, second, third) = three(replicaset_factory)
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    wait_for(lambda: all_alive(rs, [first, second, third]), "every member sees three ALIVE members")
    second.kill()
    wait_for(lambda: all(states(rs, m)[2][0] == "dead" for m in (first, third)), "member 2 DEAD on 1 and 3")
    assert rs.info(first)["status"] == "running", "SWIM steers, it never changes the quorum or the status"
    with first.client() as client:
        client.execute("INSERT INTO kv VALUES (1, 'two of three')", options={"consistency": "quorum"})
        started = time.monotonic()
        with pytest.raises(ServerError, match=r"members \[2\] are dead"):
            client.execute("INSERT INTO kv VALUES (2, 'all three')", options={"consistency": "all"})
        assert time.monotonic() - started < 1.0, "refused at once, not at synchro_timeout_s (5 s)"


def test_stray_and_forged_datagrams_change_nothing(replicaset_factory):
    rs, (first, second, third) = three(replicaset_factory)
    wait_for(lambda: all_alive(rs, [first, second, third]), "every member sees three ALIVE members")
    before = rs.info(first)["members"]
    garbage = [b"", b"\xff" * 3000, msgpack.packb([1, 0, "another-set", 2, 1, None, []]),
               msgpack.packb([1, 0, REPLICASET_UUID, 2, 1, None, [[9, 3, 99]]]),  # a member _cluster does not hold
               msgpack.packb([1, 0, REPLICASET_UUID, 2, 1, None, [[3, 7, 1]]]),  # no such state
               msgpack.packb([1, 9, REPLICASET_UUID, 2, 1, None, []])]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for data in garbage:
            sock.sendto(data, ("127.0.0.1", first.port))
    wait_for(lambda: rs.info(first)["swim"]["dropped"] >= 5, "the bad datagrams counted as dropped")
    after = rs.info(first)["members"]
    assert [m["id"] for m in after] == [m["id"] for m in before] == [1, 2, 3], "no phantom member"
    assert all_alive(rs, [first, second, third])
