"""Peer bodies are decoded and validated once, at the edge; garbage names its field."""

from __future__ import annotations

import pytest

from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame
from replicaset.iproto.constants import ErrorCode, Key
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey
from wal import Record, RecordType, VClock, encode_record

RS = "8c5e4a52-0000-4000-8000-00000000abcd"
ME = "5f0e4a52-0000-4000-8000-0000000000aa"


def frame(body: dict, header: dict | None = None) -> Frame:
    return Frame(header={Key.REQUEST_TYPE: 1, Key.SYNC: 9, **(header or {})}, body=body, size=0)


def refused(decode, *args) -> str:
    with pytest.raises(RemoteProtocolError) as caught:
        decode(*args)
    assert not caught.value.fatal and caught.value.code == ErrorCode.PROTOCOL and caught.value.sync == 9
    return caught.value.message


def test_a_hello_is_normalised_and_each_bad_field_named() -> None:
    good = {Key.REPLICASET_UUID: RS.upper(), Key.INSTANCE_UUID: ME, PeerKey.ADDRESS: "localhost:3301"}
    hello = peer_messages.hello(frame(good), "JOIN")
    assert (hello.replicaset_uuid, hello.instance_uuid, hello.address) == (RS, ME, "localhost:3301")
    assert "JOIN: field INSTANCE_UUID" in refused(peer_messages.hello, frame({**good, Key.INSTANCE_UUID: "7" * 100_000}), "JOIN")
    assert "field ADDRESS is missing" in refused(peer_messages.hello, frame({k: v for k, v in good.items() if k != PeerKey.ADDRESS}), "JOIN")
    assert "field ADDRESS" in refused(peer_messages.hello, frame({**good, PeerKey.ADDRESS: "host:0"}), "JOIN")
    assert "control characters" in refused(peer_messages.hello, frame({**good, PeerKey.ADDRESS: "ho\nst:1"}), "JOIN")


def test_a_resume_names_a_checkpoint_and_a_prefix_within_it() -> None:
    good = {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, PeerKey.ADDRESS: "localhost:3301"}
    assert peer_messages.hello(frame(good), "JOIN").resume is None
    hello = peer_messages.hello(frame({**good, PeerKey.RESUME: [{1: 4}, 100, 64, 7]}), "JOIN")
    assert hello.resume == peer_messages.Resume(vclock=VClock({1: 4}), size=100, offset=64, digest=7)
    assert "offset 101 is past the checkpoint's size 100" in refused(
        peer_messages.hello, frame({**good, PeerKey.RESUME: [{1: 4}, 100, 101, 7]}), "JOIN")
    for bad in ([{1: 4}, 100, 64], "resume", [{1: 4}, 100, -1, 7], [{1: 4}, 100, 64, True], [[1, 4], 100, 64, 7]):
        assert "JOIN: field RESUME must be [vclock, size, offset, digest]" in refused(
            peer_messages.hello, frame({**good, PeerKey.RESUME: bad}), "JOIN"), bad
    assert "JOIN: field RESUME vclock: vclock origin" in refused(
        peer_messages.hello, frame({**good, PeerKey.RESUME: [{99: 4}, 100, 64, 7]}), "JOIN")


def test_a_checkpoint_chunk_lies_within_the_checkpoint_it_names() -> None:
    good = {PeerKey.CHUNK: b"abcd", PeerKey.OFFSET: 4, PeerKey.SIZE: 8, PeerKey.DIGEST: 5, Key.VCLOCK: {1: 3}}
    chunk = peer_messages.checkpoint_chunk(frame(good))
    assert (chunk.chunk, chunk.offset, chunk.size, chunk.vclock) == (b"abcd", 4, 8, VClock({1: 3}))
    assert "ends past SIZE 8" in refused(peer_messages.checkpoint_chunk, frame({**good, PeerKey.OFFSET: 5}))
    assert "field OFFSET" in refused(peer_messages.checkpoint_chunk, frame({**good, PeerKey.OFFSET: 9}))
    assert "field VCLOCK is missing" in refused(
        peer_messages.checkpoint_chunk, frame({k: v for k, v in good.items() if k != Key.VCLOCK}))
    assert chunk.instance_id is None, "an older member sends no id"
    assert peer_messages.checkpoint_chunk(frame({**good, PeerKey.INSTANCE_ID: 3})).instance_id == 3
    assert "field INSTANCE_ID" in refused(peer_messages.checkpoint_chunk, frame({**good, PeerKey.INSTANCE_ID: 32}))


def test_subscribe_fields() -> None:
    body = {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, Key.VCLOCK: {1: 5, 2: 0},
            PeerKey.LAST_TXN: {1: [5, 77]}, PeerKey.INCLUDE_OWN: True}
    request = peer_messages.subscribe(frame(body, {Key.REPLICA_ID: 3}))
    assert request.vclock == VClock({1: 5}) and request.last_txn == {1: (5, 77)}
    assert request.include_own is True and request.replica_id == 3
    assert "REPLICA_ID" in refused(peer_messages.subscribe, frame(body, {Key.REPLICA_ID: 0}))
    assert "field VCLOCK" in refused(peer_messages.subscribe, frame({**body, Key.VCLOCK: {32: 1}}))
    assert "field VCLOCK" in refused(peer_messages.subscribe, frame({**body, Key.VCLOCK: {1: True}}))
    assert "field LAST_TXN origin 1" in refused(peer_messages.subscribe, frame({**body, PeerKey.LAST_TXN: {1: [1, -2]}}))
    assert "field INCLUDE_OWN" in refused(peer_messages.subscribe, frame({**body, PeerKey.INCLUDE_OWN: 1}))


def test_rows_must_be_whole_valid_records() -> None:
    record = Record(type=RecordType.DML, origin=2, lsn=3, txn_id=99, payload=b"\x80")
    raw = encode_record(record, max_record_bytes=1 << 20)
    assert peer_messages.rows(frame({PeerKey.RECORDS: [raw]})) == [record]
    assert "item 0 is not a valid WAL record" in refused(peer_messages.rows, frame({PeerKey.RECORDS: [raw[:-1] + b"\x00"]}))
    assert "bytes after its record" in refused(peer_messages.rows, frame({PeerKey.RECORDS: [raw + b"x"]}))
    assert "item 1 is not binary" in refused(peer_messages.rows, frame({PeerKey.RECORDS: [raw, "text"]}))
    assert "RECORDS is missing" in refused(peer_messages.rows, frame({}))


def test_join_replies_are_checked_before_the_joiner_uses_them() -> None:
    end = {Key.VCLOCK: {1: 4}, PeerKey.SIZE: 10, PeerKey.DIGEST: 5, PeerKey.INSTANCE_ID: 4,
           PeerKey.REGISTRATION_ROW: [2, 7], PeerKey.BARRIER: {1: 4, 2: 6}}
    joined = peer_messages.joined(frame(end))
    assert (joined.instance_id, joined.origin, joined.lsn, joined.vclock) == (4, 2, 7, VClock({1: 4}))
    assert joined.barrier == VClock({1: 4, 2: 6})
    assert "INSTANCE_ID" in refused(peer_messages.joined, frame({**end, PeerKey.INSTANCE_ID: 32}))
    assert "REGISTRATION_ROW is missing" in refused(
        peer_messages.joined, frame({k: v for k, v in end.items() if k != PeerKey.REGISTRATION_ROW}))
    assert "must be [origin, lsn]" in refused(peer_messages.joined, frame({**end, PeerKey.REGISTRATION_ROW: [0, 7]}))
    assert "field BARRIER" in refused(peer_messages.joined, frame({**end, PeerKey.BARRIER: {1: "x"}}))
    assert joined.registered == ()
    member = [3, "0b8d3c9e-6a4f-4d7e-9c1b-2f5a6e7d8c9b", "127.0.0.1:3303"]
    assert peer_messages.joined(frame({**end, PeerKey.REGISTERED: [member, [5, member[1], ""]]})).registered == (
        (3, member[1], "127.0.0.1:3303"), (5, member[1], ""))
    for bad in ([member[:2]], [[0, *member[1:]]], [[3, "not a uuid", member[2]]], [[3, member[1], "no port"]], "x"):
        assert "field REGISTERED" in refused(peer_messages.joined, frame({**end, PeerKey.REGISTERED: bad}))
    assert "field CHUNK" in refused(peer_messages.checkpoint_chunk, frame({PeerKey.CHUNK: "text", PeerKey.OFFSET: 0}))


def test_a_vote_for_a_membership_change_carries_what_the_voter_holds() -> None:
    vote = peer_messages.txn_vote(frame({PeerKey.VOTE: "prepared", PeerKey.HELD: {1: 9, 3: 2}}))
    assert vote.prepared and vote.held == VClock({1: 9, 3: 2})
    assert peer_messages.txn_vote(frame({PeerKey.VOTE: "prepared"})).held is None
    assert "field HELD" in refused(peer_messages.txn_vote, frame({PeerKey.VOTE: "prepared", PeerKey.HELD: [1]}))


def test_a_prepare_vote_names_the_conflicting_key_its_holder_and_the_holders_member() -> None:
    conflict = {PeerKey.VOTE: "conflict", PeerKey.CONFLICT: ["_rs_schema", "_rs_schema:ddl", 0x99, 3]}
    assert peer_messages.txn_vote(frame(conflict)).conflict == ("_rs_schema", "_rs_schema:ddl", 0x99, 3)
    stale = {**conflict, PeerKey.CONFLICT: ["kv", "kv:1", None, None]}
    assert peer_messages.txn_vote(frame(stale)).conflict == ("kv", "kv:1", None, None)
    assert peer_messages.txn_vote(frame({PeerKey.VOTE: "prepared"})).prepared
    for bad in (["kv", "kv:1", 0x99], ["kv", "kv:1", 0x99, 32], ["kv", 1, None, None]):
        assert "field CONFLICT" in refused(peer_messages.txn_vote, frame({**conflict, PeerKey.CONFLICT: bad}))
