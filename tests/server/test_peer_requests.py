"""Peer requests made by hand, as a stranger on the network would send them: every
malformed field is refused with an error naming it, registers nothing and sends nothing
else (the next reply on the connection is the answer to a PING)."""

from __future__ import annotations


from replicaset.iproto.codec import encode_frame
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from tests.server.conftest import REPLICASET_UUID

JOINER = "5f0e4a52-0000-4000-8000-0000000000aa"
GOOD_JOIN = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: JOINER, PeerKey.ADDRESS: "127.0.0.1:3999"}

JOINS = [
    ({Key.INSTANCE_UUID: "7" * 100_000}, "INSTANCE_UUID"),
    ({Key.INSTANCE_UUID: None}, "INSTANCE_UUID"),
    ({Key.INSTANCE_UUID: 12345}, "INSTANCE_UUID"),
    ({Key.INSTANCE_UUID: "not-a-uuid-but-thirty-six-characters"}, "INSTANCE_UUID"),
    ({Key.REPLICASET_UUID: ["a list"]}, "REPLICASET_UUID"),
    ({PeerKey.ADDRESS: "a" * 100_000}, "ADDRESS"),
    ({PeerKey.ADDRESS: "no port"}, "ADDRESS"),
    ({PeerKey.ADDRESS: "127.0.0.1:99999"}, "ADDRESS"),
    ({PeerKey.ADDRESS: 3301}, "ADDRESS"),
    ({PeerKey.ADDRESS: None}, "ADDRESS"),
    ({PeerKey.RESUME: "from the middle"}, "RESUME"),
    ({PeerKey.RESUME: [{1: 2}, 100, 50]}, "RESUME"),
    ({PeerKey.RESUME: [{1: 2}, 100, 101, 7]}, "RESUME"),  # past the size
    ({PeerKey.RESUME: [{1: 2}, 100, -4096, 7]}, "RESUME"),
    ({PeerKey.RESUME: [{99: 2}, 100, 50, 7]}, "RESUME"),
]


def _without_none(body: dict) -> dict:
    return {k: v for k, v in body.items() if v is not None}


def _refused(client, request_type: int, body: dict, header: dict | None = None) -> str:
    """Send one request; return its error message after checking that nothing else came
    before the answer to the PING that follows it."""
    client._sock.sendall(encode_frame({Key.REQUEST_TYPE: request_type, Key.SYNC: 901, **(header or {})}, body))
    client._sock.sendall(encode_frame({Key.REQUEST_TYPE: RequestType.PING, Key.SYNC: 902}, {}))
    reply = client._read_frame()
    assert reply.is_error and reply.sync == 901, reply
    assert reply.request_type & 0x7FFF == ErrorCode.PROTOCOL
    pong = client._read_frame()
    assert not pong.is_error and pong.sync == 902, "something was sent between the refusal and the PING's answer"
    return str(reply.body[Key.ERROR_24])


def test_join_with_a_malformed_field_is_refused_naming_it(replicaset) -> None:
    first = replicaset.bootstrap()
    with first.client() as client:
        for change, field in JOINS:
            message = _refused(client, RequestType.JOIN, _without_none({**GOOD_JOIN, **change}))
            assert f"field {field}" in message and len(message) < 300, message
        assert client.execute("SELECT id, uuid FROM _cluster").rows == [[1, replicaset.info(first)["uuid"]]]
    assert "member_registered" not in first.log_path.read_text()


SUBSCRIBES = [
    ({Key.VCLOCK: {99: 1}}, None, "VCLOCK"),
    ({Key.VCLOCK: {1: -1}}, None, "VCLOCK"),
    ({Key.VCLOCK: "all of it"}, None, "VCLOCK"),
    ({PeerKey.LAST_TXN: {1: "x"}}, None, "LAST_TXN"),
    ({PeerKey.LAST_TXN: {"one": [1, 2]}}, None, "LAST_TXN"),
    ({PeerKey.LAST_TXN: {1: [1, 2, 3]}}, None, "LAST_TXN"),
    ({PeerKey.INCLUDE_OWN: "yes"}, None, "INCLUDE_OWN"),
    ({Key.INSTANCE_UUID: "x" * 100_000}, None, "INSTANCE_UUID"),
    ({}, {Key.REPLICA_ID: 99}, "REPLICA_ID"),
    ({}, {Key.REPLICA_ID: "1"}, "REPLICA_ID"),
]


def test_subscribe_with_a_malformed_field_is_refused_naming_it(replicaset) -> None:
    first = replicaset.bootstrap()
    member = replicaset.info(first)["uuid"]
    good = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: member, Key.VCLOCK: {}}
    with first.client() as client:
        for change, header, field in SUBSCRIBES:
            message = _refused(client, RequestType.SUBSCRIBE, {**good, **change}, header)
            assert f"field {field}" in message and len(message) < 300, message
    assert "relay_started" not in first.log_path.read_text()


def test_an_ack_outside_a_relay_is_refused(replicaset) -> None:
    first = replicaset.bootstrap()
    with first.client() as client:
        client._sock.sendall(encode_frame({Key.REQUEST_TYPE: PeerRequest.ACK, Key.SYNC: 7}, {Key.VCLOCK: {1: 1}}))
        reply = client._read_frame()
        assert reply.is_error and "relays nothing" in str(reply.body[Key.ERROR_24])
        client.ping()
