"""One member's driver: it feeds the member's replication cores their events and hands
back their actions, for the host (the trio node, or the simulator) to carry out.

Theory of operation (etcd raft's RawNode; docs/design/README.md §3):
- The host owns the clock, the network and the disk; the driver owns the cores: the
  member's `ReplicaSet`, one `Applier` per upstream (keyed by the host's upstream key) and
  one `Relay` per subscribed connection (keyed by the host's connection id). It reads the
  store (`MemberStore`: the Engine) and the host's `Membership` for what the cores need.
- Each event method feeds the cores, asserts every core's invariants after it (when
  asked), writes the trace lines of the spec's actions it carries, and returns actions
  tagged with their core. The host carries them out in the order given and reports what
  followed, in etcd raft's order: rows are persisted (`applier_took`, then the flush the
  host reports as `flushed` to the relays), made durable (`synced`), then sent; rows
  applied from a peer are acknowledged only once flushed (`applier_applied`).
- What both hosts computed on their own before lives here once: SUBSCRIBE's inputs (own
  rows asked for while recovering), a relay's subscribe inputs, the vclock acks carry,
  own rows taken only while recovering, the view the replica-set core observes after an
  applier changes, link losses and refusals reported to it, who holds the member's
  registration, the invariants and the trace.

Trace lines are named and parameterised as the actions of `specs/VClockReplication.tla`:
`LocalWrite` when the host tells of a local commit (`committed`), `WalFlush` at
`wal_flushed` (which `flushed` calls) with the member's table as the host's
`traced_table` gives it, `RelaySend` then
`ApplierReceive` when a row from a peer is taken (links are FIFO and a
crash cuts them, so a row taken is a row its sender still holds), `RecoveryAnswer` when a
peer answered the recovery fetch (its first row of ours, or synced with it),
`RecoveryGiveUp` and `RecoveryFinish` as the replica-set core decides, `WalSync` when a
sync made new rows durable (`wal_synced`, which `synced` calls). A COMMIT's row is taken
like a relayed one (`txn_commit_took`, its sender being its origin).

The quorum transaction events trace the actions of `specs/QuorumCommit.tla` on the same
stream: `Begin` (with the version read), `Prepare` (a first PREPARED, the coordinator's own
included), `DecideCommit` once the row is written (its LSN and stamp), `DecideAbort` when
the coordinator decides on its own, `QueryDecision` when a question made it decide,
`ParticipantAbort` when an ABORT releases another member's transaction here. A LocalWrite
is the spec's WriteOne; the aborts of a restart are the host's `Restart` line. A removed
coordinator's transactions trace the actions of `specs/QuorumRemoval.tla`:
`StopFollowing` when this member follows the removed member no more, `AnswerNoRow` when it
tells an asker it holds no row, `ResolveRemoved` when every member of its view did and it
aborts.

SWIM traces the actions of `specs/Swim.tla` (docs/design/swim.md): a datagram received is
`PingReceived` of the updates it carries, whatever its kind (the spec's datagrams carry one
entry each, and every message is piggyback); each message the core sends is `TickPing` of
each update it carries; a probe that failed is `TickProbeFailed`, a suspicion past its
timeouts `TickDead`. A receipt, and the last of a tick's state changes, carries the
member's whole view after the event (`view`), which the check compares with the spec's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from replicaset.core import anti_entropy, gc, purge, quorum, swim
from replicaset.core import replication as repl
from replicaset.core.hlc import unpack_stamp
from replicaset.core.replicaset import (
    Phase,
    RecoveryDone,
    RecoveryGaveUp,
    Refusal,
    Rejoin,
    RejoinState,
    Removal,
    ReplicaSet,
    Status,
    View,
)
from replicaset.member.actions import (
    Accepted,
    Action,
    AntiEntropyAction,
    ApplierAction,
    GcAction,
    PurgeAction,
    QuorumAction,
    RelayAction,
    SetAction,
    SwimAction,
)
from replicaset.member.store import MemberStore, Membership
from replicaset.member.trace import stamp, traced_ops, traced_updates
from wal import LOCAL_ORIGIN, Record, VClock

RECEIVING = frozenset({repl.ApplierState.SYNC, repl.ApplierState.FOLLOW})
# The only changes a SWIM tick makes, as the spec's actions that make them.
_TICK_CHANGES = {swim.MemberState.SUSPECT: "TickProbeFailed", swim.MemberState.DEAD: "TickDead"}
GONE = frozenset({repl.ApplierState.STOPPED, repl.ApplierState.DISCONNECTED})

P = ParamSpec("P")
R = TypeVar("R")


def _event(method: Callable[Concatenate[MemberDriver, P], R]) -> Callable[Concatenate[MemberDriver, P], R]:
    """An event: the cores' invariants hold after it (TigerBeetle), when the driver checks."""

    @functools.wraps(method)
    def step(self: MemberDriver, *args: P.args, **kwargs: P.kwargs) -> R:
        result = method(self, *args, **kwargs)
        if self.checking:
            self.check_invariants()
        return result

    return step


class MemberDriver:
    """One member's replication cores, and one method per event that moves them."""

    def __init__(
        self,
        *,
        instance_id: int,
        store: MemberStore,
        replicaset: ReplicaSet,
        membership: Callable[[], Membership],
        timeout_s: float,
        backoff_max_s: float,
        skip_conflict: bool = False,
        trace: Callable[[dict[str, Any]], None] | None = None,
        traced_table: Callable[[], dict[str, list[Any]]] | None = None,
        check_invariants: bool = True,
        check_store: Callable[[], None] | None = None,
        participant: quorum.Participant | None = None,
        wal_gc: gc.WalGc | None = None,
        repair: anti_entropy.AntiEntropy | None = None,
        tombstone_purge: purge.TombstonePurge | None = None,
    ) -> None:
        """`timeout_s` is `replication_timeout`, of every applier and relay; `trace`, when
        given, takes one dict per spec action, and `traced_table` gives the member's table as
        a WalFlush line shows it (`key: [value id, stamp, origin]`; only a test kit computes
        it: without it the line carries an empty table, which the trace check takes for a
        member holding no row); `check_invariants` asserts every core's
        invariants after every event, and the store's through `check_store` (the host knows
        when its store is between two states, as while a flush runs in a thread);
        `participant`, the member's side of quorum transactions as its metastore left it
        (a fresh one in memory when not given); `wal_gc`, the GC of the member's log with
        the host's retention (one that keeps nothing past what its consumers need, when
        not given); `repair`, anti-entropy with the host's thresholds (Marmot's defaults
        when not given); `tombstone_purge`, the purge passes with the host's settle time."""
        self.instance_id = instance_id
        self.coordinator = quorum.Coordinator(member=instance_id)
        self.participant = participant or quorum.Participant(member=instance_id, timeout_s=timeout_s)
        self.gc = wal_gc or gc.WalGc(min_retention_s=0.0, max_retention_s=float("inf"))
        self.gc_kept: gc.Kept | None = None  # the last pass's outcome, for the console
        self.anti_entropy = repair or anti_entropy.AntiEntropy(member=instance_id, threshold_rows=10_000,
                                                               threshold_s=3600.0)
        self.purge = tombstone_purge or purge.TombstonePurge(settle_s=10.0)
        self.swim: swim.Swim | None = None  # the host's, once it listens for datagrams
        self.replicaset = replicaset
        self.appliers: dict[str, repl.Applier] = {}
        self.relays: dict[int, repl.Relay] = {}
        self.checking = check_invariants
        self._store = store
        self._membership = membership
        self._timeout_s = timeout_s
        self._backoff_max_s = backoff_max_s
        self._skip_conflict = skip_conflict
        self._trace = trace
        self._traced_table = traced_table
        self._check_store = check_store
        self._answered: set[int | None] = set()  # peers whose answer (or give-up) is traced

    # ---------------------------------------------------------------- queries

    @property
    def recovering(self) -> bool:
        return self.replicaset.phase is Phase.RECOVERING

    @property
    def running(self) -> bool:
        """The member takes writes, for the life of the process."""
        return self.replicaset.phase is Phase.RUNNING

    @property
    def tracing(self) -> bool:
        return self._trace is not None

    @property
    def rejoin_waiting(self) -> bool:
        """A rejoin was decided on and waits for a member that holds every row of ours."""
        return self.replicaset.rejoin is RejoinState.WAITING

    def status(self, now_s: float) -> Status:
        return self.replicaset.status(now_s)

    def write_refusal(self, now_s: float) -> str | None:
        """Why the member takes no write now, or None when it does."""
        return self.replicaset.write_refusal(now_s)

    def acked(self, origin: int) -> dict[int, int]:
        """What each member subscribed acknowledged of `origin`'s rows (its newest relay's
        word); anonymous followers hold rows for no one: they count for nothing."""
        return {relay.subscriber: relay.acked.get(origin) for relay in self.relays.values()
                if relay.subscriber != repl.ANONYMOUS_SUBSCRIBER}

    def downstream(self, subscriber: int) -> repl.Relay | None:
        """The newest relay serving `subscriber`."""
        return next((r for r in reversed(self.relays.values()) if r.subscriber == subscriber), None)

    # ---------------------------------------------------------------- applier events

    @_event
    def applier_start(self, key: str, now_s: float, *, peer: str) -> list[Action]:
        """Follow upstream `key`, found at `peer`, for the life of the member."""
        applier = repl.Applier(peer=peer, timeout_s=self._timeout_s, backoff_max_s=self._backoff_max_s,
                               skip_conflict=self._skip_conflict)
        self.appliers[key] = applier
        return self._of_applier(key, applier.start(now_s))

    def applier_moved(self, key: str, peer: str) -> None:
        """The upstream is found at another address from the next connect on."""
        self.appliers[key].peer = peer

    @_event
    def applier_connected(self, key: str, now_s: float) -> list[Action]:
        """Subscribe with what the member holds; with its own rows while it recovers them."""
        store = self._store
        return self._of_applier(key, self.appliers[key].connected(
            now_s, store.vclock, store.last_txn(), include_own=self.recovering))

    @_event
    def applier_subscribed(self, key: str, now_s: float, relay_vclock: VClock) -> list[Action]:
        actions = self._of_applier(key, self.appliers[key].subscribed(now_s, relay_vclock, self._store.vclock))
        return actions + self._synced_with(key, now_s)

    @_event
    def applier_refused(self, key: str, now_s: float, refusal: Refusal, message: str,
                        removal: Removal | None = None) -> list[Action]:
        """`removal`: the peer's record of the removal of the instance it refused."""
        actions = self._of_applier(key, self.appliers[key].refused(now_s, refusal, message))
        actions += self._of_set(now_s, self.replicaset.upstream_refused(now_s, key, refusal, removal,
                                                                        vclock=self._store.vclock.to_dict()))
        return actions + self._observe(now_s)

    @_event
    def own_row_deleted(self, now_s: float, removal: Removal) -> list[Action]:
        """The deletion of this member's own `_cluster` row was applied here."""
        return self._of_set(now_s, self.replicaset.own_row_deleted(now_s, removal))

    @_event
    def applier_rows(self, key: str, now_s: float, records: Sequence[Record], *, wall_ms: int | None = None) -> list[Action]:
        """Rows from the upstream; `wall_ms`, the wall clock now, measures the lag from the
        last row's creation (its stamp) to its receipt, as Tarantool does."""
        applier = self.appliers[key]
        if applier.state not in RECEIVING:
            return []
        if records and wall_ms is not None:
            applier.lag_s = max(0.0, (wall_ms - unpack_stamp(records[-1].txn_id)[0]) / 1000)
        return self._of_applier(key, applier.rows_received(now_s, records, own_allowed=self.recovering))

    def applier_took(self, key: str, now_s: float, records: Sequence[Record]) -> None:
        """The store took these rows from upstream `key`, before the flush that makes them
        durable (the spec's ApplierReceive, and RecoveryAnswer at a first row of ours).
        Only the trace hears of it: call it only when `tracing`."""
        if self._trace is not None:
            self._trace_took(self._peer_id(key), now_s, records)

    def txn_commit_took(self, now_s: float, records: Sequence[Record]) -> None:
        """The store took a COMMIT's row from its coordinator, before the flush (the spec's
        ApplierReceive, the sender being the row's origin). Only the trace hears of it."""
        if self._trace is not None:
            self._trace_took(None, now_s, records)

    def _trace_took(self, peer: int | None, now_s: float, records: Sequence[Record]) -> None:
        assert self._trace is not None
        for record in records:
            if record.origin == self.instance_id:
                if self.recovering:
                    self._trace_answer(peer, now_s)
                continue
            self._trace({"event": "RelaySend", "peer": record.origin if peer is None else peer,
                         "member": self.instance_id, "origin": record.origin,
                         "lsn": record.lsn, "t": now_s})
            self._trace({"event": "ApplierReceive", "member": self.instance_id, "origin": record.origin,
                         "lsn": record.lsn, "ops": traced_ops(record), "t": now_s})

    @_event
    def applier_applied(self, key: str, now_s: float) -> list[Action]:
        """The rows of the last ApplyRows are durable: acknowledge them."""
        actions = self._of_applier(key, self.appliers[key].rows_applied(now_s, self._store.vclock))
        return actions + self._synced_with(key, now_s)

    @_event
    def applier_apply_failed(self, key: str, now_s: float, error: str) -> list[Action]:
        if self.appliers[key].state is repl.ApplierState.STOPPED:  # removed while the rows were applied
            return []
        return self._of_applier(key, self.appliers[key].apply_failed(now_s, error))

    @_event
    def applier_schema_pending(self, key: str, now_s: float, schema_id: tuple[int, int], records: Sequence[Record],
                               *, own_allowed: bool) -> list[Action]:
        """The store took the rows of an ApplyRows up to one whose schema it lacks: the rest
        wait in the applier. The host calls `applier_schema_check` until they go."""
        if self.appliers[key].state is repl.ApplierState.STOPPED:
            return []
        return self._of_applier(key, self.appliers[key].schema_pending(
            now_s, schema_id, records, self._store.pending_vclock, own_allowed=own_allowed))

    @_event
    def applier_schema_check(self, key: str, now_s: float) -> list[Action]:
        """Rows of upstream `key` wait for a schema: an ApplyRows once the store holds it, a
        Disconnect past the wait's deadline, else nothing yet."""
        applier = self.appliers[key]
        if applier.waiting is None:
            return []
        return self._of_applier(key, applier.schema_check(now_s, self._store.pending_vclock))

    @_event
    def applier_heartbeat(self, key: str, now_s: float, relay_vclock: VClock) -> list[Action]:
        applier = self.appliers[key]
        if applier.state not in RECEIVING:
            return []
        actions = self._of_applier(key, applier.heartbeat(now_s, relay_vclock, self._store.vclock))
        return actions + self._synced_with(key, now_s)

    @_event
    def applier_link_lost(self, key: str, now_s: float, reason: str, *, unapplied: Sequence[Record] = ()) -> list[Action]:
        """The link to upstream `key` is gone. `unapplied`: the rows whose apply broke it,
        if an apply did; the first the store does not hold counts against the applier."""
        applier = self.appliers.get(key)
        if applier is None:
            return []
        actions: list[Action] = []
        if applier.state not in GONE:
            vclock = self._store.vclock
            failed_row = next(((r.origin, r.lsn) for r in unapplied if r.lsn > vclock.get(r.origin)), None)
            actions = self._of_applier(key, applier.disconnected(now_s, reason, failed_row=failed_row))
        actions += self._of_set(now_s, self.replicaset.upstream_failed(now_s, key))
        return actions + self._observe(now_s)

    @_event
    def applier_removed(self, key: str, now_s: float) -> list[Action]:
        """Upstream `key` was removed from the replica set (its `_cluster` row is gone)."""
        applier = self.appliers.get(key)
        return [] if applier is None else self._of_applier(key, applier.removed(now_s))

    @_event
    def applier_ignored(self, key: str, now_s: float, why: str) -> list[Action]:
        """Upstream `key` is this member itself, or a member followed under another key."""
        return self._of_applier(key, self.appliers[key].ignore(now_s, why))

    @_event
    def applier_tick(self, key: str, now_s: float) -> list[Action]:
        return self._of_applier(key, self.appliers[key].tick(now_s))

    # ---------------------------------------------------------------- relay events

    @_event
    def relay_subscribe(
        self, conn: int, now_s: float, *, subscriber: int, vclock: VClock, last_txn: dict[int, tuple[int, int]],
        include_own: bool,
    ) -> repl.Refuse | Accepted:
        """A SUBSCRIBE on connection `conn`: serve it, or say why not."""
        store = self._store
        relay = repl.Relay(subscriber=subscriber, own=self.instance_id, timeout_s=self._timeout_s)
        accepted = relay.subscribe(
            now_s,
            vclock=vclock,
            last_txn=last_txn,
            local_txn_at={origin: store.txn_at(origin, lsn) for origin, (lsn, _) in last_txn.items()},
            log_start=store.log_start(),
            include_own=include_own,
        )
        if isinstance(accepted, repl.Refuse):
            return accepted
        self.relays[conn] = relay
        return Accepted(vclock=store.vclock.replicated().to_dict(), actions=self._of_relay(conn, accepted))

    @_event
    def relay_rows(self, conn: int, now_s: float, records: Sequence[Record]) -> list[Action]:
        """Rows of the log, in log order, for the relay on `conn`: read for it, or flushed."""
        relay = self.relays.get(conn)
        if relay is None:
            return []
        return self._of_relay(conn, relay.rows(now_s, records, self._store.durable_vclock))

    @_event
    def relay_synced(self, conn: int, now_s: float) -> list[Action]:
        relay = self.relays.get(conn)
        if relay is None:
            return []
        return self._of_relay(conn, relay.synced(now_s, self._store.durable_vclock))

    @_event
    def relay_lost_rows(self, conn: int, now_s: float) -> list[Action]:
        """Flushed rows never reached the relay on `conn`: it reads the log again."""
        relay = self.relays.get(conn)
        if relay is None:
            return []
        return self._of_relay(conn, relay.lost_rows(now_s))

    @_event
    def relay_ack(self, conn: int, now_s: float, vclock: VClock) -> list[Action]:
        """The subscriber holds `vclock` durably: its relay hears it, and so do the
        transactions this member coordinates, which wait for members to hold their row."""
        relay = self.relays.get(conn)
        if relay is None:
            return []
        relay.ack(now_s, vclock)
        if relay.subscriber == repl.ANONYMOUS_SUBSCRIBER:
            return []  # a follower's copy counts toward no quorum and keeps no WAL
        self.gc.peer_acked(relay.subscriber, vclock)
        return self._of_quorum(self.coordinator.acked(now_s, relay.subscriber, vclock.to_dict()))

    @_event
    def relay_tick(self, conn: int, now_s: float) -> list[Action]:
        relay = self.relays.get(conn)
        if relay is None:
            return []
        return self._of_relay(conn, relay.tick(now_s, self._store.vclock))

    def relay_closed(self, conn: int) -> None:
        """The connection of a relay is gone, and the relay with it."""
        self.relays.pop(conn, None)

    # ---------------------------------------------------------------- member events

    def committed(self, now_s: float, records: Sequence[Record]) -> None:
        """A local transaction committed these rows, queued for the next flush (the spec's
        LocalWrite). Only the trace hears of it: call it only when `tracing`."""
        if self._trace is None:
            return
        for record in records:
            self._trace({"event": "LocalWrite", "member": self.instance_id, "lsn": record.lsn, "hlc": stamp(record),
                         "ops": traced_ops(record), "t": now_s})

    def wal_flushed(self, now_s: float) -> None:
        """The WAL took rows (the spec's WalFlush, applied rows and local ones alike). Only
        the trace hears of it: a host whose relays follow the flushes on their own (the
        server's relay tasks) calls it, one that steps them all here calls `flushed`."""
        if self._trace is None:
            return
        vclock = self._store.vclock
        members = sorted(set(self._membership().ids.values()) | {self.instance_id})
        self._trace({"event": "WalFlush", "member": self.instance_id, "vclock": {m: vclock.get(m) for m in members},
                     "table": self._traced_table() if self._traced_table is not None else {}, "t": now_s})

    @_event
    def flushed(self, now_s: float, records: Sequence[Record]) -> list[Action]:
        """The WAL took these rows: traced (`wal_flushed`), and every relay hears of them,
        in log order."""
        if records:
            self.wal_flushed(now_s)
        durable = self._store.durable_vclock
        actions: list[Action] = []
        for conn, relay in list(self.relays.items()):
            actions += self._of_relay(conn, relay.rows(now_s, records, durable))
        return actions

    def wal_synced(self, now_s: float, *, advanced: bool) -> None:
        """The WAL was fsynced; `advanced` when that made rows durable that were not (the
        spec's WalSync). Only the trace hears of it, as for `wal_flushed`."""
        if advanced and self._trace is not None:
            self._trace({"event": "WalSync", "member": self.instance_id, "t": now_s})

    @_event
    def synced(self, now_s: float, *, advanced: bool) -> list[Action]:
        """The WAL was fsynced: traced (`wal_synced`), and relays may send rows they
        withheld for it."""
        self.wal_synced(now_s, advanced=advanced)
        durable = self._store.durable_vclock
        actions: list[Action] = []
        for conn, relay in list(self.relays.items()):
            actions += self._of_relay(conn, relay.synced(now_s, durable))
        return actions

    @_event
    def tick(self, now_s: float) -> list[Action]:
        """Time passed, for every applier and relay."""
        actions: list[Action] = []
        for key, applier in self.appliers.items():
            actions += self._of_applier(key, applier.tick(now_s))
        vclock = self._store.vclock
        for conn, relay in list(self.relays.items()):
            actions += self._of_relay(conn, relay.tick(now_s, vclock))
        return actions

    # ---------------------------------------------------------------- quorum transaction events

    @_event
    def txn_begin(self, now_s: float, txn_id: int, *, reads: Mapping[quorum.Key, quorum.Version],
                  members: frozenset[int], level: quorum.Level, deadline_s: float) -> list[Action]:
        """A client's QUORUM or ALL transaction starts here (spec Begin): PREPARE for the
        others, and this member's own answer, first, for the host to make durable."""
        actions = self._of_quorum(self.coordinator.begin(now_s, txn_id, reads, members, level, deadline_s))
        self._trace_txn("Begin", txn_id, now_s, reads={_traced_key(k): [v.hlc, v.origin] for k, v in reads.items()})
        answer = self._prepare(now_s, txn_id, self.instance_id, members, reads, view=members)
        assert answer is not None, "a transaction just begun has no outcome yet"
        return self._skip_dead(now_s, [QuorumAction(action=answer)] + actions
                               + self._answered_by(now_s, self.instance_id, answer))

    @_event
    def txn_prepare(self, now_s: float, txn_id: int, *, coordinator: int, members: frozenset[int],
                    reads: Mapping[quorum.Key, quorum.Version],
                    view: frozenset[int]) -> quorum.Prepared | quorum.Conflicted | None:
        """A PREPARE from `coordinator` (spec Prepare): the answer, which the host makes
        durable before sending it; None for a transaction whose outcome is known here.
        `view` is the registered members as this member knows them now."""
        return self._prepare(now_s, txn_id, coordinator, members, reads, view=view)

    def _prepare(self, now_s: float, txn_id: int, coordinator: int, members: frozenset[int],
                 reads: Mapping[quorum.Key, quorum.Version], *,
                 view: frozenset[int]) -> quorum.Prepared | quorum.Conflicted | None:
        again = txn_id in self.participant.pending
        answer = self.participant.prepare(now_s, txn_id, coordinator, members, reads, self._stored(reads), view=view,
                                          active=self.replicaset.registration is None,
                                          held=self._held() if quorum.is_membership_change(reads) else None,
                                          row_applied=self._store.quorum_row(txn_id) is not None)
        if isinstance(answer, quorum.Prepared) and not again:
            self._trace_txn("Prepare", txn_id, now_s)
        return answer

    @_event
    def txn_answered(self, now_s: float, member: int, answer: quorum.Prepared | quorum.Conflicted) -> list[Action]:
        """`member` answered a PREPARE of ours."""
        return self._answered_by(now_s, member, answer)

    @_event
    def txn_undelivered(self, now_s: float, member: int, txn_id: int) -> list[Action]:
        """A PREPARE of ours did not reach `member`; the next tick sends it again."""
        return self._of_quorum(self.coordinator.undelivered(now_s, txn_id, member))

    @_event
    def txn_member_dead(self, now_s: float, member: int, txn_id: int | None = None) -> list[Action]:
        """SWIM holds `member` DEAD: the coordinator waits for it no more, in every undecided
        transaction of ours (or `txn_id`, whose PREPARE was not sent to it)."""
        return self._decided(now_s, self.coordinator.member_dead(now_s, member, txn_id))

    @_event
    def txn_committed(self, now_s: float, txn_id: int, origin: int, lsn: int) -> list[Action]:
        """The row of a DecideCommit is written and applied here at `(origin, lsn)` (spec
        DecideCommit: the decision is the row)."""
        if self._trace is not None:
            self._trace_txn("DecideCommit", txn_id, now_s, lsn=lsn, hlc=self._store.txn_at(origin, lsn))
        return self._of_quorum(self.coordinator.committed(now_s, txn_id, origin, lsn))

    @_event
    def txn_write_failed(self, now_s: float, txn_id: int) -> list[Action]:
        """The row of a DecideCommit could not be written: the transaction aborts."""
        return self._decided(now_s, self.coordinator.write_failed(now_s, txn_id))

    @_event
    def txn_durable(self, now_s: float, member: int, vclock: Mapping[int, int]) -> list[Action]:
        """`member` (this one too) holds `vclock` durably, as a COMMIT's answer says."""
        return self._of_quorum(self.coordinator.acked(now_s, member, vclock))

    @_event
    def txn_rows_applied(self, now_s: float, txn_ids: Sequence[int]) -> None:
        """Rows of quorum transactions were applied here, ours included (spec ApplierReceive,
        traced when the row was taken)."""
        for txn_id in txn_ids:
            self.participant.row_applied(txn_id)

    @_event
    def txn_abort(self, now_s: float, txn_id: int) -> None:
        """An ABORT from the coordinator, or this member's own ReleaseIntents."""
        self._participant_abort(now_s, txn_id)
        self.participant.abort(txn_id)

    def txn_tick(self, now_s: float) -> list[Action]:
        """Time passed for quorum transactions: deadlines, and questions about silent ones.
        With none under way nothing can happen, and the invariants are not checked again:
        the host ticks often."""
        if not self.participant.pending and not self.txn_unfinished():
            return []
        return self._txn_tick(now_s)

    @_event
    def _txn_tick(self, now_s: float) -> list[Action]:
        return (self._skip_dead(now_s, self._decided(now_s, self.coordinator.tick(now_s)))
                + self._of_quorum(self.participant.tick(now_s)))

    def _skip_dead(self, now_s: float, actions: list[Action]) -> list[Action]:
        """Each PREPARE as the coordinator sends it given whom SWIM holds DEAD now
        (`Coordinator.send_prepare` decides)."""
        if self.swim is None:
            return actions
        kept: list[Action] = []
        for tagged in actions:
            action = tagged.action if isinstance(tagged, QuorumAction) else None
            if isinstance(action, quorum.SendPrepare):
                dead = frozenset(m for m in action.to if self.swim.state_of(m) is swim.MemberState.DEAD)
                kept += self._decided(now_s, self.coordinator.send_prepare(now_s, action, dead))
            else:
                kept.append(tagged)
        return kept

    # ---------------------------------------------------------------- SWIM

    @_event
    def swim_tick(self, now_s: float) -> list[Action]:
        assert self.swim is not None
        actions = self.swim.tick(now_s)
        if self._trace is not None:
            self._trace_swim(now_s, actions)
        return self._of_swim(now_s, actions)

    @_event
    def swim_received(self, now_s: float, kind: str, sender: int, seq: int, target: int | None,
                      updates: Sequence[swim.Update]) -> list[Action]:
        """A datagram from `sender`, decoded and checked by the host: `kind` is ping, ack or
        ping_req (with its `target`)."""
        assert self.swim is not None
        if kind == "ping_req":
            assert target is not None
            actions = self.swim.ping_req_received(now_s, sender, target, seq, updates)
        else:
            received = self.swim.ping_received if kind == "ping" else self.swim.ack_received
            actions = received(now_s, sender, seq, updates)
        if self._trace is not None:
            self._trace_swim(now_s, actions, received=(sender, updates))
        return self._of_swim(now_s, actions)

    @_event
    def swim_members(self, now_s: float, members: Mapping[int, str]) -> list[Action]:
        """The registered members, id -> address, as `_cluster` holds them now."""
        assert self.swim is not None
        return self._of_swim(now_s, self.swim.members_changed(now_s, members))

    @_event
    def swim_removed(self, now_s: float, member: int) -> list[Action]:
        assert self.swim is not None
        return self._of_swim(now_s, self.swim.removed(now_s, member))

    def _trace_swim(self, now_s: float, actions: Sequence[swim.Action], *,
                    received: tuple[int, Sequence[swim.Update]] | None = None) -> None:
        """The lines of `specs/Swim.tla` an event of the core took, in the order the core
        took them (a message's updates are read from the view when it is made, after the
        changes before it). The view goes on the last line that can change it."""
        assert self._trace is not None and self.swim is not None
        own = self.instance_id
        lines: list[dict[str, Any]] = []
        if received is not None:
            sender, updates = received
            lines.append({"event": "PingReceived", "member": own, "peer": sender, "updates": traced_updates(updates)})
        for action in actions:
            if isinstance(action, swim.StateChanged):
                if received is None:  # a receipt's changes are the merges its PingReceived lines make
                    lines.append({"event": _TICK_CHANGES[action.state], "member": own, "peer": action.member,
                                  "inc": action.incarnation})
            else:
                to = action.via if isinstance(action, swim.SendPingReq) else action.to
                lines.append({"event": "TickPing", "member": own, "peer": to,
                              "updates": traced_updates(action.updates)})
        changes = [line for line in lines if line["event"] != "TickPing"]
        if changes:
            changes[-1]["view"] = {m.member: [m.state.value, m.incarnation] for m in self.swim.view()}
        for line in lines:
            self._trace({**line, "t": now_s})

    def _of_swim(self, now_s: float, actions: Sequence[swim.Action]) -> list[Action]:
        """SWIM's actions; a member it declares DEAD is waited for by no undecided
        transaction of ours from now on."""
        tagged: list[Action] = []
        for action in actions:
            tagged.append(SwimAction(action=action))
            if isinstance(action, swim.StateChanged) and action.state is swim.MemberState.DEAD:
                tagged += self._decided(now_s, self.coordinator.member_dead(now_s, action.member))
        return tagged

    def txn_decides_alone(self, level: quorum.Level, members: frozenset[int]) -> bool:
        """Whether a transaction at `level` begun now is this member's own row, durable
        before the answer, with no two-phase commit (`quorum.decides_alone`)."""
        in_flight = bool(self.coordinator.undecided() or self.participant.intents.keys)
        return quorum.decides_alone(level, members, self.instance_id, in_flight=in_flight)

    def txn_unfinished(self) -> dict[int, frozenset[int]]:
        """The transactions this member coordinates and has not decided, with the members
        they were sent to: the host's heartbeats keep those members from asking."""
        return {txn.txn_id: txn.members - {self.instance_id} for txn in self.coordinator.undecided()}

    def txn_coordinator(self, txn_id: int) -> int:
        """The coordinator a question about `txn_id` names: the one its PREPARE named, this
        member for its own transactions."""
        pending = self.participant.pending.get(txn_id)
        return pending.coordinator if pending is not None else self.instance_id

    @_event
    def txn_heartbeat(self, now_s: float, txn_id: int) -> None:
        self.participant.heartbeat(now_s, txn_id)

    @_event
    def txn_query(self, now_s: float, txn_id: int, *, coordinator: int, asker: int) -> list[Action]:
        """`asker` wants the decision (spec QueryDecision): the coordinator answers, deciding
        ABORT if there is none; any other member passes on what it learned."""
        if coordinator != self.instance_id:
            return self._of_quorum(self.participant.query_decision(now_s, txn_id, asker))
        actions = self.coordinator.query_decision(now_s, txn_id, asker, self._row_here(txn_id))
        if any(isinstance(a, quorum.DecideAbort) for a in actions):
            self._trace_txn("QueryDecision", txn_id, now_s, member=asker, coordinator=self.instance_id)
        return self._of_quorum(actions)

    @_event
    def txn_members(self, now_s: float, view: frozenset[int]) -> None:
        """The registered members changed (a join, a removal applied here)."""
        self.participant.view_changed(view)

    @_event
    def txn_stop_following(self, now_s: float, member: int, *, view: frozenset[int]) -> None:
        """Removed `member` is followed no more (spec StopFollowing): its appliers ended
        with every row they took applied, its COMMITs are refused, and the removal is
        durable here."""
        self.participant.stop_following(now_s, member, view)
        if self._trace is not None:
            self._trace({"event": "StopFollowing", "member": self.instance_id, "peer": member, "t": now_s})

    @_event
    def txn_row_query(self, now_s: float, txn_id: int, *, coordinator: int, asker: int,
                      view: frozenset[int]) -> list[Action]:
        """`asker` asks whether this member holds the row of removed `coordinator`'s
        `txn_id`: answered from the rows applied here, never from the records that
        collection may drop."""
        actions = self.participant.row_query(now_s, txn_id, coordinator, asker, view, self._row_here(txn_id))
        if any(isinstance(action, quorum.NoRow) for action in actions):
            self._trace_txn("AnswerNoRow", txn_id, now_s, peer=asker)
        return self._of_quorum(actions)

    @_event
    def txn_no_row(self, now_s: float, txn_id: int, *, member: int, view: frozenset[int]) -> list[Action]:
        """`member` answered our QueryRow: it holds no row of `txn_id`."""
        actions = self.participant.no_row(now_s, txn_id, member, view)
        if actions:
            self._trace_txn("ResolveRemoved", txn_id, now_s)
        return self._of_quorum(actions)

    @_event
    def txn_decision(self, now_s: float, txn_id: int, decision: quorum.Decision) -> None:
        """An answer to a QueryDecision of ours."""
        if decision is quorum.Decision.ABORT:
            self._participant_abort(now_s, txn_id)
        self.participant.decision_learned(txn_id, decision)

    @_event
    def txn_collect(self, now_s: float, records: Sequence[quorum.DecidedRecord], *, now_ms: int,
                    members: frozenset[int], min_retention_ms: int, max_retention_ms: int) -> list[int]:
        """The decided transactions whose records may go (`quorum.collectable`, on what every
        member acknowledged to our relays and COMMITs), forgotten by both cores here; the
        host deletes their records."""
        collected = quorum.collectable(records, now_ms=now_ms, members=members, applied=self.coordinator.durable,
                                       min_retention_ms=min_retention_ms, max_retention_ms=max_retention_ms)
        self.coordinator.forget(collected)
        self.participant.forget(collected)
        return collected

    def _row_here(self, txn_id: int) -> quorum.RowHere:
        row = self._store.quorum_row(txn_id)
        if row is None:
            return quorum.RowHere.NONE
        origin, lsn = row
        return quorum.RowHere.DURABLE if self._store.durable_vclock.get(origin) >= lsn else quorum.RowHere.WRITTEN

    @_event
    def txn_restart(self, now_s: float, *, view: frozenset[int]) -> None:
        """The host starts ticking: the participant's pending transactions, recovered from
        the metastore, get a full timeout from now before it asks about them, but those of
        a coordinator no longer in `view`, the registered members."""
        self.participant.restart(now_s, view)

    @_event
    def txn_recover(self, now_s: float, txn_id: int, *, members: frozenset[int], level: quorum.Level,
                    aborted: bool, committed_at: tuple[int, int] | None = None) -> list[Action]:
        """A transaction this member coordinated before it restarted, from its record (the
        aborts this decides are the spec's Restart, which the host traces); `committed_at`
        is the row a record decided COMMITTED names."""
        return self._of_quorum(self.coordinator.recover(now_s, txn_id, members, level, self._store.quorum_row(txn_id),
                                                        aborted, committed_at))

    def _answered_by(self, now_s: float, member: int, answer: quorum.Prepared | quorum.Conflicted) -> list[Action]:
        if isinstance(answer, quorum.Prepared):
            return self._of_quorum(self.coordinator.prepared(now_s, answer.txn_id, member, answer.held))
        return self._decided(now_s, self.coordinator.conflict(now_s, answer.txn_id, member, answer.key, answer.holder,
                                                              answer.holder_member))

    def _decided(self, now_s: float, actions: Sequence[quorum.Action]) -> list[Action]:
        """Actions of the coordinator that may decide ABORT on its own (spec DecideAbort)."""
        for action in actions:
            if isinstance(action, quorum.DecideAbort):
                self._trace_txn("DecideAbort", action.txn_id, now_s)
        return self._of_quorum(actions)

    def _participant_abort(self, now_s: float, txn_id: int) -> None:
        """Spec ParticipantAbort, traced when ABORT releases the intents of another member's
        transaction (the coordinator's own go with its DecideAbort)."""
        pending = self.participant.pending.get(txn_id)
        if pending is not None and pending.coordinator != self.instance_id and self.participant.intents.keys.get(txn_id):
            self._trace_txn("ParticipantAbort", txn_id, now_s)

    def _trace_txn(self, event: str, txn_id: int, now_s: float, **fields: Any) -> None:
        """A line of `specs/QuorumCommit.tla`: `member` is this member unless given."""
        if self._trace is not None:
            self._trace({"event": event, "member": self.instance_id, "txn": txn_id, **fields, "t": now_s})

    def _stored(self, reads: Mapping[quorum.Key, quorum.Version]) -> dict[quorum.Key, quorum.Version]:
        stored = self._store.stored_versions(reads)
        return {key: quorum.Version(hlc=hlc, origin=origin) for key, (hlc, origin) in stored.items()}

    # ---------------------------------------------------------------- WAL GC

    def gc_restored(self, peers: Mapping[int, Mapping[int, int]]) -> None:
        """The GC consumers of registered peers as the metastore kept them, at start:
        what they acknowledged before the restart still holds their rows."""
        self.gc.peers_changed(peers)
        for peer, acked in peers.items():
            self.gc.peer_acked(peer, acked)

    @_event
    def gc_collect(self, now_s: float, segments: Sequence[gc.Segment], *, checkpoints: Sequence[VClock],
                   peers: frozenset[int]) -> list[Action]:
        """A pass of WAL GC over the log's `segments` and the kept `checkpoints`, for the
        registered `peers`. `now_s` is on the clock the segments' write times are on (the
        host's wall clock: they are file times)."""
        self.gc.peers_changed(peers)
        plan = self.gc.collect(now_s, segments, checkpoints=checkpoints, database=self._store.vclock)
        self.gc_kept = plan.kept
        return [GcAction(action=plan.remove)] if plan.remove is not None else []

    # ---------------------------------------------------------------- tombstone purge

    def purge_restored(self, removed: Mapping[int, int]) -> None:
        """The settled ends of removed members' origins as the metastore kept them, at start."""
        self.purge.restored(removed)

    @_event
    def purge_pass(self, now_s: float, peers: frozenset[int]) -> list[Action]:
        """A tombstone purge pass over what the registered `peers` acknowledged (their GC
        consumers) and what SQLite holds here; the host reads `peers` from that same state
        and deletes what a `PurgeUnder` says. An anonymous follower acknowledges to no one,
        so no member's rule counts it: it keeps its tombstones."""
        if self.instance_id == repl.ANONYMOUS_SUBSCRIBER:
            return []
        self.gc.peers_changed(peers)
        vclocks = {peer: self.gc.peers[peer] for peer in peers}
        vclocks[self.instance_id] = self._store.vclock.to_dict()
        return [PurgeAction(action=a) for a in self.purge.passed(now_s, self.instance_id, vclocks)]

    # ---------------------------------------------------------------- anti-entropy

    @_event
    def anti_entropy_check(self, now_s: float) -> list[Action]:
        """Compare the member's vclock with each peer it follows that SWIM holds alive
        (every one, without SWIM), by their relays' word, and how far each holds our own
        rows: a checkpoint transfer when delta sync is not enough (`core.anti_entropy`).
        Not while recovering own rows or registering: the replica-set core decides then."""
        if self.replicaset.phase in (Phase.RECOVERING, Phase.REGISTERING):
            return []
        ids = self._membership().ids
        live = {swim.MemberState.ALIVE, swim.MemberState.JOINING}
        alive = (set(ids.values()) if self.swim is None
                 else {m.member for m in self.swim.view() if m.state in live})
        acked = self.acked(self.instance_id)
        peers = {}
        for key, applier in self.appliers.items():
            peer = ids.get(key)
            if peer is None or peer not in alive:
                continue
            vclock = applier.upstream_vclock.to_dict()
            peers[peer] = anti_entropy.PeerView(
                vclock=vclock, own_held=max(vclock.get(self.instance_id, 0), acked.get(peer) or 0),
                syncing=applier.state is repl.ApplierState.SYNC)
        wanted = self.anti_entropy.check(now_s, self._store.vclock.to_dict(), peers)
        return [AntiEntropyAction(action=a) for a in wanted]

    @_event
    def members_changed(self, now_s: float) -> list[Action]:
        """The host's membership may have changed: the replica-set core looks again."""
        return self._observe(now_s)

    @_event
    def replication_configured(self, now_s: float, *, timeout_s: float, backoff_max_s: float, skip_conflict: bool,
                               participant_timeout_s: float, connect_quorum: int | None) -> list[Action]:
        """`box.cfg{...}` changed how the member replicates: every applier and relay, and
        those to come, take the new timeout and skip rule (a deadline already set keeps its
        own), the participant waits `participant_timeout_s` for a silent coordinator, and
        the replica-set core looks at the upstreams again with the new connect quorum."""
        self._timeout_s, self._backoff_max_s, self._skip_conflict = timeout_s, backoff_max_s, skip_conflict
        for applier in self.appliers.values():
            applier.timeout_s, applier.backoff_max_s, applier.skip_conflict = timeout_s, backoff_max_s, skip_conflict
        for relay in self.relays.values():
            relay.timeout_s = timeout_s
        self.participant.timeout_s = participant_timeout_s
        self.replicaset.configured_quorum = connect_quorum
        return self._observe(now_s)

    @_event
    def check_rejoin(self, now_s: float, *, rejoin_timeout_s: float) -> list[Action]:
        """Whether the member must re-join from a checkpoint, and through whom."""
        own = self.instance_id
        # An anonymous follower has no rows of its own to lose: any member it follows will do.
        acked = (self.acked(own) if own != repl.ANONYMOUS_SUBSCRIBER
                 else dict.fromkeys(self._membership().ids.values(), 0))
        actions = self.replicaset.check_rejoin(now_s, own_lsn=self._store.vclock.get(own), acked=acked,
                                               rejoin_timeout_s=rejoin_timeout_s)
        if any(isinstance(action, Rejoin) for action in actions):  # a gap repair: counted with the others
            self.anti_entropy.count(anti_entropy.Repair.GAP)
        return self._of_set(now_s, actions)

    def check_invariants(self) -> None:
        """The store's, every core's, and no relay ahead of the store's durable cut for
        our own rows."""
        if self._check_store is not None:
            self._check_store()
        self.replicaset.check_invariants()
        self.coordinator.check_invariants()
        self.participant.check_invariants()
        self.gc.check_invariants()
        self.purge.check_invariants()
        self.anti_entropy.check_invariants()
        if self.swim is not None:
            self.swim.check_invariants()
        for applier in self.appliers.values():
            applier.check_invariants()
        if self.relays:
            durable = self._store.durable_vclock
            for relay in self.relays.values():
                relay.check_invariants()
                assert relay.sent_past(durable) == 0, (
                    f"member {self.instance_id}: relay for {relay.subscriber} sent rows of ours past the durable cut")

    # ---------------------------------------------------------------- the replica set

    def _synced_with(self, key: str, now_s: float) -> list[Action]:
        """An applier may have synced: a recovering member heard its peer's answer."""
        if self._trace is not None and self.recovering and self.appliers[key].state is repl.ApplierState.FOLLOW:
            self._trace_answer(self._peer_id(key), now_s)
        return self._observe(now_s)

    def _observe(self, now_s: float) -> list[Action]:
        if self.replicaset.phase is Phase.RUNNING:
            return []
        membership = self._membership()
        following = frozenset(k for k, a in self.appliers.items() if a.state is repl.ApplierState.FOLLOW)
        view = View(members=membership.members, upstreams=membership.upstreams, following=following,
                    registration_holders=frozenset(self._registration_holders(membership)),
                    caught_up=self._caught_up())
        return self._of_set(now_s, self.replicaset.observe(now_s, view))

    def _registration_holders(self, membership: Membership) -> set[int]:
        """Members known to hold our `_cluster` row: their vclock of the origin that wrote
        it reaches the LSN the join told us, by what they reported as upstreams (at
        subscribe, in rows and heartbeats) or acknowledged as downstreams. Ourselves too,
        once it is here."""
        registration = self.replicaset.registration
        if registration is None:
            return set()
        origin, lsn = registration.origin, registration.lsn
        holders = {subscriber for subscriber, acked in self.acked(origin).items() if acked >= lsn}
        holders |= {membership.ids[key] for key, applier in self.appliers.items()
                    if key in membership.ids and applier.upstream_vclock.get(origin) >= lsn}
        if self._store.vclock.get(origin) >= lsn:
            holders.add(self.instance_id)
        return holders

    def _held(self) -> dict[int, int]:
        """What a vote for a membership change carries: our durable rows of every origin
        but the local one, which no other member has."""
        return {origin: lsn for origin, lsn in self._store.durable_vclock.items() if origin != LOCAL_ORIGIN}

    def _caught_up(self) -> bool:
        """We hold what our registration's voters held (MembershipQuorum R3)."""
        registration, vclock = self.replicaset.registration, self._store.vclock
        return registration is None or all(vclock.get(o) >= lsn for o, lsn in registration.barrier.items())

    # ---------------------------------------------------------------- tagging and tracing

    def _of_applier(self, key: str, actions: list[repl.Action]) -> list[Action]:
        return [ApplierAction(key=key, action=a) for a in actions]

    def _of_relay(self, conn: int, actions: list[repl.Action]) -> list[Action]:
        return [RelayAction(conn=conn, action=a) for a in actions]

    def _of_quorum(self, actions: Sequence[quorum.Action]) -> list[Action]:
        return [QuorumAction(action=a) for a in actions]

    def _of_set(self, now_s: float, actions: list[Any]) -> list[Action]:
        if self._trace is not None:
            for action in actions:
                if isinstance(action, RecoveryGaveUp):
                    peer = self._peer_id(action.upstream)
                    if peer not in self._answered:
                        self._answered.add(peer)
                        self._trace({"event": "RecoveryGiveUp", "peer": peer, "member": self.instance_id, "t": now_s})
                elif isinstance(action, RecoveryDone):
                    self._trace({"event": "RecoveryFinish", "member": self.instance_id, "t": now_s})
        return [SetAction(action=a) for a in actions]

    def _trace_answer(self, peer: int | None, now_s: float) -> None:
        assert self._trace is not None
        if peer not in self._answered:
            self._answered.add(peer)
            self._trace({"event": "RecoveryAnswer", "peer": peer, "member": self.instance_id, "t": now_s})

    def _peer_id(self, key: str) -> int | None:
        return self._membership().ids.get(key)


def _traced_key(key: quorum.Key) -> str:
    """An intent key `(table, key)` as traced rows name it (the row key names its table)."""
    return str(key[1]) if isinstance(key, tuple) else str(key)
