"""Malformed frames over a real socket: no crash, no hang, everyone else still served."""

from __future__ import annotations

import random
import socket
import struct

import msgpack
import pytest

from replicaset.iproto.codec import GREETING_SIZE

STEADY_EVERY = 25  # frames between two writes of the well-behaved client


def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if kind == 1:  # valid length, body not msgpack
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 32)))
        return b"\xce" + struct.pack(">I", len(body)) + body
    if kind == 2:  # header not a map
        body = msgpack.packb([1, 2, 3]) + msgpack.packb({})
        return b"\xce" + struct.pack(">I", len(body)) + body
    if kind == 3:  # oversize length prefix
        return b"\xce" + struct.pack(">I", 0xFFFFFFF0)
    if kind == 4:  # unknown request type
        body = msgpack.packb({0: 0x1234, 1: 5}) + msgpack.packb({})
        return b"\xce" + struct.pack(">I", len(body)) + body
    # EXECUTE with a body of wrong types
    body = msgpack.packb({0: 11, 1: 6}) + msgpack.packb({0x40: 12345, 0x41: {"not": "a list"}})
    return b"\xce" + struct.pack(">I", len(body)) + body


def _send_and_drain(port: int, payload: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.recv(GREETING_SIZE)
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # the server may close a connection whose framing it cannot trust


@pytest.mark.parametrize("frames", [300, pytest.param(5000, marks=pytest.mark.deep)], ids=["ci", "deep"])
def test_malformed_frames_do_not_disturb_other_clients(server, frames: int):
    rng = random.Random(20261122)
    with server.client() as steady:
        steady.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        for i in range(frames):
            _send_and_drain(server.port, _garbage(rng))
            if i % STEADY_EVERY == 0:
                steady.execute("INSERT INTO t VALUES (?)", [i])
                steady.ping()
        assert steady.execute("SELECT count(*) FROM t").rows == [[len(range(0, frames, STEADY_EVERY))]]
    assert server.proc.poll() is None


def test_error_reply_keeps_the_connection_when_framing_is_intact(server):
    with server.client() as client:
        body = msgpack.packb({0: 0x1234, 1: 77}) + msgpack.packb({})
        client._sock.sendall(b"\xce" + struct.pack(">I", len(body)) + body)
        reply = client._read_frame()
        assert reply.is_error and reply.sync == 77
        client.ping()
