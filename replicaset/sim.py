"""Deterministic simulation of a replica set: real engines, the replication cores, a fake
network and crashes, all driven from one seed in virtual time (TigerBeetle's VOPR).

Each member has a real `Engine` in its own directory, one `Applier` per peer and one
`Relay` per subscriber connection. Links are FIFO connections, as TCP is; the seed decides
delays (so rows from different peers interleave in every order), cut connections, whole
partitions, duplicated and reordered deliveries (which the apply-once check must absorb
and a gap must turn into a resubscribe), process crashes and OS crashes that lose the
WAL bytes written since the member's last sync point. Relays ship only rows behind the sync
point when they are of the relaying member's own origin, as the runtime does (FINDINGS
F1): a member syncs before it relays its own rows and before a relay reads its log. After the fault phase the network
heals, crashed members restart, and the run must converge: equal vclocks, one payload per
`(origin, lsn)` everywhere and each one a client was acknowledged for, every acknowledged
durable write held byte-for-byte, and on every member the tables, versions and latent
images that the reference model of last-writer-wins (`replicaset.testing.lww`) computes.

Under `wal_mode = "fsync"` every flush is durable: an OS crash loses nothing and a
restarted member takes writes at once. Under `"write"` a restarted member first fetches
the rows of its own origin from every peer (DESIGN 4.4).

The run can write a trace: one dict per step, named and parameterised as the actions of
`specs/VClockReplication.tla`, which `specs/check_trace.py` checks against the spec. The
first dict (`"event": "Init"`) gives the constants, the last (`"event": "End"`, written once
the run converged) the number of steps between them. A row's changes are traced as
`[key, value id]` (`_value_id`: a digest of the image the row wrote; None for a delete),
with its HLC stamp at `LocalWrite`, and after every flush and restart the member's table
is traced as `{key: [value id, stamp, origin]}` as it holds it, so TLC compares the values
and versions it holds with the spec's last-writer-wins. A row applied from a peer is traced as
`RelaySend` then `ApplierReceive` at the moment it is applied: links are TCP-like, so a
crash of the sender cuts them and drops what was in flight, and an applied row is still in
the sender's WAL, as the spec's `RelaySend` requires.
"""

from __future__ import annotations

import heapq
import itertools
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack

from replicaset.core import replication as repl
from replicaset.core.replicaset import (
    Phase,
    RecoveryDone,
    RecoveryGaveUp,
    Refusal,
    ReplicaSet,
    View,
    must_recover,
)
from replicaset.storage import ApplyError, Engine, EngineConfig, GapError
from replicaset.storage.engine import Committed
from replicaset.storage.rows import DdlPayload, DmlPayload, Op
from replicaset.testing import lww
from wal import Record, RecordType, VClock, WalMode
from wal.segment import list_segments

TIMEOUT_S = 0.1
TICK_S = 0.05
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Faults:
    """Every fault the simulator injects, and how often; the run's seed draws them all.

    Rates are per member and second of the fault phase; `registrar_crash_share` scales
    the crash rate of member 1 (the registrar, whose crashes stall joins); `sync_p` is the
    chance that a flush under `wal_mode = write` is followed by an fsync of its own (rows
    that no relay asked to sync stay exposed to an OS crash)."""

    delay_min_s: float = 0.0005
    delay_max_s: float = 0.05
    cut_per_s: float = 0.5
    partition_per_s: float = 0.2
    partition_s: tuple[float, float] = (0.1, 0.6)
    duplicate_p: float = 0.02
    reorder_p: float = 0.02
    crash_per_s: float = 0.2
    registrar_crash_share: float = 0.25
    os_crash_share: float = 0.5
    restart_after_s: float = 0.3
    sync_p: float = 0.3


NO_FAULTS = Faults(delay_max_s=0.01, cut_per_s=0, partition_per_s=0, duplicate_p=0, reorder_p=0, crash_per_s=0)


@dataclass
class Link:
    """One applier connection from `applier_of` to `relay_on`; FIFO unless reordered."""

    conn: int
    applier_of: int
    relay_on: int
    last_delivery_s: float = 0.0
    open: bool = True


@dataclass
class Member:
    id: int
    data_dir: Path
    engine: Engine | None = None
    appliers: dict[int, repl.Applier] = field(default_factory=dict)
    relays: dict[int, repl.Relay] = field(default_factory=dict)
    links: dict[int, int] = field(default_factory=dict)  # peer -> conn of our applier
    replicaset: ReplicaSet | None = None
    answered_by: set[int] = field(default_factory=set)  # peers whose recovery answer is traced

    @property
    def recovering(self) -> bool:
        return self.replicaset is not None and self.replicaset.phase is Phase.RECOVERING
    sync_point: dict[str, int] = field(default_factory=dict)
    unsynced: bool = False  # rows written since the last sync point
    durable: VClock = field(default_factory=VClock)  # what an OS crash leaves of the WAL
    vclock_at_crash: VClock | None = None


class Simulation:
    def __init__(self, root: Path, *, seed: int, members: int = 3, writes: int = 60, faults: Faults = Faults(),
                 keys: int = 6, fault_phase_s: float = 3.0, wal_mode: WalMode = WalMode.WRITE,
                 trace: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.seed = seed
        self.wal_mode = WalMode(wal_mode)
        self.rng = random.Random(seed)
        self.root = root
        self.faults = faults
        self.keys = keys
        self.writes_left = writes
        self.fault_phase_s = fault_phase_s
        self.now_s = 0.0
        self.healed = False
        self._queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._conns = itertools.count(1)
        self.links: dict[int, Link] = {}
        self.partitioned: set[frozenset[int]] = set()
        self.acked: list[tuple[int, int, bytes]] = []
        # (origin, lsn, payload) of acknowledged writes their origin made durable: none of
        # them may be lost, nor its LSN taken by another write.
        self.durable: set[tuple[int, int, bytes]] = set()
        self._last_ack: dict[tuple[int, int], bytes] = {}
        self._trace_out = trace
        self.traced_steps = 0
        self.members = {i: Member(i, root / f"m{i}") for i in range(1, members + 1)}

    # ---------------------------------------------------------------- plumbing

    def trace(self, event: dict[str, Any]) -> None:
        if self._trace_out is None:
            return
        if event["event"] not in ("Init", "End"):
            self.traced_steps += 1
        self._trace_out(event)

    def _traced_table(self, member: Member) -> dict[str, list[Any]]:
        """The member's table as the trace shows it: every key with a version, as
        `[value id of the image it holds (visible or latent), stamp, origin]`, None for a
        tombstone; "missing" when a live version has no image at all."""
        if self._trace_out is None:
            return {}
        assert member.engine is not None
        state = lww.engine_state(member.engine).get("kv")
        if state is None:
            return {}
        images = {f"kv:{row['k']}": row for row in state.rows.values()} | state.latent
        table = {}
        for key, (stamp, origin, deleted) in sorted(state.versions.items()):
            image = images.get(key)
            value = None if deleted else _value_id(image) if image is not None else "missing"
            table[key] = [value, stamp, origin]
        return table

    def _at(self, delay_s: float, kind: str, *args: Any) -> None:
        heapq.heappush(self._queue, (self.now_s + delay_s, next(self._seq), kind, args))

    def _clock_ms(self) -> int:
        return 1_700_000_000_000 + int(self.now_s * 1000)

    def _open(self, member: Member, *, recovering: bool = False) -> None:
        member.engine = Engine.open(
            EngineConfig(data_dir=member.data_dir, instance_id=member.id, wal_mode=self.wal_mode),
            clock_ms=self._clock_ms,
        )
        member.replicaset = ReplicaSet(instance_id=member.id, configured_quorum=None,
                                       connect_deadline_s=self.now_s + CONNECT_TIMEOUT_S, recovering=recovering)
        for peer in self.members:
            if peer != member.id:
                applier = repl.Applier(peer=str(peer), timeout_s=TIMEOUT_S, backoff_max_s=0.4)
                member.appliers[peer] = applier
                self._do(member, applier.start(self.now_s))

    # ---------------------------------------------------------------- the run

    def run(self, max_events: int = 200_000) -> None:
        self.trace({"event": "Init", "members": sorted(self.members), "wal_mode": self.wal_mode.value,
                    "seed": self.seed})
        first = self.members[1]
        self._open(first)
        engine = first.engine
        assert engine is not None
        txn = engine.begin()
        engine.execute(txn, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, u INTEGER UNIQUE)")
        self._committed(first, engine.commit(txn))
        self._flushed(first, engine.flush())
        for member in self.members.values():
            if member.engine is None:
                self._open(member)
            self._at(TICK_S, "tick", member.id)
        self._at(0.01, "write")
        self._at(self.fault_phase_s, "heal")
        for _ in range(max_events):
            if not self._queue:
                break
            self.now_s, _, kind, args = heapq.heappop(self._queue)
            getattr(self, f"_on_{kind}")(*args)
            self.check_invariants()
            if self.healed and self.writes_left == 0 and self._converged():
                self.trace({"event": "End", "steps": self.traced_steps})
                return
        raise AssertionError(f"seed {self.seed}: no convergence after {max_events} events: {self.vclocks()}")

    def _on_heal(self) -> None:
        self.healed = True
        self.partitioned.clear()
        for member in self.members.values():
            if member.engine is None:
                self._on_restart(member.id)

    def _on_tick(self, member_id: int) -> None:
        self._at(TICK_S, "tick", member_id)
        member = self.members[member_id]
        if member.engine is None:
            return
        for applier in member.appliers.values():
            self._do(member, applier.tick(self.now_s))
        for conn, relay in list(member.relays.items()):
            self._do(member, relay.tick(self.now_s, member.engine.vclock), conn=conn)
        if not self.healed:
            self._maybe_fault(member)

    def _maybe_fault(self, member: Member) -> None:
        f, rng = self.faults, self.rng
        if rng.random() < f.cut_per_s * TICK_S and member.links:
            self._cut(rng.choice(sorted(member.links.values())), "cut by the simulator")
        if rng.random() < f.partition_per_s * TICK_S:
            other = rng.choice([m for m in self.members if m != member.id])
            pair = frozenset({member.id, other})
            self.partitioned.add(pair)
            for link in list(self.links.values()):
                if {link.applier_of, link.relay_on} == set(pair):
                    self._cut(link.conn, "partition")
            self._at(rng.uniform(*f.partition_s), "unpartition", pair)
        crash_rate = f.crash_per_s * (f.registrar_crash_share if member.id == 1 else 1.0)
        if rng.random() < crash_rate * TICK_S:
            self._crash(member, os_crash=rng.random() < f.os_crash_share)

    def _on_unpartition(self, pair: frozenset[int]) -> None:
        self.partitioned.discard(pair)

    def _on_restart(self, member_id: int) -> None:
        member = self.members[member_id]
        if member.engine is not None:
            return
        member.answered_by = set()
        self._open(member, recovering=must_recover(
            unclean=True, wal_mode_write=self.wal_mode is WalMode.WRITE, has_peers=True, force_recovery=False))
        assert member.engine is not None
        if member.vclock_at_crash is not None and not member.vclock_at_crash <= member.engine.vclock:
            # An OS crash took rows: what is left on disk after a reboot is durable.
            self._mark_durable(member)
        member.vclock_at_crash = None
        self.trace({"event": "Restart", "member": member_id, "vclock": self._clock_of(member),
                    "table": self._traced_table(member), "t": self.now_s})

    def _crash(self, member: Member, *, os_crash: bool) -> None:
        """A process crash loses nothing the WAL holds; an OS crash under wal_mode=write
        also loses the WAL bytes written since the member's last sync point."""
        assert member.engine is not None
        self.trace({"event": "Crash", "member": member.id, "os": os_crash, "t": self.now_s})
        member.vclock_at_crash = member.engine.wal.vclock
        member.engine.close()
        member.engine = None
        for conn in list(member.links.values()) + list(member.relays):
            self._cut(conn, "crash")
        member.appliers.clear()
        if os_crash and self.wal_mode is WalMode.WRITE:
            self._lose_unsynced_tail(member)
        self._at(self.faults.restart_after_s, "restart", member.id)

    def _sync(self, member: Member) -> None:
        """What the member wrote so far survives an OS crash from now on (an fsync); its
        relays may send the rows they withheld for it."""
        if member.unsynced and self.wal_mode is WalMode.WRITE:
            self.trace({"event": "WalSync", "member": member.id, "t": self.now_s})
        self._mark_durable(member)
        for conn, relay in list(member.relays.items()):
            self._do(member, relay.synced(self.now_s, member.durable), conn=conn)

    def _mark_durable(self, member: Member) -> None:
        member.unsynced = False
        member.sync_point = {p.name: p.stat().st_size for p in list_segments(member.data_dir / "wal")}
        assert member.engine is not None
        member.durable = member.engine.vclock.copy()
        own_lsn = member.engine.vclock.get(member.id)
        # An LSN acknowledged twice was lost in an OS crash the first time: the later write holds it.
        self.durable.update((o, lsn, payload) for (o, lsn), payload in self._last_ack.items()
                            if o == member.id and lsn <= own_lsn)

    def _lose_unsynced_tail(self, member: Member) -> None:
        for path in list_segments(member.data_dir / "wal"):
            size = member.sync_point.get(path.name)
            if size is None:
                path.unlink()
            elif path.stat().st_size > size:
                with open(path, "r+b") as f:
                    f.truncate(self.rng.randint(size, path.stat().st_size))

    # ---------------------------------------------------------------- network

    def _connect(self, member: Member, peer: int) -> None:
        conn = next(self._conns)
        self.links[conn] = Link(conn, member.id, peer)
        member.links[peer] = conn
        self._send(conn, member.id, peer, "hello")

    def _cut(self, conn: int, reason: str) -> None:
        link = self.links.get(conn)
        if link is None or not link.open:
            return
        link.open = False
        applier_side, relay_side = self.members[link.applier_of], self.members[link.relay_on]
        relay_side.relays.pop(conn, None)
        if applier_side.links.get(link.relay_on) == conn:
            del applier_side.links[link.relay_on]
            applier = applier_side.appliers.get(link.relay_on)
            if applier is not None and applier_side.engine is not None:
                self._do(applier_side, applier.disconnected(self.now_s, reason))
                assert applier_side.replicaset is not None
                self._replicaset_actions(
                    applier_side, applier_side.replicaset.upstream_failed(self.now_s, str(link.relay_on)))

    def _send(self, conn: int, src: int, dst: int, kind: str, *payload: Any) -> None:
        link = self.links[conn]
        if not link.open:
            return
        if frozenset({src, dst}) in self.partitioned:
            self._cut(conn, "partition")
            return
        deliver = max(self.now_s + self.rng.uniform(self.faults.delay_min_s, self.faults.delay_max_s), link.last_delivery_s)
        # TCP neither duplicates nor reorders; row frames still get both, to prove that
        # apply-once absorbs copies and that a gap ends in a resubscribe, never a hole.
        garble = kind == "rows" and not self.healed
        if garble and self.rng.random() < self.faults.reorder_p:
            deliver = self.now_s + self.rng.uniform(0.0, self.faults.delay_max_s)
        else:
            link.last_delivery_s = deliver
        heapq.heappush(self._queue, (deliver, next(self._seq), "deliver", (conn, dst, kind, payload)))
        if garble and self.rng.random() < self.faults.duplicate_p:
            heapq.heappush(self._queue, (deliver + 0.001, next(self._seq), "deliver", (conn, dst, kind, payload)))

    def _on_deliver(self, conn: int, dst: int, kind: str, payload: tuple[Any, ...]) -> None:
        link = self.links[conn]
        member = self.members[dst]
        if not link.open or member.engine is None:
            return
        getattr(self, f"_recv_{kind}")(member, conn, link, *payload)

    # ---------------------------------------------------------------- messages

    def _recv_hello(self, relay_side: Member, conn: int, link: Link) -> None:
        self._send(conn, relay_side.id, link.applier_of, "welcome")

    def _recv_welcome(self, member: Member, conn: int, link: Link) -> None:
        applier = member.appliers[link.relay_on]
        engine = member.engine
        assert engine is not None
        self._do(member, applier.connected(self.now_s, engine.vclock, engine.last_txn(), include_own=member.recovering), conn=conn)

    def _recv_subscribe(self, member: Member, conn: int, link: Link, vclock: dict, last_txn: dict, include_own: bool) -> None:
        engine = member.engine
        assert engine is not None
        relay = repl.Relay(subscriber=link.applier_of, own=member.id, timeout_s=TIMEOUT_S)
        segments = engine.wal.segments()
        accepted = relay.subscribe(
            self.now_s,
            vclock=VClock(vclock),
            last_txn=last_txn,
            local_txn_at={o: engine.txn_at(o, lsn) for o, (lsn, _) in last_txn.items()},
            log_start=segments[0][1] if segments else VClock(),
            include_own=include_own,
        )
        if isinstance(accepted, repl.Refuse):
            self._send(conn, member.id, link.applier_of, "refused", accepted.refusal, accepted.message)
            return
        member.relays[conn] = relay
        self._send(conn, member.id, link.applier_of, "subscribed", engine.vclock.to_dict())
        self._do(member, accepted, conn=conn)

    def _recv_subscribed(self, member: Member, conn: int, link: Link, vclock: dict) -> None:
        applier = member.appliers[link.relay_on]
        engine = member.engine
        assert engine is not None
        self._do(member, applier.subscribed(self.now_s, VClock(vclock), engine.vclock), conn=conn)
        self._note_synced(member, link.relay_on, applier)

    def _recv_refused(self, member: Member, conn: int, link: Link, refusal: Refusal, message: str) -> None:
        self._do(member, member.appliers[link.relay_on].refused(self.now_s, refusal, message), conn=conn)
        assert member.replicaset is not None
        self._replicaset_actions(member, member.replicaset.upstream_refused(self.now_s, str(link.relay_on), refusal))

    def _recv_rows(self, member: Member, conn: int, link: Link, records: tuple[Record, ...]) -> None:
        applier = member.appliers[link.relay_on]
        if applier.state in (repl.ApplierState.SYNC, repl.ApplierState.FOLLOW):
            self._do(member, applier.rows_received(self.now_s, records), conn=conn)

    def _recv_heartbeat(self, member: Member, conn: int, link: Link, vclock: dict) -> None:
        applier = member.appliers[link.relay_on]
        if applier.state in (repl.ApplierState.SYNC, repl.ApplierState.FOLLOW):
            assert member.engine is not None
            self._do(member, applier.heartbeat(self.now_s, VClock(vclock), member.engine.vclock), conn=conn)
            self._note_synced(member, link.relay_on, applier)

    def _recv_ack(self, member: Member, conn: int, link: Link, vclock: dict) -> None:
        relay = member.relays.get(conn)
        if relay is not None:
            relay.ack(self.now_s, VClock(vclock))

    # ---------------------------------------------------------------- actions

    def _do(self, member: Member, actions: list[repl.Action], *, conn: int | None = None) -> None:
        for action in actions:
            if isinstance(action, repl.Connect):
                self._connect(member, int(action.peer))
            elif isinstance(action, repl.SendSubscribe):
                self._send(member.links[int(action.peer)], member.id, int(action.peer), "subscribe",
                           action.vclock, action.last_txn, action.include_own)
            elif isinstance(action, repl.ApplyRows):
                self._apply(member, int(action.peer), action.records)
            elif isinstance(action, repl.SendAck):
                if int(action.peer) in member.links:
                    self._send(member.links[int(action.peer)], member.id, int(action.peer), "ack", action.vclock)
            elif isinstance(action, repl.Disconnect):
                target = conn if conn is not None else member.links.get(int(action.peer))
                if target is not None:
                    self._cut(target, action.reason)
            elif isinstance(action, repl.SendRows):
                assert conn is not None
                self._send(conn, member.id, action.subscriber, "rows", action.records)
            elif isinstance(action, repl.SendHeartbeat):
                assert conn is not None
                self._send(conn, member.id, action.subscriber, "heartbeat", action.vclock)
            elif isinstance(action, repl.SyncWal):
                self._sync(member)
            elif isinstance(action, repl.ReadLog):
                assert conn is not None and member.engine is not None
                rows = list(member.engine.wal.read_from(VClock(action.after)))
                self._do(member, member.relays[conn].rows(self.now_s, rows, member.durable), conn=conn)

    def _apply(self, member: Member, peer: int, records: tuple[Record, ...]) -> None:
        engine = member.engine
        assert engine is not None
        applier = member.appliers[peer]
        try:
            for record in records:
                if record.origin == member.id:
                    self._apply_own(member, peer, record)
                elif engine.apply(record):
                    self.trace({"event": "RelaySend", "peer": peer, "member": member.id, "origin": record.origin,
                                "lsn": record.lsn, "t": self.now_s})
                    self.trace({"event": "ApplierReceive", "member": member.id, "origin": record.origin,
                                "lsn": record.lsn, "ops": _traced_ops(record), "t": self.now_s})
        except GapError as exc:
            self._flushed(member, engine.flush())
            conn = member.links.get(peer)
            if conn is not None:
                self._cut(conn, str(exc))
            return
        except ApplyError as exc:
            self._flushed(member, engine.flush())
            self._do(member, applier.apply_failed(self.now_s, str(exc)))
            return
        self._flushed(member, engine.flush())
        if member.engine is not None and applier.state is not repl.ApplierState.STOPPED:
            self._do(member, applier.rows_applied(self.now_s, engine.vclock), conn=member.links.get(peer))
            self._note_synced(member, peer, applier)

    def _apply_own(self, member: Member, peer: int, record: Record) -> None:
        """A row of our own origin: only a recovering member takes it, as `peer`'s answer
        to its recovery fetch (the spec's `RecoveryAnswer`, traced before its first row)."""
        engine = member.engine
        assert engine is not None
        if member.recovering and record.lsn == engine.pending_vclock.get(member.id) + 1:
            self._answered(member, peer)
        engine.apply(record, own_allowed=member.recovering)

    def _answered(self, member: Member, peer: int) -> None:
        if peer not in member.answered_by:
            member.answered_by.add(peer)
            self.trace({"event": "RecoveryAnswer", "peer": peer, "member": member.id, "t": self.now_s})

    def _note_synced(self, member: Member, peer: int, applier: repl.Applier) -> None:
        """Tell the member's replica-set core what it sees: a peer it is synced with has
        answered its recovery fetch."""
        if member.engine is None or member.replicaset is None:
            return
        if member.recovering and applier.state is repl.ApplierState.FOLLOW:
            self._answered(member, peer)
        following = frozenset(str(p) for p, a in member.appliers.items() if a.state is repl.ApplierState.FOLLOW)
        view = View(members=len(self.members), upstreams=frozenset(str(p) for p in member.appliers), following=following)
        self._replicaset_actions(member, member.replicaset.observe(self.now_s, view))

    def _replicaset_actions(self, member: Member, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, RecoveryGaveUp) and int(action.upstream) not in member.answered_by:
                member.answered_by.add(int(action.upstream))
                self.trace({"event": "RecoveryGiveUp", "peer": int(action.upstream), "member": member.id, "t": self.now_s})
            elif isinstance(action, RecoveryDone):
                self.trace({"event": "RecoveryFinish", "member": member.id, "t": self.now_s})

    def _flushed(self, member: Member, records: list[Record]) -> None:
        if not records:
            return
        self.trace({"event": "WalFlush", "member": member.id, "vclock": self._clock_of(member),
                    "table": self._traced_table(member), "t": self.now_s})
        member.unsynced = True
        if self.wal_mode is WalMode.FSYNC:
            self._mark_durable(member)  # every flush is an fsync
        elif self.rng.random() < self.faults.sync_p:
            self._sync(member)
        for conn, relay in list(member.relays.items()):
            self._do(member, relay.rows(self.now_s, records, member.durable), conn=conn)

    # ---------------------------------------------------------------- client writes

    def _on_write(self) -> None:
        if self.writes_left <= 0:
            return
        self._at(self.rng.uniform(0.005, 0.05), "write")
        candidates = [m for m in self.members.values()
                      if m.engine is not None and m.replicaset is not None and m.replicaset.write_refusal(self.now_s) is None]
        if not candidates:
            return
        member = self.rng.choice(candidates)
        engine = member.engine
        assert engine is not None
        key, rng = self.rng.randrange(self.keys), self.rng
        statement = rng.choice([
            ("INSERT INTO kv(k, v, u) VALUES (?, ?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v, u = excluded.u",
             (key, f"v{member.id}-{self.writes_left}", rng.randrange(self.keys * 2))),
            ("UPDATE kv SET v = ? WHERE k = ?", (f"u{member.id}-{self.writes_left}", key)),
            ("DELETE FROM kv WHERE k = ?", (key,)),
            ("UPDATE kv SET k = ? WHERE k = ?", (rng.randrange(self.keys), key)),
        ])
        txn = engine.begin()
        try:
            engine.execute(txn, *statement)
        except Exception:
            engine.rollback(txn)
            self._flushed(member, engine.flush())
            return
        if self._committed(member, engine.commit(txn)):
            self.writes_left -= 1
        self._flushed(member, engine.flush())

    def _committed(self, member: Member, committed: Committed | None) -> bool:
        """Trace a local commit (queued, acknowledged after the flush that follows)."""
        if committed is None:
            return False
        for record in committed.records:
            self.acked.append((record.origin, record.lsn, record.payload))
            self._last_ack[(record.origin, record.lsn)] = record.payload
            self.trace({"event": "LocalWrite", "member": member.id, "lsn": record.lsn, "hlc": _stamp(record),
                        "ops": _traced_ops(record), "t": self.now_s})
        return True

    # ---------------------------------------------------------------- checks

    def _clock_of(self, member: Member) -> dict[int, int]:
        assert member.engine is not None
        clock = member.engine.vclock
        return {m: clock.get(m) for m in sorted(self.members)}

    def vclocks(self) -> dict[int, dict[int, int]]:
        return {i: repl.replicated_part(m.engine.vclock).to_dict() for i, m in self.members.items() if m.engine}

    def _converged(self) -> bool:
        if any(m.engine is None or m.recovering for m in self.members.values()):
            return False
        clocks = list(self.vclocks().values())
        return all(c == clocks[0] for c in clocks)

    def check_invariants(self) -> None:
        """After every event (TigerBeetle style): every core's own, and no relay ahead of
        its member's durable cut for rows of the member's own origin (FINDINGS F1)."""
        for member in self.members.values():
            if member.engine is None:
                continue
            assert member.replicaset is not None
            member.engine.check_invariants()
            member.replicaset.check_invariants()
            for applier in member.appliers.values():
                applier.check_invariants()
            for relay in member.relays.values():
                relay.check_invariants()
                assert relay.sent_past(member.durable) == 0, (
                    f"seed {self.seed}: member {member.id} relayed its rows past its durable cut")

    def check(self) -> None:
        """The end-of-run checks; each failure names the seed.

        Every member holds each `(origin, lsn)` once, all with one payload, and that payload
        is one a client was acknowledged for; an acknowledged write whose origin made it
        durable is held by every member byte-for-byte (under `wal_mode = write` an OS crash
        may lose a write that was not durable yet, whose LSN the origin then reuses). The
        tables, versions and latent images of every member are those the reference model
        of last-writer-wins (`replicaset.testing.lww`) computes from the rows held: members
        that agree with each other but not with the rules fail here."""
        where = f"seed {self.seed}"
        self.final_vclocks = self.vclocks()
        digests = {i: m.engine.table_digest() for i, m in self.members.items() if m.engine}
        assert len(set(map(str, digests.values()))) == 1, f"{where}: table digests differ: {digests}"
        payloads: dict[tuple[int, int], bytes] = {}
        held_by: dict[int, set[tuple[int, int]]] = {}
        records: list[Record] = []
        for i, member in self.members.items():
            assert member.engine is not None
            seen = held_by.setdefault(i, set())
            for record in member.engine.wal.read_from(VClock()):
                key = (record.origin, record.lsn)
                if record.origin == 0:
                    continue
                assert key not in seen, f"{where}: member {i} holds {key} twice"
                seen.add(key)
                if key not in payloads:
                    payloads[key] = record.payload
                    records.append(record)
                assert payloads[key] == record.payload, f"{where}: {key} has two payloads"
        acked: dict[tuple[int, int], list[bytes]] = {}
        for origin, lsn, payload in self.acked:
            acked.setdefault((origin, lsn), []).append(payload)
        for key, payload in payloads.items():
            assert payload in acked.get(key, []), f"{where}: {key[0]}:{key[1]} holds a payload no client wrote there"
        for origin, lsn, payload in self.acked:
            if (origin, lsn, payload) not in self.durable:
                continue
            for i, seen in held_by.items():
                assert (origin, lsn) in seen, (
                    f"{where}: acknowledged durable write {origin}:{lsn} is lost on member {i}")
            assert payloads[(origin, lsn)] == payload, (
                f"{where}: acknowledged durable write {origin}:{lsn} was overwritten by another write at its LSN")
        expected = lww.Model().add_all(records).state()
        for i, member in self.members.items():
            assert member.engine is not None
            wrong = lww.differences(expected, lww.engine_state(member.engine))
            assert not wrong, f"{where}: member {i} differs from the reference model: " + "; ".join(wrong)

    def close(self) -> None:
        for member in self.members.values():
            if member.engine is not None:
                member.engine.close()
                member.engine = None


def _traced_ops(record: Record) -> list[list[Any]]:
    """A row's changes as the spec sees them: `[key, value id]` per key it changes (the
    last change of a key in the row is what stays), None for a delete; a DDL row changes the
    one key "schema"."""
    if record.type == RecordType.DDL:
        return [["schema", "ddl"]]
    ops = {row.key: None if row.op is Op.DELETE else _value_id(row.new or {})
           for row in DmlPayload.unpack(record.payload).rows}
    return [[key, value] for key, value in ops.items()]


def _value_id(image: dict[str, Any]) -> str:
    """A short id of a row image's content: 24 bits of a digest of its columns."""
    digest = zlib.crc32(msgpack.packb(sorted(image.items()), use_bin_type=True)) & 0xFFFFFF
    return f"v{digest:06x}"


def _stamp(record: Record) -> int:
    """The HLC stamp of a row, as last-writer-wins compares it."""
    if record.type == RecordType.DDL:
        return DdlPayload.unpack(record.payload).hlc
    return DmlPayload.unpack(record.payload).hlc
