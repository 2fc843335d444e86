"""A checkpoint transfer that breaks resumes after its last verified chunk, only from the
same checkpoint, and installs exactly the member's file (docs/design/anti-entropy.md).

The member here is `serve_checkpoint` behind a fake session on 127.0.0.1 that can cut the
link after some chunks; the joiner is the real `fetch_checkpoint`."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import apsw
import pytest
import trio
import xxhash

from replicaset.core.replicaset import PendingRegistration
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import FrameDecoder, encode_greeting
from replicaset.iproto.constants import GREETING_VERSION
from replicaset.iproto.peer import PeerRequest
from replicaset.runtime.environment import TCP
from replicaset.runtime.links import PeerError
from replicaset.runtime.transfer import (
    KeptCheckpoint, Registration, ServeStart, TransferStart, fetch_checkpoint, resume_start, serve_checkpoint,
)
from wal import VClock

CHUNK = 4096
RS = str(uuid.uuid4())
JOINER = str(uuid.uuid4())
REGISTRATION = Registration(instance_id=2, pending=PendingRegistration(origin=1, lsn=3, barrier={1: 3}))
WAIT_S = 10.0


@dataclass
class Member:
    """One checkpoint served by `serve_checkpoint`; `cut_after` chunks then the link drops
    (None: never). It checks a RESUME as a member does, unless `start_at` makes it begin
    there whatever the joiner kept."""

    data: bytes
    vclock: VClock
    path: Path
    cut_after: int | None = None
    start_at: int | None = None
    served: list[int] = field(default_factory=list)  # offsets of the chunks sent, over all JOINs
    starts: list[ServeStart] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.path.write_bytes(self.data)

    async def serve(self, stream: trio.SocketStream) -> None:
        await stream.send_all(encode_greeting(version=GREETING_VERSION, instance_uuid=str(uuid.uuid4()),
                                              salt=bytes(32)))
        decoder = FrameDecoder(1 << 20)
        while (frame := decoder.next_frame()) is None:
            decoder.feed(await stream.receive_some(65536))
        hello = peer_messages.hello(frame, "JOIN")
        with open(self.path, "rb") as checkpoint:
            if self.start_at is None:
                start = resume_start(checkpoint, self.vclock, hello.resume, CHUNK)
            else:
                start = ServeStart(offset=self.start_at, prefix=xxhash.xxh3_64(self.data[:self.start_at]))
            self.starts.append(start)
            try:
                await serve_checkpoint(_Sink(stream, self), frame.sync, checkpoint, self.vclock, REGISTRATION, 1,
                                       start=start, chunk_bytes=CHUNK)
            except _Cut:
                pass
        await stream.aclose()


class _Cut(Exception):
    pass


class _Sink:
    def __init__(self, stream: trio.SocketStream, member: Member) -> None:
        self.stream, self.member, self.out, self.sent = stream, member, b"", 0

    def send_frame(self, data: bytes) -> None:
        self.out += data

    async def flush_outbox(self) -> None:
        decoder = FrameDecoder(1 << 20)
        decoder.feed(self.out)
        while (frame := decoder.next_frame()) is not None:
            if frame.request_type == PeerRequest.CHECKPOINT_CHUNK:
                if self.member.cut_after is not None and self.sent == self.member.cut_after:
                    raise _Cut
                self.sent += 1
                self.member.served.append(peer_messages.checkpoint_chunk(frame).offset)
        await self.stream.send_all(self.out)
        self.out = b""


def fetch(member: Member, target: Path) -> tuple[object, list[TransferStart]]:
    """One JOIN of `member` into `target`: the outcome (Joined, or the exception) and
    where the transfer said it began."""
    began: list[TransferStart] = []

    async def main() -> object:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(partial(trio.serve_tcp, member.serve, 0, host="127.0.0.1"))
                port = listeners[0].socket.getsockname()[1]
                try:
                    return await fetch_checkpoint(
                        f"127.0.0.1:{port}", replicaset_uuid=RS, instance_uuid=JOINER, listen="127.0.0.1:1",
                        target=target, progress=lambda done, total: None, started=began.append, network=TCP)
                except PeerError as exc:
                    return exc
                finally:
                    nursery.cancel_scope.cancel()

    return trio.run(main), began


def checkpoint_bytes(size: int, seed: int, vclock: dict[int, int] | None = None) -> bytes:
    """A database holding `vclock` (what the joiner checks before it installs), filled with
    random bytes of `seed` up to `size` (whole pages, then a tail SQLite does not read)."""
    path = Path(tempfile.mkdtemp(prefix="checkpoint-")) / "c.sqlite"
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA page_size = 4096; PRAGMA journal_mode = DELETE")
    conn.execute("CREATE TABLE _rs_vclock(origin INTEGER PRIMARY KEY, lsn INTEGER NOT NULL)")
    conn.executemany("INSERT INTO _rs_vclock VALUES (?, ?)", list((vclock or {1: 5}).items()))
    conn.execute("CREATE TABLE pad(b BLOB)")
    rng = random.Random(seed)
    while path.stat().st_size + 4096 <= size:
        conn.execute("INSERT INTO pad VALUES (?)", (rng.randbytes(3000),))
    conn.close()
    data = path.read_bytes()
    shutil.rmtree(path.parent)
    return data + rng.randbytes(size - len(data))


SIZE = 10 * CHUNK + 123


@pytest.fixture
def target(tmp_path: Path) -> Path:
    (tmp_path / "joiner").mkdir()
    return tmp_path / "joiner" / "db.sqlite"


def leftovers(target: Path) -> list[str]:
    return sorted(p.name for p in target.parent.iterdir())


def test_a_broken_transfer_resumes_after_its_last_chunk_and_installs_the_same_file(tmp_path: Path, target: Path):
    data = checkpoint_bytes(SIZE, 1)
    member = Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=3)
    broken, began = fetch(member, target)
    assert isinstance(broken, PeerError), broken
    assert began == [TransferStart(offset=0, size=SIZE, dropped_bytes=0, instance_id=2)]
    assert leftovers(target) == ["db.sqlite.partial", "db.sqlite.resume"]
    assert KeptCheckpoint.load(target).offset == 3 * CHUNK

    member.cut_after, member.served = None, []
    joined, began = fetch(member, target)
    assert began == [TransferStart(offset=3 * CHUNK, size=SIZE, dropped_bytes=0, instance_id=2)]
    assert member.served == list(range(3 * CHUNK, SIZE, CHUNK)), "only the remaining chunks went"
    assert target.read_bytes() == data
    assert joined.vclock == VClock({1: 5}) and joined.registration == REGISTRATION
    assert leftovers(target) == ["db.sqlite"]


def test_a_torn_last_chunk_is_cut_and_asked_for_again(tmp_path: Path, target: Path):
    """The process died between a chunk's bytes and its line, or in the middle of a write:
    only whole chunks with their lines are kept."""
    data = checkpoint_bytes(SIZE, 2)
    member = Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=4)
    fetch(member, target)
    kept = KeptCheckpoint(target)
    with open(kept.partial, "ab") as partial:
        partial.write(data[4 * CHUNK:4 * CHUNK + 1000])  # bytes without a line
    lines = kept.sidecar.read_bytes()
    kept.sidecar.write_bytes(lines[:-5])  # the fourth chunk's line torn
    assert KeptCheckpoint.load(target).offset == 3 * CHUNK
    assert os.path.getsize(kept.partial) == 3 * CHUNK

    member.cut_after, member.served = None, []
    fetch(member, target)
    assert member.served[0] == 3 * CHUNK
    assert target.read_bytes() == data


def test_a_damaged_kept_chunk_is_found_and_everything_from_it_asked_for_again(tmp_path: Path, target: Path):
    data = checkpoint_bytes(SIZE, 3)
    member = Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=6)
    fetch(member, target)
    with open(target.with_name("db.sqlite.partial"), "r+b") as partial:
        partial.seek(2 * CHUNK + 17)
        partial.write(b"\xff" if data[2 * CHUNK + 17] != 0xFF else b"\x00")
    assert KeptCheckpoint.load(target).offset == 2 * CHUNK

    member.cut_after, member.served = None, []
    fetch(member, target)
    assert member.served[0] == 2 * CHUNK
    assert target.read_bytes() == data


def test_another_checkpoint_is_sent_from_byte_0_and_the_kept_prefix_dropped(tmp_path: Path, target: Path):
    """Another member, or a newer checkpoint: another vclock, or the same vclock and size
    with other bytes (two members' `VACUUM INTO` copies need not be equal), or the same
    bytes with the prefix cut off the grid of this member's chunks."""
    data = checkpoint_bytes(SIZE, 4)
    cases = [
        (Member(checkpoint_bytes(SIZE, 5, {1: 6}), VClock({1: 6}), tmp_path / "other.snap"), "the joiner kept part of checkpoint {1: 5}"),
        (Member(checkpoint_bytes(SIZE, 6), VClock({1: 5}), tmp_path / "same-vclock.snap"), "first 12288 bytes differ"),
    ]
    for other, why in cases:
        fetch(Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=3), target)
        joined, began = fetch(other, target)
        assert began == [TransferStart(offset=0, size=SIZE, dropped_bytes=3 * CHUNK, instance_id=2)]
        assert why in other.starts[-1].refusal
        assert other.served[0] == 0 and target.read_bytes() == other.data
        assert joined.vclock == other.vclock
        target.unlink()


def test_an_offset_off_the_members_chunk_grid_or_past_its_file_starts_from_0(tmp_path: Path):
    data = checkpoint_bytes(SIZE, 7)
    (tmp_path / "m.snap").write_bytes(data)
    vclock = VClock({1: 5})

    def start(offset: int, size: int = SIZE) -> ServeStart:
        resume = peer_messages.Resume(vclock=vclock, size=size, offset=offset,
                                      digest=xxhash.xxh3_64_intdigest(data[:offset]))
        with open(tmp_path / "m.snap", "rb") as checkpoint:
            return resume_start(checkpoint, vclock, resume, CHUNK)

    assert start(2 * CHUNK).offset == 2 * CHUNK
    assert start(SIZE).offset == SIZE, "all of it kept: only the end is sent"
    unaligned = start(2 * CHUNK + 1)
    assert unaligned.offset == 0 and "not a multiple of the chunk size 4096" in unaligned.refusal
    assert start(2 * CHUNK, size=SIZE + 1).offset == 0


def test_a_resumed_file_that_fails_its_whole_digest_is_dropped_entirely(tmp_path: Path, target: Path):
    """A member that resumes without checking the prefix (or a collision): the whole-file
    digest, over the kept prefix and the rest, catches it, and nothing is kept."""
    data = checkpoint_bytes(SIZE, 8)
    fetch(Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=3), target)
    liar = Member(data[:CHUNK] + random.Random(9).randbytes(CHUNK) + data[2 * CHUNK:], VClock({1: 5}),
                  tmp_path / "liar.snap", start_at=3 * CHUNK)
    failed, began = fetch(liar, target)
    assert began == [TransferStart(offset=3 * CHUNK, size=SIZE, dropped_bytes=0, instance_id=2)]
    assert isinstance(failed, PeerError)
    assert "resumed at byte 12288" in str(failed) and "discarded, the next attempt starts from byte 0" in str(failed)
    assert leftovers(target) == []


def test_a_member_that_begins_where_nothing_was_kept_is_refused(tmp_path: Path, target: Path):
    data = checkpoint_bytes(SIZE, 10)
    fetch(Member(data, VClock({1: 5}), tmp_path / "m.snap", cut_after=3), target)
    (tmp_path / "joiner" / "db.sqlite.resume").unlink()
    liar = Member(data, VClock({1: 5}), tmp_path / "liar.snap", start_at=3 * CHUNK)
    failed, began = fetch(liar, target)
    assert isinstance(failed, PeerError) and not began
    assert "began at byte 12288 of checkpoint {1: 5}" in str(failed) and "kept: 0 bytes" in str(failed)
    assert leftovers(target) == []
