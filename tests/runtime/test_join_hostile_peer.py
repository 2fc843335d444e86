"""The joiner's side of JOIN against a peer that sends what it likes.

`replicaset join` trusts the member it joins through for its whole database, so what that
peer sends must be checked before it is installed: chunk sizes, the file's own vclock
against the one announced. A fake peer (a thread on 127.0.0.1) answers the JOIN with a
script of frames; the joiner must fail over (`join` returns None when no peer served it)
and leave no database or identity behind, never crash or install garbage.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import xxhash

from replicaset.iproto.codec import FrameDecoder, encode_greeting, encode_ok, encode_request
from replicaset.iproto.constants import GREETING_VERSION, Key
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.join import join
from replicaset.runtime.links import PeerError
from replicaset.runtime.transfer import fetch_checkpoint
from replicaset.runtime.environment import TCP

RS = "8c5e4a52-0000-4000-8000-00000000abcd"
PEER = "5f0e4a52-0000-4000-8000-0000000000bb"
GARBAGE = b"this is not a SQLite database " * 40


def chunk(data: bytes, offset: int, size: int, vclock: dict[int, int] | None = None) -> bytes:
    return encode_request(PeerRequest.CHECKPOINT_CHUNK, 1, {
        PeerKey.CHUNK: data, PeerKey.OFFSET: offset, PeerKey.SIZE: size, PeerKey.DIGEST: xxhash.xxh3_64_intdigest(data),
        Key.VCLOCK: vclock or {1: 5}})


def ending(data: bytes, vclock: dict[int, int]) -> bytes:
    return encode_ok(sync=1, schema_version=1, body={
        Key.VCLOCK: vclock, PeerKey.SIZE: len(data), PeerKey.DIGEST: xxhash.xxh3_64_intdigest(data),
        PeerKey.INSTANCE_ID: 2, PeerKey.REGISTRATION_ROW: [1, 5], PeerKey.BARRIER: vclock})


@contextmanager
def fake_peer(frames: list[bytes]) -> Iterator[str]:
    """A peer on a free port that answers one JOIN with `frames`; its address."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            conn.sendall(encode_greeting(version=GREETING_VERSION, instance_uuid=PEER, salt=b"s" * 32))
            decoder = FrameDecoder(1 << 20)
            while decoder.next_frame() is None:
                decoder.feed(conn.recv(65536))
            try:
                for frame in frames:
                    conn.sendall(frame)
                conn.shutdown(socket.SHUT_WR)  # the script is all this peer says
                while conn.recv(65536):  # until the joiner hangs up
                    pass
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
        thread.join(10)


def assert_nothing_installed(data_dir: Path) -> None:
    assert not (data_dir / "db.sqlite").exists() and not (data_dir / "instance.toml").exists()
    assert not list(data_dir.glob("*.partial"))


def test_a_chunk_announcing_size_zero_fails_the_join_over(tmp_path: Path) -> None:
    """Found while fuzzing the join: a chunk whose SIZE is 0 made the progress report divide
    by zero, and `replicaset join` died with a ZeroDivisionError instead of trying the next peer."""
    with fake_peer([chunk(b"x", 0, 0)]) as address:
        assert join(tmp_path, replicaset_uuid=RS, peers=[address], listen="127.0.0.1:3999") is None
    assert_nothing_installed(tmp_path)


def fetch(address: str, target: Path, seen: list[tuple[int, int]] | None = None) -> object:
    def progress(done: int, total: int) -> None:
        if seen is not None:
            seen.append((done, total))

    return trio.run(lambda: fetch_checkpoint(address, replicaset_uuid=RS, instance_uuid=PEER, listen="127.0.0.1:3999",
                                             target=target, progress=progress, network=TCP))


def test_a_checkpoint_that_is_not_a_database_is_not_installed(tmp_path: Path) -> None:
    target = tmp_path / "db.sqlite"
    with fake_peer([chunk(GARBAGE, 0, len(GARBAGE)), ending(GARBAGE, {1: 5})]) as address:
        with pytest.raises(PeerError, match="not one"):
            fetch(address, target)
    assert not target.exists() and list(tmp_path.iterdir()) == [], "nothing of it is kept"


def test_chunks_past_the_announced_size_are_refused_at_once(tmp_path: Path) -> None:
    target = tmp_path / "db.sqlite"
    size = 10
    seen: list[tuple[int, int]] = []
    with fake_peer([chunk(b"x" * 1000, offset, size) for offset in range(0, 5000, 1000)]) as address:
        with pytest.raises(RemoteProtocolError, match="ends past SIZE 10"):
            fetch(address, target, seen)
    assert not target.exists()
    assert all(done <= total for done, total in seen), f"written past SIZE {size}: {seen}"
