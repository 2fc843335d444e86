"""SWIM on the server: the host of `core.swim` over UDP on the listen address (docs/design/README.md §4.8).

Theory of operation. One datagram socket, bound to the same host and port as the iproto
listener, carries pings, acks and ping-reqs between members; the core decides whom to
ping, when to suspect and what to gossip, and this host only sends what it says, feeds it
what arrives and tells it the registered members (`_cluster`) at every tick. A datagram
is one msgpack array, `[version, kind, replicaset uuid, sender, seq, target, updates]`,
at most `DATAGRAM_MAX` bytes; one that does not decode, or is of another replica set, is
dropped and counted, and the view is untouched (the core also ignores senders and news
of members `_cluster` does not hold: no datagram can add a member).

With a cluster secret every datagram travels sealed (`iproto.peer_auth`: a truncated
HMAC-SHA256 tag over the sender's stamp and the message). One whose tag is wrong is
dropped before a byte of it is decoded, counted, and logged at most once every
`REFUSED_LOG_EVERY_S`. An authentic one is still refused when its stamp is not after the
last one taken from its sender, is older than this process, or is further than
`STAMP_WINDOW_S` from our clock: a replayed datagram is not harmless (docs/security.md:
an old ack can answer a probe of a restarted member, whose sequence numbers start again
at 1; an old ping postpones a dead member's DEAD).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import msgpack
import trio

from replicaset.config import Config, dial_address
from replicaset.core import swim
from replicaset.core.swim import MemberState, SwimProtocolError
from replicaset.iproto.peer_auth import SWIM_SEAL_BYTES, SealError, swim_open, swim_seal
from replicaset.identity import Identity
from replicaset.member import Action, MemberDriver, SwimAction
from replicaset.runtime.clock import WallClock
from replicaset.runtime.environment import Environment

VERSION = 1
DATAGRAM_MAX = 1400  # under a typical MTU: a gossip message is never fragmented
KINDS = {"ping": 0, "ack": 1, "ping_req": 2}
_KIND_NAMES = {code: name for name, code in KINDS.items()}
SEQ_MAX = 2**63 - 1
MEMBERS_EVERY_S = 1.0  # how often `_cluster` is read again for the view
UNKNOWN_SENDER_READ_S = 0.1  # at most this often again when a sender is not in the view
# How far a sealed datagram's stamp may be from our wall clock: the members' clocks must
# agree within it (NTP keeps them within milliseconds), and it bounds how late a datagram
# held back by someone on the path can still be delivered.
STAMP_WINDOW_S = 10.0
REFUSED_LOG_EVERY_S = 10.0


def settings(config: Any) -> swim.SwimSettings:
    """`[cluster]` in milliseconds, as Marmot names them; the ping timeout is half a period."""
    interval_s = config["cluster.gossip_interval_ms"] / 1000
    return swim.SwimSettings(
        gossip_interval_s=interval_s,
        ping_timeout_s=interval_s / 2,
        gossip_fanout=config["cluster.gossip_fanout"],
        suspect_timeout_s=config["cluster.suspect_timeout_ms"] / 1000,
        dead_timeout_s=config["cluster.dead_timeout_ms"] / 1000,
    )


class DatagramError(ValueError):
    """A datagram that is not a SWIM message of our replica set."""


def encode(kind: str, replicaset_uuid: str, sender: int, seq: int, target: int | None,
           updates: tuple[swim.Update, ...]) -> bytes:
    return msgpack.packb([VERSION, KINDS[kind], replicaset_uuid, sender, seq, target, swim.encode_updates(updates)])


def decode(data: bytes, replicaset_uuid: str) -> tuple[str, int, int, int | None, tuple[swim.Update, ...]]:
    """`(kind, sender, seq, target, updates)`, every field checked before any is used."""
    if len(data) > DATAGRAM_MAX:
        raise DatagramError(f"{len(data)} bytes, more than {DATAGRAM_MAX}")
    try:
        message = msgpack.unpackb(data, use_list=True, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise DatagramError(f"not msgpack: {exc}") from exc
    if not isinstance(message, list) or len(message) != 7:
        raise DatagramError("not a 7-item array")
    version, kind, set_uuid, sender, seq, target, raw_updates = message
    if version != VERSION:
        raise DatagramError(f"version {version!r:.20}, expected {VERSION}")
    if set_uuid != replicaset_uuid:
        raise DatagramError(f"replica set {set_uuid!r:.40}, not ours")
    if not isinstance(kind, int) or isinstance(kind, bool) or kind not in _KIND_NAMES:
        raise DatagramError(f"kind {kind!r:.20}")
    for name, value in (("sender", sender), ("seq", seq)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= SEQ_MAX:
            raise DatagramError(f"{name} {value!r:.20}")
    name = _KIND_NAMES[kind]
    if name == "ping_req":
        if not isinstance(target, int) or isinstance(target, bool) or target < 1:
            raise DatagramError(f"target {target!r:.20}")
    elif target is not None:
        raise DatagramError(f"a {name} names no target, got {target!r:.20}")
    try:
        updates = swim.decode_updates(raw_updates)
    except SwimProtocolError as exc:
        raise DatagramError(str(exc)) from exc
    return name, sender, seq, target, updates


class StampGuard:
    """Which sealed datagrams are fresh: stamped after this process started, within
    `STAMP_WINDOW_S` of now, and after the last one taken from the same sender (a datagram
    arriving out of order is dropped, as a lost one: SWIM tolerates loss). The clock is an
    argument; one entry per sender, and only authentic datagrams name senders here."""

    def __init__(self, started_ns: int, window_s: float = STAMP_WINDOW_S) -> None:
        self._started_ns = started_ns
        self._window_ns = int(window_s * 1e9)
        self._last: dict[int, int] = {}

    def refusal(self, sender: int, stamp_ns: int, now_ns: int) -> str | None:
        """None, and the stamp taken as `sender`'s last, when the datagram is fresh; why
        not, otherwise."""
        if stamp_ns < self._started_ns:
            return "stamped before this member started: replayed from its previous run, or delayed"
        if abs(stamp_ns - now_ns) > self._window_ns:
            return f"stamp {(stamp_ns - now_ns) / 1e9:+.1f} s from our clock (more than {self._window_ns / 1e9:g} s)"
        if stamp_ns <= self._last.get(sender, 0):
            return f"not after the last datagram taken from member {sender}: replayed, or reordered"
        self._last[sender] = stamp_ns
        return None


def _address(text: str) -> tuple[str, int] | None:
    host, _, port = text.rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


class ActionsCarrier(Protocol):
    def carry_out(self, actions: Sequence[Action]) -> None: ...


class SwimNode(Protocol):
    """What SWIM needs of its member; a member declared dead goes to its quorum host."""

    config: Config
    identity: Identity
    driver: MemberDriver
    clock: WallClock
    env: Environment
    log: Any
    listen_address: str
    cluster_secret: bytes | None

    @property
    def quorum(self) -> ActionsCarrier: ...

    def members(self) -> list[tuple[int, str, str]]: ...


class SwimHost:
    """The datagram socket of the member's SWIM; the core lives in the member driver
    (`MemberDriver.swim`), which this host feeds and whose actions it carries out."""

    def __init__(self, node: SwimNode) -> None:
        self._node = node
        self.core = swim.Swim(node.identity.instance_id, node.listen_address, node.env.random(), settings(node.config))
        self._sock = node.env.network.datagrams()
        self.dropped = 0  # datagrams refused, for the console
        self.last_drop: str | None = None
        self._members_at_s = float("-inf")
        self._secret = node.cluster_secret
        self._stamps = StampGuard(node.clock.now_ns())
        self._last_stamp_ns = 0
        self.refused = 0  # of `dropped`: no valid tag, or not fresh
        self._refused_logged = 0
        self._refused_logged_s = float("-inf")

    def bind(self, host: str, port: int) -> None:
        self._sock.bind(host, port)

    def close(self) -> None:
        self._sock.close()

    async def run(self) -> None:
        tick_s = self.core.settings.ping_timeout_s / 2
        driver = self._node.driver
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._receive)
            while True:
                now = trio.current_time()
                if now - self._members_at_s >= MEMBERS_EVERY_S:
                    self._read_members(now)
                self._carry_out(driver.swim_tick(now))
                await trio.sleep(tick_s)

    def _read_members(self, now: float) -> None:
        self._members_at_s = now
        self._carry_out(self._node.driver.swim_members(now, {
            instance_id: address for instance_id, _, address in self._node.members()}))

    async def _receive(self) -> None:
        uuid = self._node.identity.replicaset_uuid
        while True:
            data, origin = await self._sock.recvfrom(DATAGRAM_MAX + SWIM_SEAL_BYTES + 1)
            stamp_ns = 0
            if self._secret is not None:
                try:
                    stamp_ns, data = swim_open(self._secret, data)
                except SealError as exc:
                    self._refuse(str(exc), origin)
                    continue
            try:
                kind, sender, seq, target, updates = decode(data, uuid)
            except DatagramError as exc:
                self.dropped += 1
                self.last_drop = str(exc)
                continue
            if self._secret is not None:
                stale = self._stamps.refusal(sender, stamp_ns, self._node.clock.now_ns())
                if stale is not None:
                    self._refuse(stale, origin)
                    continue
            now = trio.current_time()
            if self.core.state_of(sender) is None and now - self._members_at_s >= UNKNOWN_SENDER_READ_S:
                self._read_members(now)  # a member that just joined: `_cluster` may hold it already
            self._carry_out(self._node.driver.swim_received(now, kind, sender, seq, target, updates))

    def _refuse(self, reason: str, origin: Any) -> None:
        """Count a datagram that failed the secret; say so in the log at once, then at most
        once every `REFUSED_LOG_EVERY_S` with the count since: a flood of forged datagrams
        must not become a flood of log lines."""
        self.dropped += 1
        self.refused += 1
        self.last_drop = reason
        now = trio.current_time()
        if now - self._refused_logged_s >= REFUSED_LOG_EVERY_S:
            self._node.log.warning("swim_datagrams_refused", count=self.refused - self._refused_logged, reason=reason,
                                   source=f"{origin[0]}:{origin[1]}", total=self.refused)
            self._refused_logged, self._refused_logged_s = self.refused, now

    def _carry_out(self, actions: list[Action]) -> None:
        uuid, own = self._node.identity.replicaset_uuid, self.core.member
        for tagged in actions:
            if not isinstance(tagged, SwimAction):
                self._node.quorum.carry_out([tagged])  # a transaction no longer waiting for a dead member
                continue
            action = tagged.action
            if isinstance(action, swim.StateChanged):
                # A suspicion is routine under load (a busy member answers late and refutes);
                # a member declared dead is what an operator must hear of.
                log = self._node.log.warning if action.state is MemberState.DEAD else self._node.log.info
                log("member_state", member=action.member, state=action.state.value, incarnation=action.incarnation)
                continue
            if isinstance(action, swim.SendPingReq):
                data = encode("ping_req", uuid, own, action.seq, action.target, action.updates)
            else:
                data = encode("ping" if isinstance(action, swim.SendPing) else "ack", uuid, own, action.seq, None,
                              action.updates)
            self._send(data, action.address)

    def _send(self, data: bytes, address: str) -> None:
        """Fire and forget, as UDP is: a send that fails is a lost datagram, which SWIM
        tolerates by design."""
        where = _address(dial_address(self._node.config, address))
        if where is None:
            return
        if self._secret is not None:
            self._last_stamp_ns = max(self._node.clock.now_ns(), self._last_stamp_ns + 1)
            data = swim_seal(self._secret, self._last_stamp_ns, data)
        try:
            self._sock.sendto(data, where)
        except OSError:  # BlockingIOError included
            pass

    def removed(self, member: int) -> None:
        """`member`'s `_cluster` row went: REMOVED in the view, gossiped, final."""
        self._carry_out(self._node.driver.swim_removed(trio.current_time(), member))

    def stats(self) -> dict[str, Any]:
        """`box.info.swim`: the member's own incarnation, the datagrams dropped, and of
        those the ones that failed the cluster secret (`refused`)."""
        return {"incarnation": self.core.incarnation, "dropped": self.dropped, "refused": self.refused,
                "last_drop": self.last_drop}

    def info(self) -> list[dict[str, Any]]:
        """`box.info.members`."""
        now = trio.current_time()
        return [{"id": m.member, "address": m.address, "state": m.state.value, "incarnation": m.incarnation,
                 "idle": None if m.last_heard_s is None else round(now - m.last_heard_s, 3)}
                for m in self.core.view()]
