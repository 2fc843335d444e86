"""The applier task: follows one upstream for the life of the node, carrying out its
applier core's actions; rows go to the single writer."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio

from replicaset.config import Config
from replicaset.core import replication as repl
from replicaset.core.replicaset import Refusal
from replicaset.identity import Identity
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.links import REFUSALS, PeerError, PeerLink
from replicaset.runtime.writer import WriteFailed, Writer
from replicaset.storage import ApplyError, Engine, EngineFatal, GapError, SchemaPending
from wal import Record, WalError

SCHEMA_WAIT_POLL_S = 0.01


@dataclass(frozen=True, slots=True, kw_only=True)
class Upstream:
    """Whom an applier follows: a registered member (`uuid`, keyed by it, the instance
    the applier must find at `address`), or a configured address of no registered member
    yet (`uuid` None, keyed by the address)."""

    key: str
    address: str
    uuid: str | None


class ApplierHost(Protocol):
    """What an applier needs of its node: the node owns membership and the appliers."""

    config: Config
    identity: Identity
    engine: Engine
    writer: Writer
    log: Any
    appliers: dict[str, repl.Applier]
    upstream_uuids: dict[str, str]
    ignored_addresses: set[str]

    @property
    def recovering(self) -> bool: ...

    def upstreams(self) -> Mapping[str, Upstream]: ...

    def upstream_failed(self, key: str) -> None: ...

    def upstream_refused(self, key: str, refusal: Refusal) -> None: ...

    def on_upstream_change(self) -> None: ...


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


async def run_applier(node: ApplierHost, upstream: Upstream) -> None:
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


async def _follow(node: ApplierHost, core: repl.Applier, upstream: Upstream) -> None:
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


def _is_known(node: ApplierHost, uuid: str, address: str) -> bool:
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


async def _apply(node: ApplierHost, core: repl.Applier, action: repl.Action) -> list[repl.Action]:
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


def _first_unapplied(node: ApplierHost, records: list[Record]) -> tuple[int, int] | None:
    vclock = node.engine.vclock
    return next(((r.origin, r.lsn) for r in records if r.lsn > vclock.get(r.origin)), None)


def now_ms() -> int:
    return time.time_ns() // 1_000_000
