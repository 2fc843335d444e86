"""Malformed frames over a real socket: each whole frame gets an error reply, a broken length
prefix gets one and the connection closed, no hang, everyone else still served (the error
rules of `replicaset.iproto.codec`)."""

from __future__ import annotations

import random
import socket
import struct
import time
from dataclasses import dataclass

import msgpack
import pytest

from replicaset.iproto.codec import GREETING_SIZE, Frame, FrameDecoder, encode_frame
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.peer import PeerRequest
from replicaset.runtime.peer_access import NO_SECRET

STEADY_EVERY = 25  # frames between two writes of the well-behaved client
ANSWER_TIMEOUT_S = 5.0  # for the whole answer to one connection, its close included
REPLY_BYTES_MAX = 1 << 20


@dataclass(frozen=True)
class Garbage:
    """Bytes to send, and what the server must answer: `replies` error frames (None: any
    number, for random bytes), each with `sync` and a message holding `says` when given.
    `fatal`: the length prefix is broken, so the server closes without waiting for us."""

    kind: str
    payload: bytes
    replies: int | None = 1
    sync: int | None = None
    code: int | None = None
    says: str | None = None
    fatal: bool = False


def _frame(body: bytes) -> bytes:
    return b"\xce" + struct.pack(">I", len(body)) + body


def _garbage(rng: random.Random) -> Garbage:
    kind = rng.randrange(6)
    if kind == 0:
        return Garbage("random bytes", bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))), replies=None)
    if kind == 1:
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        return Garbage("valid length, body not msgpack", _frame(body))
    if kind == 2:
        return Garbage("header not a map", _frame(msgpack.packb([1, 2, 3]) + msgpack.packb({})), sync=0,
                       says="frame header must be a map")
    if kind == 3:
        return Garbage("oversize length prefix", b"\xce" + struct.pack(">I", 0xFFFFFFF0), sync=0,
                       says="exceeds the limit", fatal=True)
    if kind == 4:
        return Garbage("unknown request type", _frame(msgpack.packb({0: 0x1234, 1: 5}) + msgpack.packb({})), sync=5,
                       code=ErrorCode.UNKNOWN_REQUEST_TYPE)
    body = msgpack.packb({0: 11, 1: 6}) + msgpack.packb({0x40: 12345, 0x41: {"not": "a list"}})
    return Garbage("EXECUTE with a body of wrong types", _frame(body), sync=6)


def _answer(port: int, garbage: Garbage) -> list[Frame]:
    """Send the garbage (then end our side, unless the server must close by itself) and
    read everything until the server closes. A hang or a reset fails the test."""
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    received = bytearray()
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.sendall(garbage.payload)
        if not garbage.fatal:
            sock.shutdown(socket.SHUT_WR)
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                chunk = None
            assert chunk is not None, f"{garbage.kind} {garbage.payload!r}: no close within {ANSWER_TIMEOUT_S} s, got {bytes(received)!r}"
            if not chunk:
                break
            received += chunk
            assert len(received) <= REPLY_BYTES_MAX, f"{garbage.kind}: an answer without end"
    assert len(received) >= GREETING_SIZE, f"{garbage.kind}: closed before the greeting"
    decoder = FrameDecoder(REPLY_BYTES_MAX)
    decoder.feed(bytes(received[GREETING_SIZE:]))
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    assert decoder.pending_bytes == 0, f"{garbage.kind}: the answer ends inside a frame"
    return frames


def _check(garbage: Garbage, replies: list[Frame]) -> None:
    what = f"{garbage.kind} {garbage.payload!r}: replies {[(f.header, f.body) for f in replies]}"
    assert all(f.is_error for f in replies), what
    if garbage.replies is not None:
        assert len(replies) == garbage.replies, what
    for reply in replies:
        assert garbage.sync is None or reply.sync == garbage.sync, what
        assert garbage.code is None or reply.request_type & 0x7FFF == garbage.code, what
        assert garbage.says is None or garbage.says in reply.body[Key.ERROR_24], what


@pytest.mark.parametrize("frames", [300, pytest.param(5000, marks=pytest.mark.deep)], ids=["ci", "deep"])
def test_malformed_frames_are_answered_as_specified_and_disturb_no_one(server, frames: int):
    rng = random.Random(20261122)
    seen: set[str] = set()
    with server.client() as steady:
        steady.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        for i in range(frames):
            garbage = _garbage(rng)
            _check(garbage, _answer(server.port, garbage))
            seen.add(garbage.kind)
            if i % STEADY_EVERY == 0:
                steady.execute("INSERT INTO t VALUES (?)", [i])
                steady.ping()
        assert steady.execute("SELECT count(*) FROM t").rows == [[len(range(0, frames, STEADY_EVERY))]]
    assert len(seen) == 6, seen
    assert server.proc.poll() is None


def test_error_reply_keeps_the_connection_when_framing_is_intact(server):
    with server.client() as client:
        body = msgpack.packb({0: 0x1234, 1: 77}) + msgpack.packb({})
        client._sock.sendall(b"\xce" + struct.pack(">I", len(body)) + body)
        reply = client._read_frame()
        assert reply.is_error and reply.sync == 77
        client.ping()


def test_a_refused_peer_request_is_answered_after_a_reply_already_being_sent(server):
    """Found by the request fuzz (flaky): a refused peer request queues its refusal and
    closes the connection. When another task of the connection was sending (a stream's
    large reply to a client not reading yet), the refusal was left to that send, which the
    close then cancelled: the client got half a reply and no refusal."""
    rows = 16_000
    select = encode_frame({Key.REQUEST_TYPE: RequestType.EXECUTE, Key.SYNC: 1, Key.STREAM_ID: 1}, {
        Key.SQL_TEXT: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) "
                      "SELECT x, randomblob(1000) FROM c", Key.SQL_BIND: [rows]})
    peer_auth = encode_frame({Key.REQUEST_TYPE: PeerRequest.PEER_AUTH, Key.SYNC: 2}, {})
    frames: list[Frame] = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=ANSWER_TIMEOUT_S) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(select)
        time.sleep(0.5)  # the stream's reply fills the socket's buffers: its send waits for us
        sock.sendall(peer_auth)
        time.sleep(0.3)
        decoder = FrameDecoder(1 << 26)
        received = 0
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while time.monotonic() < deadline:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            if received < GREETING_SIZE:
                skip = min(GREETING_SIZE - received, len(chunk))
                received += skip
                chunk = chunk[skip:]
            decoder.feed(chunk)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
        else:
            raise AssertionError(f"no close within {ANSWER_TIMEOUT_S} s; got {[f.sync for f in frames]}")
    by_sync = {frame.sync: frame for frame in frames}
    assert sorted(by_sync) == [1, 2], [(f.sync, f.is_error) for f in frames]
    assert not by_sync[1].is_error and len(by_sync[1].body[Key.DATA]) == rows
    refusal = by_sync[2]
    assert refusal.is_error and refusal.request_type & 0x7FFF == ErrorCode.ACCESS_DENIED
    assert refusal.body[Key.ERROR_24] == NO_SECRET
