"""The applier task: follows one upstream for the life of the node, feeding the member
driver its applier's events and carrying out the actions; rows go to the single writer."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

import trio

from replicaset.config import Config, dial_address
from replicaset.core import replication as repl
from replicaset.identity import Identity
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.member import Action, ApplierAction, MemberDriver
from replicaset.runtime import removal as removals
from replicaset.runtime.clock import WallClock, now_ms
from replicaset.runtime.environment import Environment
from replicaset.runtime.links import REFUSALS, PeerError, PeerLink
from replicaset.runtime.peer_access import PeerCredentials
from replicaset.runtime.writer import WriteFailed, Writer
from replicaset.storage import ApplyError, Engine, EngineFatal, GapError, SchemaPending
from wal import Record, WalError


@dataclass(frozen=True, slots=True, kw_only=True)
class Upstream:
    """Whom an applier follows: a registered member (`uuid`, keyed by it, the instance
    the applier must find at `address`), or a configured address of no registered member
    yet (`uuid` None, keyed by the address)."""

    key: str
    address: str
    uuid: str | None


class ApplierHost(Protocol):
    """What an applier needs of its node: the node owns membership and the member driver."""

    config: Config
    identity: Identity
    engine: Engine
    writer: Writer
    log: Any
    driver: MemberDriver
    upstream_uuids: dict[str, str]
    ignored_addresses: set[str]
    peer_credentials: PeerCredentials
    links_open: dict[str, trio.Event]
    clock: WallClock
    env: Environment
    vclock_advanced: trio.Event

    def upstreams(self) -> Mapping[str, Upstream]: ...

    def carry_out(self, actions: Sequence[Action]) -> None: ...


class WrongInstance(Exception):
    """Another instance answers at a member's address (it was wiped and re-joined under a
    new id, or the address moved): following it would count it as that member."""


class ApplyBroke(Exception):
    """Applying received rows broke the link; `records` are the rows of that apply."""

    def __init__(self, message: str, records: Sequence[Record]) -> None:
        super().__init__(message)
        self.records = records


_LINK_ERRORS = (
    OSError, trio.TooSlowError, PeerError, RemoteProtocolError, WalError, trio.BrokenResourceError,
    trio.ClosedResourceError, WrongInstance, ApplyBroke, WriteFailed,
)


async def run_applier(node: ApplierHost, upstream: Upstream) -> None:
    """Follow one upstream (a member by UUID, or a configured address) for the life of the
    node, reconnecting when the driver's applier says so, at the member's address of the
    moment. After a link is lost the applier's actions need nothing more: the link is
    closed already."""
    driver, key = node.driver, upstream.key
    driver.applier_start(key, trio.current_time(), peer=upstream.address)
    applier = driver.appliers[key]  # read for its state only: the driver moves it
    while True:
        if applier.state is repl.ApplierState.CONNECT:
            upstream = node.upstreams().get(key, upstream)
            driver.applier_moved(key, upstream.address)
            closed = node.links_open[key] = trio.Event()
            try:
                await _follow(node, upstream)
            except _LINK_ERRORS as exc:
                reason = str(exc) or type(exc).__name__
                refusal = REFUSALS.get(exc.code) if isinstance(exc, PeerError) else None
                if refusal is not None and applier.state is repl.ApplierState.AUTH:
                    assert isinstance(exc, PeerError)
                    removal = removals.from_fields(exc.fields, node.identity.instance_uuid)
                    actions = driver.applier_refused(key, trio.current_time(), refusal, reason, removal)
                    # Not final (a joiner whose row has not reached this peer yet): it asks again.
                    log = node.log.error if refusal.final else node.log.warning
                    log("upstream_refused", peer=upstream.address, error=reason, final=refusal.final)
                else:
                    unapplied = exc.records if isinstance(exc, ApplyBroke) else ()
                    actions = driver.applier_link_lost(key, trio.current_time(), reason, unapplied=unapplied)
                    if applier.state is repl.ApplierState.STOPPED:
                        node.log.error("upstream_stopped", peer=upstream.address, error=applier.message)
                    else:
                        node.log.info("upstream_disconnected", peer=upstream.address, reason=reason)
                node.carry_out(actions)
            except EngineFatal:
                raise
            except Exception as exc:  # a bug must cost this link, not the node
                node.log.error("applier_failed", peer=upstream.address, error=repr(exc), exc_info=exc)
                node.carry_out(driver.applier_link_lost(key, trio.current_time(), repr(exc)))
            finally:  # every row the link brought is applied: a removal waits for this (`Node._stop_following`)
                if node.links_open.get(key) is closed:
                    del node.links_open[key]
                closed.set()
            if applier.state is repl.ApplierState.STOPPED and upstream.address in node.ignored_addresses:
                return
        if applier.state is repl.ApplierState.STOPPED and key not in node.upstreams():
            return  # removed from the set (`box.remove`): followed no more
        await trio.sleep(node.config.replication_timeout / 2)
        driver.applier_tick(key, trio.current_time())


async def _follow(node: ApplierHost, upstream: Upstream) -> None:
    driver, key, address = node.driver, upstream.key, upstream.address
    link = await PeerLink.open(dial_address(node.config, address), node.config.max_frame_bytes, node.peer_credentials,
                               network=node.env.network)
    try:
        if upstream.uuid is None and _is_known(node, key, link.greeting_uuid, address):
            return
        if upstream.uuid is not None and link.greeting_uuid != upstream.uuid:
            raise WrongInstance(f"{address} is instance {link.greeting_uuid}, not {upstream.uuid}")
        (subscribe,) = driver.applier_connected(key, trio.current_time())
        assert isinstance(subscribe, ApplierAction) and isinstance(subscribe.action, repl.SendSubscribe)
        await link.send(RequestType.SUBSCRIBE, {
            Key.REPLICASET_UUID: node.identity.replicaset_uuid,
            Key.INSTANCE_UUID: node.identity.instance_uuid,
            Key.VCLOCK: subscribe.action.vclock,
            PeerKey.LAST_TXN: {o: list(v) for o, v in subscribe.action.last_txn.items()},
            PeerKey.INCLUDE_OWN: subscribe.action.include_own,
            **({PeerKey.ANONYMOUS: True} if node.identity.anonymous else {}),
        }, replica_id=None if node.identity.anonymous else node.identity.instance_id)
        reply = peer_messages.subscribed(await _receive(link, driver, key))
        if reply.instance_uuid != link.greeting_uuid:
            raise WrongInstance(f"{address} greeted as {link.greeting_uuid} and subscribed as {reply.instance_uuid}")
        node.upstream_uuids[key] = reply.instance_uuid
        actions = driver.applier_subscribed(key, trio.current_time(), reply.vclock)
        node.log.info("upstream_subscribed", peer=address, state=driver.appliers[key].state.value)
        await _carry_out(node, link, actions)
        while True:
            # Every frame already received is taken in this turn, and the rows of those in
            # a row applied in one writer turn: an applier behind its relay (a loaded
            # machine) catches up in larger batches, not one flush per frame as it fell behind.
            frames = [await _receive(link, driver, key), *link.received()]
            actions: list[Action] = []
            rows: list[repl.ApplyRows] = []
            for frame in frames:
                if driver.appliers[key].state is repl.ApplierState.STOPPED:
                    raise PeerError(ErrorCode.NO_CONNECTION, driver.appliers[key].message or "stopped")
                if frame.request_type == PeerRequest.ROWS:
                    for tagged in driver.applier_rows(key, trio.current_time(), peer_messages.rows(frame),
                                                      wall_ms=now_ms(node.clock)):
                        assert isinstance(tagged, ApplierAction) and isinstance(tagged.action, repl.ApplyRows)
                        rows.append(tagged.action)
                elif frame.request_type == PeerRequest.HEARTBEAT:
                    actions += await _apply_all(node, key, rows)
                    rows = []
                    actions += driver.applier_heartbeat(key, trio.current_time(), peer_messages.heartbeat(frame))
            actions += await _apply_all(node, key, rows)
            await _carry_out(node, link, actions)
    finally:
        await link.aclose()


async def _apply_all(node: ApplierHost, key: str, rows: list[repl.ApplyRows]) -> list[Action]:
    """The rows of consecutive ApplyRows actions alike but for their records, applied as one."""
    actions: list[Action] = []
    for _, run in itertools.groupby(rows, key=lambda action: (action.own_allowed, action.skip_conflicts)):
        alike = list(run)
        actions += await _apply(node, key, replace(alike[0], records=tuple(r for a in alike for r in a.records)))
    return actions


async def _carry_out(node: ApplierHost, link: PeerLink, actions: list[Action]) -> None:
    """An applier's actions on its link, in the driver's order; the replica set's to the node."""
    for tagged in actions:
        if not isinstance(tagged, ApplierAction):
            node.carry_out([tagged])
        elif isinstance(tagged.action, repl.SendAck):
            await link.send(PeerRequest.ACK, {Key.VCLOCK: tagged.action.vclock})
        elif isinstance(tagged.action, repl.Disconnect):
            raise PeerError(ErrorCode.NO_CONNECTION, tagged.action.reason)


async def _receive(link: PeerLink, driver: MemberDriver, key: str) -> Frame:
    """The next frame; while the peer is quiet, the applier's tick decides when it is gone."""
    timeout_s = driver.appliers[key].timeout_s
    while True:
        with trio.move_on_after(timeout_s / 2):
            return await link.receive()
        if driver.appliers[key].state is repl.ApplierState.STOPPED:  # removed while its upstream is quiet
            raise PeerError(ErrorCode.NO_CONNECTION, driver.appliers[key].message or "stopped")
        for tagged in driver.applier_tick(key, trio.current_time()):
            if isinstance(tagged, ApplierAction) and isinstance(tagged.action, repl.Disconnect):
                raise PeerError(ErrorCode.TIMEOUT, tagged.action.reason)


def _is_known(node: ApplierHost, key: str, uuid: str, address: str) -> bool:
    """A configured address turned out to be this instance, or a member followed by its
    UUID already: stop this applier for good."""
    if uuid == node.identity.instance_uuid:
        why = "this is the instance itself"
    elif uuid in node.driver.appliers:
        why = f"instance {uuid} is followed at its registered address"
    else:
        return False
    node.ignored_addresses.add(address)
    node.driver.applier_ignored(key, trio.current_time(), why)
    return True


async def _apply(node: ApplierHost, key: str, action: repl.ApplyRows) -> list[Action]:
    """Rows to the writer; a row whose schema is not here yet waits in the applier core,
    which hands the rows back once it is (or breaks the link): this task looks again at
    every flush and at the core's deadline, reading nothing more from its link."""
    driver = node.driver
    records = action.records
    took = partial(driver.applier_took, key, trio.current_time()) if driver.tracing else None
    while True:
        try:
            await node.writer.apply(records, own_allowed=action.own_allowed, skip_conflicts=action.skip_conflicts,
                                    log=node.log, took=took)
            return driver.applier_applied(key, trio.current_time())
        except SchemaPending as pending:
            node.log.info("apply_waits_for_schema", peer=action.peer, schema=list(pending.schema_id))
            driver.applier_schema_pending(key, trio.current_time(), pending.schema_id, records,
                                          own_allowed=action.own_allowed)
            released = await _schema_wait(node, key)
            if released is None:
                return driver.applier_applied(key, trio.current_time())
            records = released.records
        except GapError as exc:
            raise ApplyBroke(str(exc), records) from exc
        except ApplyError as exc:
            node.log.error("apply_failed", peer=action.peer, error=str(exc))
            return driver.applier_apply_failed(key, trio.current_time(), str(exc))
        except (EngineFatal, WriteFailed):
            raise
        except Exception as exc:  # a bug in the apply path: this link pays, counted against the row
            node.log.error("applier_failed", peer=action.peer, error=repr(exc), exc_info=exc)
            raise ApplyBroke(repr(exc), records) from exc


async def _schema_wait(node: ApplierHost, key: str) -> repl.ApplyRows | None:
    """Until the applier core lets its waiting rows go (None: they all came another way)
    or breaks the link."""
    driver = node.driver
    while True:
        for tagged in driver.applier_schema_check(key, trio.current_time()):
            assert isinstance(tagged, ApplierAction)
            if isinstance(tagged.action, repl.Disconnect):
                raise PeerError(ErrorCode.TIMEOUT, tagged.action.reason)
            assert isinstance(tagged.action, repl.ApplyRows)
            return tagged.action
        waiting = driver.appliers[key].waiting
        if waiting is None:
            return None
        with trio.move_on_at(waiting.deadline_s):  # a schema arrives by a flush, as every row does
            await node.vclock_advanced.wait()
