"""A server's memory stays bounded under frames meant to exhaust it.

A length prefix is all a stranger needs to make a naive server reserve memory: a frame
announcing 4 GiB, a flood of frames cut off just before their end, pipelined requests
whose replies are never read. The decoder refuses a length over `max_frame_bytes` as
soon as it reads the prefix (error reply, connection closed), holds at most one partial
frame per connection, and a session stops reading while its replies cannot be sent. So the
server's resident memory (VmRSS) grows by far less than what the clients send.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from replicaset.iproto.codec import GREETING_SIZE, FrameDecoder, encode_frame
from replicaset.iproto.constants import Key, RequestType

FRAME_BYTES_MAX = 64 * 1024
CONFIG = f"max_frame_bytes = {FRAME_BYTES_MAX}\n"
HUGE_CONNECTIONS = 8
HUGE_SEND_BYTES = 16 * 1024 * 1024  # per connection, after a prefix announcing 4 GiB
PARTIAL_CONNECTIONS = 100
PIPELINE_CONNECTIONS = 4
PIPELINE_SEND_S = 2.0
PINGS_PER_CONNECTION = 1_000_000  # 11 MB of requests, 24 MB of replies
RSS_GROWTH_MAX_BYTES = 48 * 1024 * 1024  # what the clients send is ~10 times this


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def connect(port: int, receive_buffer_bytes: int | None = None) -> socket.socket:
    """A connection past the greeting; a small `receive_buffer_bytes` keeps the kernel from
    holding many replies we do not read, so the server meets backpressure early."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer_bytes is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    greeting = b""
    while len(greeting) < GREETING_SIZE:
        chunk = sock.recv(GREETING_SIZE - len(greeting))
        assert chunk, "closed before the greeting"
        greeting += chunk
    return sock


def send_for(sock: socket.socket, data: bytes, seconds: float) -> int:
    """Send as much of `data` as the peer takes within `seconds`; the count sent."""
    sock.settimeout(0.05)
    sent, deadline = 0, time.monotonic() + seconds
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += sock.send(data[sent : sent + 65536])
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            break
    return sent


@pytest.fixture
def member(replicaset_factory: Any) -> Any:
    server = replicaset_factory(CONFIG).bootstrap()
    with server.client() as client:  # warm up: the first statements load what the server keeps
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        client.execute("INSERT INTO t VALUES (1)")
        client.ping()
    return server


def test_a_frame_announcing_4_gib_is_refused_at_its_prefix(member: Any) -> None:
    base = rss_bytes(member.proc.pid)
    payload = b"\x00" * HUGE_SEND_BYTES
    for _ in range(HUGE_CONNECTIONS):
        with connect(member.port) as sock:
            sock.sendall(b"\xce" + struct.pack(">I", 0xFFFF_FFF0))
            sent = send_for(sock, payload, 1.0)
            reply = b""
            sock.settimeout(5)
            try:
                while chunk := sock.recv(65536):
                    reply += chunk
            except ConnectionResetError:  # our unread bytes made the close a reset
                pass
            assert sent < HUGE_SEND_BYTES, "the server read 16 MiB of a frame it cannot take"
            if reply:  # the reset may discard the reply before we read it
                decoder = FrameDecoder(1 << 20)
                decoder.feed(reply)
                error = decoder.next_frame()
                assert error is not None and error.is_error and "exceeds the limit" in error.body[Key.ERROR_24]
    assert rss_bytes(member.proc.pid) - base < RSS_GROWTH_MAX_BYTES
    with member.client() as client:
        client.ping()


def test_partial_frames_and_unread_replies_hold_bounded_memory(member: Any) -> None:
    base = rss_bytes(member.proc.pid)
    partial = b"\xce" + struct.pack(">I", FRAME_BYTES_MAX) + b"\x81" * (FRAME_BYTES_MAX - 1)
    held = [connect(member.port) for _ in range(PARTIAL_CONNECTIONS)]
    pings = encode_frame({Key.REQUEST_TYPE: RequestType.PING, Key.SYNC: 1}, {}) * PINGS_PER_CONNECTION
    try:
        for sock in held:
            sock.sendall(partial)  # the last byte never comes
        pipelined = [connect(member.port, 16 * 1024) for _ in range(PIPELINE_CONNECTIONS)]
        held += pipelined
        sent = sum(send_for(sock, pings, PIPELINE_SEND_S / PIPELINE_CONNECTIONS) for sock in pipelined)
        with member.client() as client:  # everyone else is still served meanwhile
            client.execute("INSERT INTO t VALUES (2)")
            client.ping()
        growth = rss_bytes(member.proc.pid) - base
        assert growth < RSS_GROWTH_MAX_BYTES, f"RSS grew by {growth} bytes"
        assert sent < len(pings) * PIPELINE_CONNECTIONS, "the server read every ping without its replies leaving"
    finally:
        for sock in held:
            sock.close()
    with member.client() as client:
        assert client.execute("SELECT count(*) FROM t").rows == [[2]]
