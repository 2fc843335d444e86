"""Both ends of JOIN: the joiner's registration as the member serving it reports it, and
the checkpoint transfer."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import xxhash

from replicaset.core.replicaset import PendingRegistration
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import encode_ok, encode_request
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.links import FrameSink, PeerError, PeerLink
from wal import VClock, fsync_path

CHECKPOINT_CHUNK_BYTES = 1024 * 1024


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


async def fetch_checkpoint(
    address: str,
    *,
    replicaset_uuid: str,
    instance_uuid: str,
    listen: str,
    target: Path,
    progress: Callable[[int, int], None],
    max_frame_bytes: int = 64 * 1024 * 1024,
    anonymous: bool = False,
) -> Joined:
    """JOIN through `address`: get an id and the newest checkpoint, verified chunk by chunk
    with xxhash, into `target` (written under a temporary name, fsynced, renamed, and the
    directory fsynced: durable on return). An `anonymous` follower gets no id (0) and no
    registration."""
    link = await PeerLink.open(address, max_frame_bytes)
    partial = target.with_name(target.name + ".partial")
    try:
        await link.send(RequestType.JOIN, {
            Key.REPLICASET_UUID: replicaset_uuid,
            Key.INSTANCE_UUID: instance_uuid,
            PeerKey.ADDRESS: listen,
            **({PeerKey.ANONYMOUS: True} if anonymous else {}),
        })
        whole = xxhash.xxh3_64()
        with open(partial, "wb") as out:
            while True:
                frame = await link.receive()
                if frame.request_type == PeerRequest.CHECKPOINT_CHUNK:
                    part = peer_messages.checkpoint_chunk(frame)
                    if xxhash.xxh3_64_intdigest(part.chunk) != part.digest or part.offset != out.tell():
                        raise PeerError(ErrorCode.PROTOCOL, f"checkpoint chunk at {part.offset} failed its check")
                    out.write(part.chunk)
                    whole.update(part.chunk)
                    progress(out.tell(), part.size)
                    continue
                end = peer_messages.joined(frame, anonymous=anonymous)
                if out.tell() != end.size or whole.intdigest() != end.digest:
                    raise PeerError(ErrorCode.PROTOCOL, "the checkpoint arrived incomplete or damaged")
                out.flush()
                os.fsync(out.fileno())
                os.replace(partial, target)
                fsync_path(target.parent)  # the rename is durable only once the directory is
                pending = PendingRegistration(origin=end.origin, lsn=end.lsn, barrier=end.barrier.to_dict())
                registration = Registration(instance_id=end.instance_id, pending=pending)
                return Joined(registration=registration, vclock=end.vclock, size_bytes=end.size)
    finally:
        partial.unlink(missing_ok=True)
        await link.aclose()


# ---------------------------------------------------------------- join: the member serving it


async def serve_checkpoint(
    session: FrameSink, sync: int, checkpoint: BinaryIO, vclock: VClock, registration: Registration | None,
    schema_version: int,
) -> None:
    """Stream an open checkpoint file in bounded chunks, each with its xxhash, then its
    vclock and the joiner's registration (None for an anonymous follower)."""
    size = os.fstat(checkpoint.fileno()).st_size
    whole = xxhash.xxh3_64()
    offset = 0
    while True:
        chunk = checkpoint.read(CHECKPOINT_CHUNK_BYTES)
        if not chunk:
            break
        whole.update(chunk)
        session.send_frame(encode_request(PeerRequest.CHECKPOINT_CHUNK, sync, {
            PeerKey.CHUNK: chunk, PeerKey.OFFSET: offset, PeerKey.SIZE: size,
            PeerKey.DIGEST: xxhash.xxh3_64_intdigest(chunk),
        }))
        offset += len(chunk)
        await session.flush_outbox()
    ending = {Key.VCLOCK: vclock.to_dict(), PeerKey.SIZE: size, PeerKey.DIGEST: whole.intdigest(),
              PeerKey.INSTANCE_ID: registration.instance_id if registration else 0}
    if registration is not None:
        ending[PeerKey.REGISTRATION_ROW] = [registration.pending.origin, registration.pending.lsn]
        ending[PeerKey.BARRIER] = dict(registration.pending.barrier)
    session.send_frame(encode_ok(sync=sync, schema_version=schema_version, body=ending))
    await session.flush_outbox()
