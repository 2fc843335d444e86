"""`box.remove(ID)`: a QUORUM transaction deletes the member's `_cluster` row, shrinking
total membership; refused for a live member without force; the removed member is refused at
SUBSCRIBE and PREPARE and its rows are taken no more."""

from __future__ import annotations

import pytest

from replicaset.iproto.errors import ServerError
from tests.server.conftest import QUORUM, ReplicaSet, Server, quorum_set_of, wait_for
from tests.server.test_swim import SWIM_FAST


def console(member: Server, expr: str):
    with member.client() as client:
        return client.eval(expr)[0]


def swim_state(rs: ReplicaSet, member: Server, of: int) -> str | None:
    return next((m["state"] for m in rs.info(member)["members"] if m["id"] == of), None)


def test_a_dead_member_is_removed_and_the_set_goes_on_without_it(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    wait_for(lambda: swim_state(rs, first, 3) == "alive", "member 3 alive on member 1")
    for expr, refusal in (("box.remove(3)", "instance 3 is alive"), ("box.remove(1)", "cannot remove itself"),
                          ("box.remove(9)", "instance 9 is not registered")):
        with pytest.raises(ServerError, match=refusal):
            console(first, expr)

    third.kill()
    wait_for(lambda: swim_state(rs, first, 3) == "dead", "member 3 DEAD on member 1")
    uuid = rs.info(first)["replication"][3]["uuid"]
    assert console(first, "box.remove(3)") == {"removed": 3, "uuid": uuid, "members": 2}
    wait_for(lambda: set(rs.info(second)["replication"]) == {1, 2}, "member 2 sees two members")
    with second.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'two of two')", options=QUORUM)
    assert all(m["state"] == "removed" for m in rs.info(first)["members"] if m["id"] == 3)

    third.start()  # its data still says it is a member: the others say it is not
    wait_for(lambda: any(e.get("event") == "upstream_refused" and "not registered" in e.get("error", "")
                         for e in third.log_events()), "member 3's SUBSCRIBE refused")
    with third.client() as client:
        with pytest.raises(ServerError):
            client.execute("INSERT INTO kv(k, v) VALUES (3, 'from the removed one')", options=QUORUM)
    with first.client() as client:
        assert client.execute("SELECT k FROM kv WHERE k = 3").rows == []


def test_a_live_member_removed_by_force_stops_taking_writes(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    wait_for(lambda: swim_state(rs, first, 2) == "alive", "member 2 alive on member 1")
    assert console(first, "box.remove(2, {force = true})")["removed"] == 2
    wait_for(lambda: any(e.get("event") == "removed_from_replicaset" for e in second.log_events()),
             "member 2 learns it was removed")
    with second.client() as client:
        with pytest.raises(ServerError, match="removed from the replica set"):
            client.execute("INSERT INTO kv(k, v) VALUES (2, 'x')")
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'two of two')", options=QUORUM)
    rs.wait_converged([first, third])
