"""Both ends of JOIN: the joiner's registration as the member serving it reports it, and
the checkpoint transfer, which resumes where a broken one stopped.

Theory of operation (resuming). The joiner writes the chunks it receives to
`<target>.partial` and, after each, a line with the chunk's length and xxh3_64 to
`<target>.resume`, whose first line names the checkpoint by the vclock and size every chunk
carries. A broken link leaves both. The next fetch trusts only the chunks whose bytes still
hash to their line, in order, and cuts everything after the last one; nothing here is
fsynced, since an OS crash can then only shorten what is kept, never make it wrong. Its JOIN
carries RESUME = [vclock, size, kept bytes, xxh3_64 of them]. The member serving it starts at
that offset only when its checkpoint has that vclock and size, the offset is on its chunk grid
and its own first bytes hash to that digest; otherwise at 0, and the joiner drops what it
kept. Which member serves does not matter: the digest compares bytes, not names. At the end
the whole-file digest is checked over the file as assembled (the kept prefix re-hashed when
it was loaded), so a resumed file is installed only if it is byte for byte the file the
member sent; when it is not, the joiner drops everything kept and says so.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import xxhash

from replicaset.core.replicaset import PendingRegistration
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import encode_ok, encode_request
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.environment import Network
from replicaset.runtime.links import FrameSink, PeerError, PeerLink
from replicaset.runtime.peer_access import PeerCredentials
from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.errors import CheckpointError
from wal import VClock, fsync_path

CHECKPOINT_CHUNK_BYTES = 1024 * 1024  # the default of `checkpoint_chunk_bytes`
PARTIAL_SUFFIX = ".partial"
RESUME_SUFFIX = ".resume"
HASH_READ_BYTES = 1024 * 1024
CHUNK_LINE_BYTES_MAX = 64  # "<length hex> <digest hex>\n" is at most 34


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """An instance's id, and what the joiner waits for before it writes and votes: its
    `_cluster` row held by a majority and the barrier (`PendingRegistration`)."""

    instance_id: int
    pending: PendingRegistration


@dataclass(frozen=True)
class Joined:
    registration: Registration
    vclock: VClock
    size_bytes: int
    peer_uuid: str  # the member that served it
    registered: tuple[tuple[int, str, str], ...]  # (id, uuid, address) registered there as it ended


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferStart:
    """Where a fetch began: at `offset` of a checkpoint of `size` bytes (above 0: resumed);
    `dropped_bytes` were kept from an earlier attempt and thrown away, because the member
    served another checkpoint or found the kept prefix differs from its own."""

    offset: int
    size: int
    dropped_bytes: int
    instance_id: int | None  # the joiner's, as the member says (0: an anonymous follower)


class KeptCheckpoint:
    """The verified prefix of one checkpoint that a fetch keeps across broken links:
    `<target>.partial`, and `<target>.resume` naming the checkpoint and each kept chunk
    (the module's theory of operation)."""

    def __init__(self, target: Path) -> None:
        self.partial = target.with_name(target.name + PARTIAL_SUFFIX)
        self.sidecar = target.with_name(target.name + RESUME_SUFFIX)
        self.vclock: VClock | None = None  # of the checkpoint kept; None: nothing kept
        self.size = 0
        self.offset = 0  # bytes kept, all verified
        self.whole = xxhash.xxh3_64()  # over those bytes
        self._data: BinaryIO | None = None
        self._lines: BinaryIO | None = None

    @classmethod
    def load(cls, target: Path) -> KeptCheckpoint:
        """What an earlier fetch into `target` left that still checks out, cut to its last
        verified chunk; nothing (and neither file) when there is nothing usable."""
        kept = cls(target)
        try:
            lines = kept.sidecar.read_bytes().split(b"\n")
            with open(kept.partial, "r+b") as data:
                kept_lines = kept._verify(lines, data)
                data.truncate(kept.offset)
        except (FileNotFoundError, ValueError, KeyError, TypeError, AttributeError):
            kept.discard()
            return kept
        with open(kept.sidecar, "r+b") as sidecar:
            sidecar.truncate(kept_lines)
        return kept

    def _verify(self, lines: list[bytes], data: BinaryIO) -> int:
        """Take the header and then each chunk whose bytes hash to its line; returns the
        length of the sidecar that these lines fill. The last item of `lines` follows the
        last newline: a line being written when the link or the process died."""
        if len(lines) < 2:
            raise ValueError("no whole header line")
        header = json.loads(lines[0])
        self.vclock = VClock({int(origin): lsn for origin, lsn in header["vclock"].items()})
        self.size = header["size"]
        if not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"size {self.size!r}")
        filled = len(lines[0]) + 1
        for line in lines[1:-1]:
            try:
                length_hex, digest_hex = line.decode("ascii").split(" ")
                length, digest = int(length_hex, 16), int(digest_hex, 16)
            except ValueError:
                break
            if not 0 < length <= self.size - self.offset:
                break
            chunk = data.read(length)
            if len(chunk) != length or xxhash.xxh3_64_intdigest(chunk) != digest:
                break
            self.whole.update(chunk)
            self.offset += length
            filled += len(line) + 1
        return filled

    @property
    def resume(self) -> peer_messages.Resume | None:
        """What a JOIN asks to resume; None when nothing is kept."""
        if self.vclock is None or self.offset == 0:
            return None
        return peer_messages.Resume(vclock=self.vclock, size=self.size, offset=self.offset,
                                    digest=self.whole.intdigest())

    def names(self, vclock: VClock, size: int) -> bool:
        return self.vclock == vclock and self.size == size

    def restart(self, vclock: VClock, size: int) -> int:
        """Drop what is kept and begin the checkpoint with `vclock` and `size` from byte 0;
        returns how many bytes were dropped."""
        dropped = self.offset
        self.close()
        self.vclock, self.size, self.offset, self.whole = vclock, size, 0, xxhash.xxh3_64()
        self._data = open(self.partial, "wb")
        self._lines = open(self.sidecar, "wb")
        self._lines.write(json.dumps({"vclock": vclock.to_dict(), "size": size}).encode() + b"\n")
        return dropped

    def append(self, chunk: bytes) -> None:
        """Keep one verified chunk: its bytes first, then its line, so that a line always
        follows its bytes (a chunk whose line is missing is cut at the next load)."""
        if self._data is None:
            self._data = open(self.partial, "ab")
            self._lines = open(self.sidecar, "ab")
        assert self._lines is not None and self._data.tell() == self.offset
        self._data.write(chunk)
        self._data.flush()
        self._lines.write(b"%x %016x\n" % (len(chunk), xxhash.xxh3_64_intdigest(chunk)))
        self._lines.flush()
        self.whole.update(chunk)
        self.offset += len(chunk)

    def install(self, target: Path) -> None:
        """fsync the whole file, rename it to `target`, drop the sidecar, and fsync the
        directory: durable on return, and no sidecar comes back after an OS crash."""
        self.close()
        with open(self.partial, "rb") as data:
            os.fsync(data.fileno())
        os.replace(self.partial, target)
        self.sidecar.unlink(missing_ok=True)
        fsync_path(target.parent)  # the rename is durable only once the directory is
        self.vclock, self.offset = None, 0

    def discard(self) -> None:
        self.close()
        self.partial.unlink(missing_ok=True)
        self.sidecar.unlink(missing_ok=True)
        self.vclock, self.size, self.offset, self.whole = None, 0, 0, xxhash.xxh3_64()

    def close(self) -> None:
        for handle in (self._data, self._lines):
            if handle is not None:
                handle.close()
        self._data = self._lines = None


async def fetch_checkpoint(
    address: str,
    *,
    replicaset_uuid: str,
    instance_uuid: str,
    listen: str,
    target: Path,
    progress: Callable[[int, int], None],
    started: Callable[[TransferStart], None] = lambda start: None,
    asked: Callable[[], None] = lambda: None,
    max_frame_bytes: int = 64 * 1024 * 1024,
    anonymous: bool = False,
    secret: bytes | None = None,
    tls: ssl.SSLContext | None = None,
    network: Network,
) -> Joined:
    """JOIN through `address`: get an id and the newest checkpoint, verified chunk by chunk
    with xxhash, into `target` (written under a temporary name, fsynced, renamed, and the
    directory fsynced: durable on return). What an earlier, broken fetch into `target` kept
    is offered to the member, which sends only the rest when it serves the same checkpoint;
    `started` says where the transfer began; `asked`, that the JOIN went out, after which the
    member may have registered the joiner, whatever fails next. A broken link keeps the verified chunks for the
    next fetch; a file that fails its whole digest is dropped. An `anonymous` follower gets
    no id (0) and no registration. With the set's `secret`, the member must prove it holds
    it too before a byte is taken from it; with `tls`, the link is TLS and the member's
    certificate checked."""
    kept = KeptCheckpoint.load(target)
    link = await PeerLink.open(address, max_frame_bytes, PeerCredentials(instance_uuid=instance_uuid, secret=secret,
                                                                            tls=tls), network=network)
    try:
        resume = kept.resume
        await link.send(RequestType.JOIN, {
            Key.REPLICASET_UUID: replicaset_uuid,
            Key.INSTANCE_UUID: instance_uuid,
            PeerKey.ADDRESS: listen,
            **({PeerKey.ANONYMOUS: True} if anonymous else {}),
            **({PeerKey.RESUME: [resume.vclock.to_dict(), resume.size, resume.offset, resume.digest]}
               if resume else {}),
        })
        asked()
        begun: TransferStart | None = None
        while True:
            frame = await link.receive()
            if frame.request_type == PeerRequest.CHECKPOINT_CHUNK:
                part = peer_messages.checkpoint_chunk(frame)
                if begun is None:
                    begun = _begin(kept, part)
                    started(begun)
                if (xxhash.xxh3_64_intdigest(part.chunk) != part.digest or part.offset != kept.offset
                        or not kept.names(part.vclock, part.size)):
                    raise PeerError(ErrorCode.PROTOCOL, f"checkpoint chunk at {part.offset} failed its check")
                kept.append(part.chunk)
                progress(kept.offset, part.size)
                continue
            end = peer_messages.joined(frame, anonymous=anonymous)
            if begun is None:  # the member found every byte already kept
                begun = TransferStart(offset=kept.offset, size=kept.size, dropped_bytes=0, instance_id=end.instance_id)
                started(begun)
            if not kept.names(end.vclock, end.size) or kept.offset != end.size or kept.whole.intdigest() != end.digest:
                kept.discard()
                how = f"resumed at byte {begun.offset}" if begun.offset else "sent whole"
                raise PeerError(ErrorCode.PROTOCOL, f"the checkpoint ({how}) arrived incomplete or damaged: its size "
                                                    "or whole-file digest does not match; discarded, the next attempt "
                                                    "starts from byte 0")
            kept.close()
            try:  # the digests say the bytes are the member's; this says they are a checkpoint
                held = checkpoints.vclock_of(kept.partial)
            except CheckpointError as exc:
                kept.discard()
                raise PeerError(ErrorCode.PROTOCOL, f"the checkpoint sent is not one: {exc}; discarded") from exc
            if held != end.vclock:
                kept.discard()
                raise PeerError(ErrorCode.PROTOCOL, f"the checkpoint sent holds vclock {held.to_dict()}, not the "
                                                    f"{end.vclock.to_dict()} announced; discarded")
            kept.install(target)
            pending = PendingRegistration(origin=end.origin, lsn=end.lsn, barrier=end.barrier.to_dict())
            registration = Registration(instance_id=end.instance_id, pending=pending)
            return Joined(registration=registration, vclock=end.vclock, size_bytes=end.size,
                          peer_uuid=link.greeting_uuid, registered=end.registered)
    finally:
        kept.close()
        await link.aclose()


def _begin(kept: KeptCheckpoint, first: peer_messages.CheckpointChunk) -> TransferStart:
    """The first chunk says where the member began: at 0 (what was kept goes), or where
    the kept prefix ends, for the checkpoint it names."""
    if first.offset == 0:
        return TransferStart(offset=0, size=first.size, dropped_bytes=kept.restart(first.vclock, first.size),
                             instance_id=first.instance_id)
    if first.offset == kept.offset and kept.names(first.vclock, first.size):
        return TransferStart(offset=first.offset, size=first.size, dropped_bytes=0, instance_id=first.instance_id)
    raise PeerError(ErrorCode.PROTOCOL, f"the checkpoint transfer began at byte {first.offset} of checkpoint "
                                        f"{first.vclock.to_dict()} ({first.size} bytes); kept: {kept.offset} bytes "
                                        f"of {kept.vclock.to_dict() if kept.vclock else None}")


# ---------------------------------------------------------------- join: the member serving it


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeStart:
    """Where serving a checkpoint begins: `offset`, with `prefix` the xxh3_64 state over the
    bytes before it (the whole-file digest at the end covers them); `refusal` says why a
    joiner's RESUME was not honoured, empty when it was or there was none."""

    offset: int = 0
    prefix: xxhash.xxh3_64 = field(default_factory=xxhash.xxh3_64)
    refusal: str = ""


def resume_start(checkpoint: BinaryIO, vclock: VClock, resume: peer_messages.Resume | None,
                 chunk_bytes: int) -> ServeStart:
    """Where to serve `checkpoint` from for a joiner that kept `resume`: where its prefix
    ends when it is a prefix of this very file (same vclock and size, an offset on our chunk
    grid, the same digest over our first bytes), else 0. It reads up to the whole file:
    call it in a thread."""
    if resume is None:
        return ServeStart()
    size = os.fstat(checkpoint.fileno()).st_size
    if resume.vclock != vclock or resume.size != size:
        return ServeStart(refusal=f"the joiner kept part of checkpoint {resume.vclock.to_dict()} of {resume.size} "
                                  f"bytes; this member serves {vclock.to_dict()} of {size} bytes")
    if resume.offset % chunk_bytes and resume.offset != size:
        return ServeStart(refusal=f"offset {resume.offset} is not a multiple of the chunk size {chunk_bytes}")
    prefix = xxhash.xxh3_64()
    position = 0
    while position < resume.offset:
        data = os.pread(checkpoint.fileno(), min(HASH_READ_BYTES, resume.offset - position), position)
        if not data:
            break
        prefix.update(data)
        position += len(data)
    if position != resume.offset or prefix.intdigest() != resume.digest:
        return ServeStart(refusal=f"the joiner's first {resume.offset} bytes differ from this member's checkpoint")
    return ServeStart(offset=resume.offset, prefix=prefix)


async def serve_checkpoint(
    session: FrameSink, sync: int, checkpoint: BinaryIO, vclock: VClock, registration: Registration | None,
    schema_version: int, *, start: ServeStart | None = None, chunk_bytes: int = CHECKPOINT_CHUNK_BYTES,
    registered: Callable[[], list[tuple[int, str, str]]] = list,
) -> None:
    """Stream an open checkpoint file from `start` (0 by default) in bounded chunks, each
    with its xxhash, the checkpoint's vclock and size (which name it for a later RESUME) and
    the joiner's id (which its log lines carry from the first chunk on), then the whole
    file's digest, its vclock and the joiner's registration (None for an anonymous
    follower, whose id is 0) with the members `registered` here as the transfer ends: the
    checkpoint's `_cluster` may name none of those still running."""
    start = start or ServeStart()
    size = os.fstat(checkpoint.fileno()).st_size
    whole = start.prefix.copy()
    offset = start.offset
    checkpoint.seek(offset)
    while True:
        chunk = checkpoint.read(chunk_bytes)
        if not chunk:
            break
        whole.update(chunk)
        session.send_frame(encode_request(PeerRequest.CHECKPOINT_CHUNK, sync, {
            PeerKey.CHUNK: chunk, PeerKey.OFFSET: offset, PeerKey.SIZE: size,
            PeerKey.DIGEST: xxhash.xxh3_64_intdigest(chunk), Key.VCLOCK: vclock.to_dict(),
            PeerKey.INSTANCE_ID: registration.instance_id if registration else 0,
        }))
        offset += len(chunk)
        await session.flush_outbox()
    ending = {Key.VCLOCK: vclock.to_dict(), PeerKey.SIZE: size, PeerKey.DIGEST: whole.intdigest(),
              PeerKey.INSTANCE_ID: registration.instance_id if registration else 0}
    if registration is not None:
        ending[PeerKey.REGISTRATION_ROW] = [registration.pending.origin, registration.pending.lsn]
        ending[PeerKey.BARRIER] = dict(registration.pending.barrier)
        ending[PeerKey.REGISTERED] = [list(member) for member in registered()]
    session.send_frame(encode_ok(sync=sync, schema_version=schema_version, body=ending))
    await session.flush_outbox()
