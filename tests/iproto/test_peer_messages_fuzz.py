"""Every peer message decoder under hostile bodies: a typed message or a `RemoteProtocolError`.

A peer body reaches these decoders as whatever msgpack made of the bytes, so each decoder
gets arbitrary bodies and headers, and mutations of a valid body (a field dropped, or given
any value). The error must be the documented one: non-fatal (the frame boundary is
intact), code PROTOCOL, the frame's sync, a message naming the message and the field.
Never a KeyError, TypeError or AttributeError, which the server would take for a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame
from replicaset.iproto.constants import ErrorCode, Key
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey
from tests.fuzzing import body_dicts, examples, field_mutations, fuzz, mutate_fields, values
from wal import Record, RecordType, VClock, encode_record

RS = "8c5e4a52-0000-4000-8000-00000000abcd"
ME = "5f0e4a52-0000-4000-8000-0000000000aa"
ROW = encode_record(Record(type=RecordType.DML, origin=2, lsn=3, txn_id=99, payload=b"\x80"), max_record_bytes=1 << 20)
TXN = {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, PeerKey.TXN_ID: 7}

# Each decoder with a valid body (and header) to mutate.
DECODERS: dict[str, tuple[Callable[[Frame], Any], dict[int, Any], dict[int, Any]]] = {
    "hello": (lambda f: peer_messages.hello(f, "JOIN"),
              {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, PeerKey.ADDRESS: "localhost:3301"}, {}),
    "hello_resume": (lambda f: peer_messages.hello(f, "JOIN"),
                     {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, PeerKey.ADDRESS: "localhost:3301",
                      PeerKey.RESUME: [{1: 5}, 8192, 4096, 77]}, {}),
    "subscribe": (peer_messages.subscribe,
                  {Key.REPLICASET_UUID: RS, Key.INSTANCE_UUID: ME, Key.VCLOCK: {1: 5}, PeerKey.LAST_TXN: {1: [5, 77]},
                   PeerKey.INCLUDE_OWN: True}, {Key.REPLICA_ID: 3}),
    "ack": (peer_messages.ack, {Key.VCLOCK: {1: 5, 2: 9}}, {}),
    "txn_request": (lambda f: peer_messages.txn_request(f, "ABORT"), TXN, {Key.REPLICA_ID: 2}),
    "txn_heartbeat": (lambda f: peer_messages.txn_request(f, "HEARTBEAT"),
                      {**{k: v for k, v in TXN.items() if k != PeerKey.TXN_ID}, PeerKey.TXN_IDS: [7, 8]},
                      {Key.REPLICA_ID: 2}),
    "txn_prepare": (peer_messages.txn_prepare,
                    {**TXN, PeerKey.MEMBERS: [1, 2], PeerKey.COORDINATOR: 2, PeerKey.READS: [["kv", "kv:1", 5, 1]]},
                    {Key.REPLICA_ID: 2}),
    "txn_commit": (peer_messages.txn_commit, {**TXN, PeerKey.RECORDS: [ROW]}, {Key.REPLICA_ID: 2}),
    "txn_query": (peer_messages.txn_query, {**TXN, PeerKey.COORDINATOR: 2}, {Key.REPLICA_ID: 2}),
    "subscribed": (peer_messages.subscribed, {Key.INSTANCE_UUID: ME, Key.VCLOCK: {1: 5}}, {}),
    "rows": (peer_messages.rows, {PeerKey.RECORDS: [ROW, ROW]}, {}),
    "txn_vote": (peer_messages.txn_vote,
                 {PeerKey.VOTE: "conflict", PeerKey.CONFLICT: ["kv", "kv:1", 9, 3], PeerKey.HELD: {1: 2}}, {}),
    "txn_decision": (peer_messages.txn_decision, {PeerKey.DECISION: "commit"}, {}),
    "heartbeat": (peer_messages.heartbeat, {Key.VCLOCK: {1: 5}}, {}),
    "checkpoint_chunk": (peer_messages.checkpoint_chunk,
                         {PeerKey.CHUNK: b"x", PeerKey.OFFSET: 0, PeerKey.SIZE: 1, PeerKey.DIGEST: 5,
                          Key.VCLOCK: {1: 5}}, {}),
    "joined": (peer_messages.joined,
               {Key.VCLOCK: {1: 5}, PeerKey.SIZE: 1, PeerKey.DIGEST: 5, PeerKey.INSTANCE_ID: 2,
                PeerKey.REGISTRATION_ROW: [1, 4], PeerKey.BARRIER: {1: 4},
                PeerKey.REGISTERED: [[1, ME, "127.0.0.1:3301"]]}, {}),
    "joined_anonymous": (lambda f: peer_messages.joined(f, anonymous=True),
                         {Key.VCLOCK: {1: 5}, PeerKey.SIZE: 1, PeerKey.DIGEST: 5, PeerKey.INSTANCE_ID: 0}, {}),
    "peer_auth": (peer_messages.peer_auth, {Key.INSTANCE_UUID: ME, PeerKey.NONCE: b"n" * 32, PeerKey.PROOF: b"p" * 32},
                  {}),
    "peer_auth_reply": (peer_messages.peer_auth_reply, {PeerKey.PROOF: b"p" * 32}, {}),
}
FIELDS = sorted({int(k) for _, body, header in DECODERS.values() for k in (*body, *header)})
HEADER_FIELDS = [int(Key.REPLICA_ID), int(Key.SYNC), int(Key.STREAM_ID)]


def decode_checked(name: str, header: dict[int, Any], body: dict[int, Any]) -> Any:
    """Run one decoder; anything but its result or the documented error fails the test."""
    decode = DECODERS[name][0]
    frame = Frame(header={Key.REQUEST_TYPE: 1, Key.SYNC: 9, **header}, body=body, size=0)
    try:
        message = decode(frame)
    except RemoteProtocolError as exc:
        assert not exc.fatal and exc.code == ErrorCode.PROTOCOL and exc.sync == frame.sync, exc
        assert "field" in exc.message, exc.message
        return None
    _assert_typed(message)
    return message


def _assert_typed(message: Any) -> None:
    """What a decoder returns holds checked Python values only: what callers use unchecked."""
    if isinstance(message, tuple):  # txn_commit, txn_query
        for part in message:
            _assert_typed(part)
        return
    if isinstance(message, list):  # rows
        assert all(isinstance(r, Record) for r in message)
        return
    for field in getattr(message, "__slots__", ()):
        value = getattr(message, field)
        if field.endswith("uuid"):
            assert isinstance(value, str) and len(value) == 36
        if field in ("vclock", "barrier"):
            assert isinstance(value, VClock)


@examples(ci=10, deep=2000)
def test_arbitrary_bodies_decode_or_are_refused_by_field(max_examples: int) -> None:
    @fuzz(max_examples * len(DECODERS))
    @given(name=st.sampled_from(sorted(DECODERS)), header=body_dicts(HEADER_FIELDS), body=body_dicts(FIELDS))
    def check(name: str, header: dict[int, Any], body: dict[int, Any]) -> None:
        header = {k: v for k, v in header.items() if k not in (Key.SYNC, Key.STREAM_ID)}  # the codec checks those
        decode_checked(name, header, body)

    check()


@examples(ci=15, deep=3000)
def test_mutated_valid_bodies_decode_or_are_refused_by_field(max_examples: int) -> None:
    mutated = st.sampled_from(sorted(DECODERS)).flatmap(
        lambda name: st.tuples(st.just(name), field_mutations(list(DECODERS[name][1]), FIELDS)))

    @fuzz(max_examples * len(DECODERS))
    @given(named_steps=mutated, header_value=st.none() | values)
    def check(named_steps: tuple[str, list], header_value: Any) -> None:
        name, steps = named_steps
        _, body, header = DECODERS[name]
        if header_value is not None:
            header = {**header, Key.REPLICA_ID: header_value}
        decode_checked(name, header, mutate_fields(body, steps))

    check()


def test_each_valid_body_decodes() -> None:
    """The corpus is valid: mutations start from messages the decoders accept."""
    for name, (_, body, header) in DECODERS.items():
        assert decode_checked(name, header, body) is not None, name
