"""Replication over iproto: the relay task (serving a SUBSCRIBE), the applier task (one
per upstream peer), and both ends of JOIN (registration plus the checkpoint transfer).

The protocol decisions live in the sans-IO cores (`replicaset.core.replication`); these
tasks only move bytes, keep time, and hand rows to the single writer.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import trio
import xxhash

from replicaset.core import replication as repl
from replicaset.core.replicaset import Refusal
from replicaset.iproto.codec import (
    GREETING_SIZE,
    Frame,
    FrameDecoder,
    decode_greeting,
    encode_frame,
    encode_ok,
    encode_request,
)
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto import peer_messages
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.writer import WriteFailed
from replicaset.storage import ApplyError, EngineFatal, GapError, SchemaPending
from wal import Record, VClock, WalError, encode_record, fsync_path

if TYPE_CHECKING:
    from replicaset.runtime.node import Node, Upstream
    from replicaset.runtime.session import Session

RELAY_BATCH_ROWS = 256
FEED_QUEUE_MAX = 64
CHECKPOINT_CHUNK_BYTES = 1024 * 1024
RECEIVE_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0
SCHEMA_WAIT_POLL_S = 0.01


class PeerError(Exception):
    """A peer refused us or spoke nonsense; the message names both sides' values."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class WrongInstance(Exception):
    """Another instance answers at a member's address (it was wiped and re-joined under a
    new id, or the address moved): following it would count it as that member."""


class ApplyBroke(Exception):
    """Applying a received row broke the link; `row` is the first row not applied."""

    def __init__(self, message: str, row: tuple[int, int] | None) -> None:
        super().__init__(message)
        self.row = row


_LINK_ERRORS = (
    OSError, trio.TooSlowError, PeerError, RemoteProtocolError, WalError, trio.BrokenResourceError,
    trio.ClosedResourceError, WrongInstance, ApplyBroke, WriteFailed,
)


def record_bytes(record: Record) -> bytes:
    return encode_record(record, max_record_bytes=1 << 31)


# ---------------------------------------------------------------- the relay


@dataclass(frozen=True, slots=True)
class Synced:
    """The WAL was fsynced up to `vclock`."""

    vclock: VClock


FeedItem = list[Record] | Synced


class Feed:
    """What the writer tells one relay, in order: rows flushed, and syncs. A full queue
    means "re-read the log": items were not kept for the relay."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[FeedItem](FEED_QUEUE_MAX)
        self.overflowed = False

    def push(self, item: FeedItem) -> None:
        try:
            self.send.send_nowait(item)
        except trio.WouldBlock:
            self.overflowed = True

    def drain(self) -> None:
        self.overflowed = False
        while True:
            try:
                self.receive.receive_nowait()
            except trio.WouldBlock:
                return


@dataclass
class Downstream:
    relay: repl.Relay
    uuid: str


async def run_relay(
    node: Node, session: Session, relay: repl.Relay, feed: Feed, first: list[repl.Action]
) -> None:
    """Carry out the relay core's actions: read the log when it asks (at subscribe, and
    after it kept no rows), then follow the feed of flushes and syncs."""
    engine = node.engine
    timeout_s = node.config.replication_timeout

    async def read_log(after: VClock) -> None:
        """Rows flushed from now on reach the feed too (opened before): the relay drops
        the copies."""
        batch: list[Record] = []
        for record in engine.wal.read_from(after):
            batch.append(record)
            if len(batch) >= RELAY_BATCH_ROWS:
                await act(relay.rows(trio.current_time(), batch, engine.wal.synced_vclock))
                batch = []
        await act(relay.rows(trio.current_time(), batch, engine.wal.synced_vclock))

    async def act(actions: list[repl.Action]) -> None:
        for action in actions:
            if isinstance(action, repl.SendRows):
                body = {PeerKey.RECORDS: [record_bytes(r) for r in action.records]}
                session.send_frame(encode_request(PeerRequest.ROWS, 0, body))
            elif isinstance(action, repl.SendHeartbeat):
                session.send_frame(encode_request(PeerRequest.HEARTBEAT, 0, {Key.VCLOCK: action.vclock}))
            elif isinstance(action, repl.SyncWal):
                node.writer.request_sync()
            elif isinstance(action, repl.ReadLog):
                await read_log(VClock(action.after))
            elif isinstance(action, repl.Disconnect):
                node.log.info("relay_stopped", subscriber=relay.subscriber, reason=action.reason)
                raise _RelayStop(action.reason)
        await session.flush_outbox()

    try:
        await act(first)
        while True:
            with trio.move_on_after(timeout_s / 2) as idle:
                item = await feed.receive.receive()
            now = trio.current_time()
            if idle.cancelled_caught:
                await act(relay.tick(now, engine.vclock))
                continue
            if feed.overflowed:
                feed.drain()
                await act(relay.lost_rows(now))
                continue
            actions = relay.synced(now, item.vclock) if isinstance(item, Synced) else relay.rows(now, item, engine.wal.synced_vclock)
            # Rows the subscriber does not need (its own) are filtered out: without this
            # tick a relay busy with them would never heartbeat, and the subscriber would
            # take it for dead.
            await act(actions + relay.tick(now, engine.vclock))
    except _RelayStop:
        return


class _RelayStop(Exception):
    pass


# ---------------------------------------------------------------- the applier


# How a refusal of SUBSCRIBE travels on the wire; the core says which are final.
REFUSAL_CODES: dict[Refusal, int] = {
    Refusal.ROWS_UNAVAILABLE: ErrorCode.XLOG_GAP,
    Refusal.SPLIT_BRAIN: ErrorCode.SPLIT_BRAIN,
    Refusal.OTHER_REPLICASET: ErrorCode.REPLICASET_UUID_MISMATCH,
    Refusal.ID_MISMATCH: ErrorCode.INSTANCE_UUID_MISMATCH,
    Refusal.NOT_REGISTERED: ErrorCode.UNKNOWN_REPLICA,
}
REFUSALS: dict[int, Refusal] = {code: refusal for refusal, code in REFUSAL_CODES.items()}


class PeerLink:
    """A blocking-free iproto client connection for an applier or a join."""

    def __init__(self, stream: trio.SocketStream, max_frame_bytes: int) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(max_frame_bytes)
        self.greeting_uuid = ""
        self._sync = 0

    @classmethod
    async def open(cls, address: str, max_frame_bytes: int) -> PeerLink:
        host, _, port = address.rpartition(":")
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, int(port))
            link = cls(stream, max_frame_bytes)
            buf = b""
            while len(buf) < GREETING_SIZE:
                chunk = await stream.receive_some(GREETING_SIZE - len(buf))
                if not chunk:
                    raise PeerError(ErrorCode.NO_CONNECTION, f"{address} closed the connection during the greeting")
                buf += chunk
        link.greeting_uuid = decode_greeting(buf).instance_uuid
        return link

    async def send(self, request_type: int, body: dict[int, Any], *, replica_id: int | None = None) -> int:
        self._sync += 1
        header = {Key.REQUEST_TYPE: request_type, Key.SYNC: self._sync}
        if replica_id is not None:
            header[Key.REPLICA_ID] = replica_id
        await self.stream.send_all(encode_frame(header, body))
        return self._sync

    async def receive(self) -> Frame:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                if frame.is_error:
                    message = frame.body.get(Key.ERROR_24, "")
                    raise PeerError(frame.request_type & 0x7FFF, str(message))
                return frame
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise PeerError(ErrorCode.NO_CONNECTION, "the peer closed the connection")
            self.decoder.feed(data)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


async def run_applier(node: Node, upstream: Upstream) -> None:
    """Follow one upstream (a member by UUID, or a configured address) for the life of the
    node, reconnecting with backoff, at the member's address of the moment."""
    cfg = node.config
    key = upstream.key
    core = repl.Applier(
        peer=upstream.address,
        timeout_s=cfg.replication_timeout,
        backoff_max_s=max(cfg.replication_timeout * 8, 1.0),
        skip_conflict=cfg.replication_skip_conflict,
    )
    node.appliers[key] = core
    core.start(trio.current_time())
    while True:
        if core.state is repl.ApplierState.CONNECT:
            upstream = node.upstreams().get(key, upstream)
            core.peer = upstream.address
            try:
                await _follow(node, core, upstream)
            except _LINK_ERRORS as exc:
                reason = str(exc) or type(exc).__name__
                refusal = REFUSALS.get(exc.code) if isinstance(exc, PeerError) else None
                if refusal is not None and core.state is repl.ApplierState.AUTH:
                    core.refused(trio.current_time(), refusal, reason)
                    node.log.error("upstream_refused", peer=upstream.address, error=reason, final=refusal.final)
                    node.upstream_refused(key, refusal)
                else:
                    if core.state not in (repl.ApplierState.STOPPED, repl.ApplierState.DISCONNECTED):
                        failed_row = exc.row if isinstance(exc, ApplyBroke) else None
                        core.disconnected(trio.current_time(), reason, failed_row=failed_row)
                    if core.state is repl.ApplierState.STOPPED:
                        node.log.error("upstream_stopped", peer=upstream.address, error=core.message)
                    else:
                        node.log.info("upstream_disconnected", peer=upstream.address, reason=reason)
                    node.upstream_failed(key)
            except EngineFatal:
                raise
            except Exception as exc:  # a bug must cost this link, not the node
                node.log.error("applier_failed", peer=upstream.address, error=repr(exc), exc_info=exc)
                if core.state is not repl.ApplierState.STOPPED:
                    core.disconnected(trio.current_time(), repr(exc))
                node.upstream_failed(key)
            if core.state is repl.ApplierState.STOPPED and upstream.address in node.ignored_addresses:
                return
        await trio.sleep(cfg.replication_timeout / 2)
        core.tick(trio.current_time())


async def _follow(node: Node, core: repl.Applier, upstream: Upstream) -> None:
    address = upstream.address
    link = await PeerLink.open(address, node.config.max_frame_bytes)
    try:
        if upstream.uuid is None and _is_known(node, link.greeting_uuid, address):
            return
        if upstream.uuid is not None and link.greeting_uuid != upstream.uuid:
            raise WrongInstance(f"{address} is instance {link.greeting_uuid}, not {upstream.uuid}")
        engine = node.engine
        (subscribe,) = core.connected(trio.current_time(), engine.vclock, engine.last_txn(), include_own=node.recovering)
        assert isinstance(subscribe, repl.SendSubscribe)
        await link.send(RequestType.SUBSCRIBE, {
            Key.REPLICASET_UUID: node.identity.replicaset_uuid,
            Key.INSTANCE_UUID: node.identity.instance_uuid,
            Key.VCLOCK: subscribe.vclock,
            PeerKey.LAST_TXN: {o: list(v) for o, v in subscribe.last_txn.items()},
            PeerKey.INCLUDE_OWN: subscribe.include_own,
        }, replica_id=node.identity.instance_id)
        reply = peer_messages.subscribed(await _receive(link, core))
        if reply.instance_uuid != link.greeting_uuid:
            raise WrongInstance(f"{address} greeted as {link.greeting_uuid} and subscribed as {reply.instance_uuid}")
        core.subscribed(trio.current_time(), reply.vclock, engine.vclock)
        node.upstream_uuids[upstream.key] = reply.instance_uuid
        node.log.info("upstream_subscribed", peer=address, state=core.state.value)
        node.on_upstream_change()
        while True:
            actions: list[repl.Action] = []
            frame = await _receive(link, core)
            if frame.request_type == PeerRequest.ROWS:
                records = peer_messages.rows(frame)
                if records:
                    # Tarantool's lag: from the row's creation (its stamp) to its receipt.
                    core.lag_s = max(0.0, (now_ms() - (records[-1].txn_id >> 22)) / 1000)
                for action in core.rows_received(trio.current_time(), records):
                    actions += await _apply(node, core, action)
            elif frame.request_type == PeerRequest.HEARTBEAT:
                actions = core.heartbeat(trio.current_time(), peer_messages.heartbeat(frame), engine.vclock)
            for action in actions:
                if isinstance(action, repl.SendAck):
                    await link.send(PeerRequest.ACK, {Key.VCLOCK: action.vclock})
                elif isinstance(action, repl.Disconnect):
                    raise PeerError(ErrorCode.NO_CONNECTION, action.reason)
            node.on_upstream_change()
    finally:
        await link.aclose()


async def _receive(link: PeerLink, core: repl.Applier) -> Frame:
    """The next frame; while the peer is quiet, the core's tick decides when it is gone."""
    while True:
        with trio.move_on_after(core.timeout_s / 2):
            return await link.receive()
        for action in core.tick(trio.current_time()):
            if isinstance(action, repl.Disconnect):
                raise PeerError(ErrorCode.TIMEOUT, action.reason)


def _is_known(node: Node, uuid: str, address: str) -> bool:
    """A configured address turned out to be this instance, or a member followed by its
    UUID already: stop this applier for good."""
    if uuid == node.identity.instance_uuid:
        why = "this is the instance itself"
    elif uuid in node.appliers:
        why = f"instance {uuid} is followed at its registered address"
    else:
        return False
    node.ignored_addresses.add(address)
    node.appliers[address].ignore(trio.current_time(), why)
    return True


async def _apply(node: Node, core: repl.Applier, action: repl.Action) -> list[repl.Action]:
    assert isinstance(action, repl.ApplyRows)
    records = list(action.records)
    try:
        with trio.fail_after(repl.SILENCE_TIMEOUTS * core.timeout_s):
            while True:
                try:
                    await node.writer.apply(records, own_allowed=node.recovering, skip_conflicts=core.skip_conflict, log=node.log)
                    break
                except SchemaPending as pending:
                    # DESIGN 4.6: a data row waits for its schema, which another path brings.
                    origin, lsn = pending.schema_id
                    records = [r for r in records if r.lsn > node.engine.pending_vclock.get(r.origin)]
                    while node.engine.pending_vclock.get(origin) < lsn:
                        await trio.sleep(SCHEMA_WAIT_POLL_S)
    except trio.TooSlowError as exc:
        raise ApplyBroke("a row waited too long for its schema", _first_unapplied(node, records)) from exc
    except GapError as exc:
        raise ApplyBroke(str(exc), _first_unapplied(node, records)) from exc
    except ApplyError as exc:
        node.log.error("apply_failed", peer=core.peer, error=str(exc))
        return core.apply_failed(trio.current_time(), str(exc)) + [repl.Disconnect(peer=core.peer, reason=str(exc))]
    except (EngineFatal, WriteFailed):
        raise
    except Exception as exc:  # a bug in the apply path: this link pays, counted against the row
        node.log.error("applier_failed", peer=core.peer, error=repr(exc), exc_info=exc)
        raise ApplyBroke(repr(exc), _first_unapplied(node, records)) from exc
    return core.rows_applied(trio.current_time(), node.engine.vclock)


def _first_unapplied(node: Node, records: list[Record]) -> tuple[int, int] | None:
    vclock = node.engine.vclock
    return next(((r.origin, r.lsn) for r in records if r.lsn > vclock.get(r.origin)), None)


# ---------------------------------------------------------------- join: the joiner


@dataclass(frozen=True, slots=True, kw_only=True)
class Registration:
    """An instance's id, and an LSN of the registrar at or after its `_cluster` row: a member
    whose vclock reaches it holds the row (rows of one origin are applied in order)."""

    instance_id: int
    registrar_lsn: int


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
) -> Joined:
    """JOIN through `address`: get an id and the newest checkpoint, verified chunk by chunk
    with xxhash, into `target` (written under a temporary name, fsynced, renamed, and the
    directory fsynced: durable on return)."""
    link = await PeerLink.open(address, max_frame_bytes)
    partial = target.with_name(target.name + ".partial")
    try:
        await link.send(RequestType.JOIN, {
            Key.REPLICASET_UUID: replicaset_uuid,
            Key.INSTANCE_UUID: instance_uuid,
            PeerKey.ADDRESS: listen,
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
                end = peer_messages.joined(frame)
                if out.tell() != end.size or whole.intdigest() != end.digest:
                    raise PeerError(ErrorCode.PROTOCOL, "the checkpoint arrived incomplete or damaged")
                out.flush()
                os.fsync(out.fileno())
                os.replace(partial, target)
                fsync_path(target.parent)  # the rename is durable only once the directory is
                registration = Registration(instance_id=end.instance_id, registrar_lsn=end.registrar_lsn)
                return Joined(registration=registration, vclock=end.vclock, size_bytes=end.size)
    finally:
        partial.unlink(missing_ok=True)
        await link.aclose()


async def register_with(
    address: str, *, replicaset_uuid: str, instance_uuid: str, listen: str, max_frame_bytes: int
) -> Registration:
    """Ask the registrar at `address` for an id (a join that came through another member)."""
    link = await PeerLink.open(address, max_frame_bytes)
    try:
        await link.send(PeerRequest.REGISTER, {
            Key.REPLICASET_UUID: replicaset_uuid,
            Key.INSTANCE_UUID: instance_uuid,
            PeerKey.ADDRESS: listen,
        })
        reply = peer_messages.registered(await link.receive())
        return Registration(instance_id=reply.instance_id, registrar_lsn=reply.registrar_lsn)
    finally:
        await link.aclose()


# ---------------------------------------------------------------- join: the member serving it


async def serve_checkpoint(
    session: Session, sync: int, checkpoint: BinaryIO, vclock: VClock, registration: Registration, schema_version: int
) -> None:
    """Stream an open checkpoint file in bounded chunks, each with its xxhash, then its
    vclock and the joiner's registration."""
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
    session.send_frame(encode_ok(sync=sync, schema_version=schema_version, body={
        Key.VCLOCK: vclock.to_dict(), PeerKey.SIZE: size, PeerKey.DIGEST: whole.intdigest(),
        PeerKey.INSTANCE_ID: registration.instance_id, PeerKey.REGISTRAR_LSN: registration.registrar_lsn,
    }))
    await session.flush_outbox()


def now_ms() -> int:
    return time.time_ns() // 1_000_000
