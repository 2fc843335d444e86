"""A replica set with a cluster secret, on real processes: its members join, replicate and
commit quorum writes as before; an instance without the secret, or with another one, is
refused at JOIN and learns nothing; peer requests made by hand without PEER_AUTH are
refused before anything in them is looked at; SWIM datagrams without the secret's tag
change nothing."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import trio

from replicaset.iproto.codec import encode_frame
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.iproto.peer_auth import swim_seal
from replicaset.runtime.links import PeerError, PeerLink
from replicaset.runtime.peer_access import PeerCredentials
from replicaset.testing.processes import free_port
from replicaset.runtime.environment import TCP
from tests.server.conftest import QUORUM, REPLICASET_UUID, ReplicaSet, Server, kv_count, quorum_set_of, wait_for
from tests.server.test_swim import SWIM_FAST, all_alive, states

SECRET = "correct horse battery staple"
WITH_SECRET = f'cluster.cluster_secret = "{SECRET}"\n'
JOINER = "5f0e4a52-0000-4000-8000-0000000000dd"
JOIN_TIMEOUT_S = 30


def test_a_set_with_a_secret_joins_replicates_and_commits_quorum_writes(replicaset_factory) -> None:
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, WITH_SECRET)
    with third.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'with a secret')", options=QUORUM)
        assert client.eval("box.cfg")[0]["cluster.cluster_secret"] == "<hidden>", "no client reads the secret"
    rs.wait_converged()
    assert [kv_count(m) for m in (first, second, third)] == [1, 1, 1]
    for member in (first, second, third):
        assert not [e for e in member.log_events() if e.get("event") == "peer_refused"], member.log_path


def _join_refused(rs: ReplicaSet, through: Server, name: str, config: str) -> tuple[Path, str]:
    """`replicaset join` with `config`: it must give up (exit 1); its data directory and log."""
    data_dir, log = rs.root / name, rs.root / f"{name}.log"
    result = subprocess.run(
        [sys.executable, "-m", "replicaset.cli", "join", "--uuid", REPLICASET_UUID, "--peer", f"127.0.0.1:{through.port}",
         "--data-dir", str(data_dir), "--config", str(rs.config_with(name, config)),
         "--listen", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=JOIN_TIMEOUT_S)
    log.write_text(result.stderr)
    assert result.returncode == 1, result.stderr
    return data_dir, result.stderr


def test_a_joiner_with_a_wrong_secret_or_none_is_refused_and_gets_nothing(replicaset_factory) -> None:
    rs = replicaset_factory(WITH_SECRET)
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        client.execute("INSERT INTO kv VALUES (1, 'private')")
        cluster = client.execute("SELECT * FROM _cluster").rows
    rs.config.write_text(rs.config.read_text().replace(WITH_SECRET, ""))  # the joiners' own secrets below
    wrong, wrong_log = _join_refused(rs, first, "wrong", 'cluster.cluster_secret = "a guess"\n')
    none, none_log = _join_refused(rs, first, "none", "")
    assert "wrong cluster secret" in wrong_log
    assert "peer authentication required" in none_log
    for data_dir in (wrong, none):
        assert not (data_dir / "db.sqlite").exists() and not (data_dir / "instance.toml").exists()
        assert not list(data_dir.rglob("*.partial")) and not (data_dir / "snap").exists(), sorted(data_dir.rglob("*"))
    refusals = [e for e in first.log_events() if e.get("event") == "peer_refused"]
    assert [(e["request"], e["reason"]) for e in refusals] == [
        ("PEER_AUTH", "wrong cluster secret"), ("JOIN", "peer authentication required")]
    assert all(e["level"] == "warning" and e["remote"].startswith("127.0.0.1:") for e in refusals), refusals
    assert not [e for e in first.log_events() if e.get("event") in ("join_serving", "member_registered")]
    with first.client() as client:
        assert client.execute("SELECT * FROM _cluster").rows == cluster


def _refusal(port: int, request_type: int, body: dict, header: dict | None = None) -> tuple[dict, dict]:
    """One peer request on a fresh connection as a guest would send it; the header and body
    of the refusal, after checking that the member then closed the connection."""
    from replicaset.iproto.client import Client

    with Client.connect("127.0.0.1", port, timeout_s=5) as client:
        client._sock.sendall(encode_frame({Key.REQUEST_TYPE: request_type, Key.SYNC: 7, **(header or {})}, body))
        reply = client._read_frame()
        assert client._sock.recv(1) == b"", "the connection is closed after a refused peer request"
    assert reply.is_error and reply.request_type & 0x7FFF == ErrorCode.ACCESS_DENIED, reply
    return reply.header, reply.body


def test_peer_requests_without_peer_auth_are_refused_revealing_nothing(replicaset_factory) -> None:
    rs = replicaset_factory(WITH_SECRET)
    first = rs.bootstrap()
    member = rs.info(first)["uuid"]
    requests = [
        (RequestType.SUBSCRIBE, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: member, Key.VCLOCK: {}},
         {Key.REPLICA_ID: 1}),
        # A wrong replica set UUID is answered with both UUIDs once authenticated; not before.
        (RequestType.SUBSCRIBE, {Key.REPLICASET_UUID: JOINER, Key.INSTANCE_UUID: member, Key.VCLOCK: {}}, None),
        (RequestType.JOIN, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: JOINER,
                            PeerKey.ADDRESS: "127.0.0.1:3999"}, None),
        (PeerRequest.TXN_PREPARE, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: member, PeerKey.TXN_ID: 1,
                                   PeerKey.COORDINATOR: 1, PeerKey.MEMBERS: [1], PeerKey.READS: [["kv", "1", 0, 0]]},
         {Key.REPLICA_ID: 1}),
        (PeerRequest.TXN_QUERY, {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: member, PeerKey.TXN_ID: 1},
         {Key.REPLICA_ID: 1}),
        (PeerRequest.ACK, {Key.VCLOCK: {1: 1}}, None),
    ]
    for request_type, body, header in requests:
        reply_header, reply_body = _refusal(first.port, request_type, body, header)
        assert set(reply_body) == {Key.ERROR_24, Key.ERROR}, reply_body
        assert Key.VCLOCK not in reply_header
        message = reply_body[Key.ERROR_24]
        assert message == "peer authentication required: this member has a cluster secret", message
        assert REPLICASET_UUID not in str(reply_body) and member not in str(reply_body)
    refused = [e["request"] for e in first.log_events() if e.get("event") == "peer_refused"]
    assert refused == ["SUBSCRIBE", "SUBSCRIBE", "JOIN", "TXN_PREPARE", "TXN_QUERY", "ACK"]
    with first.client() as client:  # still serving, and nothing was registered or relayed
        assert len(client.execute("SELECT * FROM _cluster").rows) == 1
        assert rs.info(first)["replication"].keys() == {1}


def test_a_member_with_a_secret_refuses_to_follow_one_without(server) -> None:
    """The dialing side: a member that has no secret cannot prove one, and is not trusted."""
    async def dial() -> None:
        await PeerLink.open(f"127.0.0.1:{server.port}", 1 << 20, PeerCredentials(instance_uuid=JOINER,
                                                                                  secret=SECRET.encode()), network=TCP)

    try:
        trio.run(dial)
    except PeerError as exc:
        assert exc.code == ErrorCode.ACCESS_DENIED and "has no cluster secret" in str(exc), exc
    else:
        raise AssertionError("a member without a secret was trusted")


def _send_udp(port: int, datagrams: list[bytes]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for data in datagrams:
            sock.sendto(data, ("127.0.0.1", port))


def test_swim_datagrams_without_the_secret_s_tag_change_nothing(replicaset_factory) -> None:
    rs = replicaset_factory(SWIM_FAST + WITH_SECRET)
    first = rs.bootstrap()
    members = [first, rs.join(first), rs.join(first)]
    wait_for(lambda: all_alive(rs, members), "every member sees three ALIVE members")
    # From member 3: member 2 is DEAD at a high incarnation; phantom member 9 is ALIVE.
    forged = msgpack.packb([1, 0, REPLICASET_UUID, 3, 1, None, [[3, 0, 0], [2, 3, 50], [9, 0, 0]]])
    bad = [forged, swim_seal(b"a guess", time.time_ns(), forged), swim_seal(SECRET.encode(), time.time_ns(), forged)[1:]]
    _send_udp(first.port, bad * 20)
    wait_for(lambda: rs.info(first)["swim"]["refused"] >= 60, "the forged datagrams refused")
    assert [m["id"] for m in rs.info(first)["members"]] == [1, 2, 3], "no phantom member"
    assert states(rs, first)[2][1] < 50 and all_alive(rs, members)
    logged = [e for e in first.log_events() if e.get("event") == "swim_datagrams_refused"]
    assert len(logged) == 1 and logged[0]["level"] == "warning", "one line for the burst, not one per datagram"
    # The same datagram sealed with the secret is taken (the test's forgery is a real one),
    # and once only: sent again, it is a replay.
    sealed = swim_seal(SECRET.encode(), time.time_ns(), forged)
    _send_udp(first.port, [sealed])
    wait_for(lambda: states(rs, first)[2][1] >= 50, "the authentic datagram moved member 2 to incarnation 50")
    refused = rs.info(first)["swim"]["refused"]
    _send_udp(first.port, [sealed])
    wait_for(lambda: rs.info(first)["swim"]["refused"] == refused + 1, "the replay refused")
    assert "replayed" in rs.info(first)["swim"]["last_drop"]
