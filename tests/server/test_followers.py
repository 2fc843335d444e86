"""Read-only followers (`replicaset join --anonymous`, Tarantool's anonymous replicas): every
row reaches them, they serve reads, refuse writes, are registered nowhere, count toward no
quorum, and show in their upstream's `box.info.replication_anon`."""

from __future__ import annotations

import pytest

from replicaset.iproto.errors import ServerError
from replicaset.testing.processes import start_instance
from replicaset.runtime.environment import TCP
from tests.server.conftest import QUORUM, REPLICASET_UUID, Server, quorum_set_of, wait_for


def follower_of(rs, through: Server) -> Server:
    follower = Server(rs.root / "follower", rs.root / "follower.log")
    follower.proc, follower.port = start_instance(
        ["join", "--anonymous", "--uuid", REPLICASET_UUID, "--peer", f"127.0.0.1:{through.port}",
         "--data-dir", str(follower.data_dir), "--config", str(rs.config)], follower.log_path)
    rs.members.append(follower)  # stopped with the set
    return follower


def count(member: Server) -> int:
    with member.client() as client:
        return client.execute("SELECT count(*) FROM kv").rows[0][0]


def test_a_follower_reads_everything_writes_nothing_and_counts_for_no_quorum(replicaset_factory):
    rs, (first, second) = quorum_set_of(replicaset_factory, 2)
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'before the follower')")
    follower = follower_of(rs, first)
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (2, 'on member 1')", options=QUORUM)
    with second.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (3, 'on member 2')")
    wait_for(lambda: count(follower) == 3, "the follower holds every row")
    info = rs.info(follower)
    assert info["id"] == 0 and info["ro"] is True and info["members"] == []
    with follower.client() as client:
        with pytest.raises(ServerError, match="read-only"):
            client.execute("INSERT INTO kv(k, v) VALUES (4, 'on the follower')")
        assert client.execute("SELECT id FROM _cluster ORDER BY id").rows == [[1], [2]], "registered nowhere"

    anon = rs.info(first)["replication_anon"]
    assert anon["count"] == 1 and list(anon["followers"].values())[0]["status"] == "follow", anon
    assert set(rs.info(first)["replication"]) == {1, 2}

    second.kill()  # member 1 and the follower are up: a QUORUM of the two members is not
    with first.client() as client:
        with pytest.raises(ServerError, match="quorum|Quorum"):
            client.execute("INSERT INTO kv(k, v) VALUES (5, 'needs member 2')", options=QUORUM)
    second.start()
    rs.wait_converged([first, second])

    assert follower.stop() == 0
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (6, 'while the follower is down')")
    follower.start()
    wait_for(lambda: count(follower) == count(first), "the follower catches up after a restart")


def test_a_registered_member_cannot_subscribe_as_a_follower(replicaset_factory):
    rs, (first, second) = quorum_set_of(replicaset_factory, 2)
    from replicaset.iproto.constants import Key, RequestType
    from replicaset.iproto.peer import PeerKey
    from replicaset.runtime.links import PeerLink
    import trio

    uuid = rs.info(second)["uuid"]

    async def subscribe() -> None:
        link = await PeerLink.open(f"127.0.0.1:{first.port}", 1 << 20, network=TCP)
        try:
            await link.send(RequestType.SUBSCRIBE, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: uuid,
                                                    Key.VCLOCK: {}, PeerKey.ANONYMOUS: True})
            await link.receive()
        finally:
            await link.aclose()

    with pytest.raises(Exception, match="registered member"):
        trio.run(subscribe)
