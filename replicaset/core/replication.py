"""Replication cores: the applier (receiving side) and the relay (sending side).

Theory of operation (docs/design/README.md §4.3, Tarantool's relay/applier):
- An applier follows one upstream peer. It connects, subscribes with its vclock and, per
  origin, the `(lsn, txn_id)` of the last row it holds, then receives rows. Rows go to the
  single writer (`ApplyRows`), which applies each `(origin, lsn)` once against its pending
  vclock; the applier only acknowledges what the writer made durable (`SendAck`). It is in
  SYNC until it holds everything the relay had at subscribe time, then in FOLLOW. A peer
  silent for `4 * timeout_s` is disconnected; reconnects back off, capped at
  `backoff_max_s`, and the backoff is reset only by progress (rows made durable), not by
  a subscribe that then fails again. A row that cannot be applied stops it (STOPPED)
  unless conflicts may be skipped; a row whose apply breaks the link
  `APPLY_FAILURES_MAX` times in a row (a gap, a schema that never comes, a bug) stops it
  too, naming the row: retrying a deterministic failure forever helps no one.
- A data row whose schema (a DDL row of another origin) the member does not hold yet
  waits for it (docs/design/README.md §4.6): the writer says so (`schema_pending`), the applier keeps that
  row and every row after it, and hands them back (`ApplyRows`) once the member holds the
  schema, which another upstream brings. A wait longer than the silence timeout breaks the
  link, and counts against the row. While it waits the applier reads nothing from its
  link, so no silence timeout runs; rows still received (a host that keeps reading) queue
  behind the waiting ones.
- A relay serves one subscriber. At SUBSCRIBE it refuses a split brain (the subscriber
  holds, at some LSN of an origin, a row with another txn id than ours) and a request for
  rows its log no longer has (never streams a hole). Then it sends, in log order, every
  durable row the subscriber lacks, skipping rows of origin 0 (local) and, unless asked
  for them, of the subscriber's own origin. Heartbeats carry its vclock when idle.
- Time is an argument (`now_s`), never read; actions are returned, never performed.

Action and method names are those of `specs/VClockReplication.tla`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum

from replicaset.core.admission import Admission, admit
from replicaset.core.replicaset import Refusal
from replicaset.core.transitions import LocalProtocolError, transition
from wal import LOCAL_ORIGIN, Record, VClock

SILENCE_TIMEOUTS = 4
APPLY_FAILURES_MAX = 5
# Rows a relay keeps while they wait for the sync that makes them durable; past it, it
# keeps none and re-reads them from the log once synced.
WITHHELD_ROWS_MAX = 65536


# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True, kw_only=True)
class Connect:
    peer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SendSubscribe:
    peer: str
    vclock: dict[int, int]
    last_txn: dict[int, tuple[int, int]]
    include_own: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyRows:
    """Apply each row once. `own_allowed`: rows of the member's own origin are taken (its
    start-up fetch of the rows it lost); `skip_conflicts`: a row that cannot be applied is
    held without its changes (`replication_skip_conflict`)."""

    peer: str
    records: tuple[Record, ...]
    own_allowed: bool = False
    skip_conflicts: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAck:
    peer: str
    vclock: dict[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Disconnect:
    peer: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SendRows:
    subscriber: int
    records: tuple[Record, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendHeartbeat:
    subscriber: int
    vclock: dict[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncWal:
    """fsync the WAL: a relay withholds rows of our origin until they are durable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadLog:
    """Read the log after `after` and hand its rows to the relay (at subscribe, and when
    the relay kept no rows for a while)."""

    subscriber: int
    after: dict[int, int]


@dataclass(frozen=True, slots=True, kw_only=True)
class Refuse:
    refusal: Refusal
    message: str


Action = Connect | SendSubscribe | ApplyRows | SendAck | Disconnect | SendRows | SendHeartbeat | SyncWal | ReadLog


# ---------------------------------------------------------------- applier


@dataclass(frozen=True, slots=True, kw_only=True)
class SchemaWait:
    """Rows kept while the first waits for the DDL row `schema_id`, until `deadline_s`."""

    schema_id: tuple[int, int]
    records: tuple[Record, ...]
    own_allowed: bool
    deadline_s: float


class ApplierState(Enum):
    CONNECT = "connect"
    AUTH = "auth"
    SYNC = "sync"
    FOLLOW = "follow"
    STOPPED = "stopped"
    DISCONNECTED = "disconnected"


S = ApplierState
_GONE = frozenset({S.DISCONNECTED, S.STOPPED})
# h11's transition table: state -> event -> the states the event may leave the applier in.
# An event missing from its state's row is a LocalProtocolError; a method that leaves the
# applier in a state its row does not list fails an assertion.
APPLIER_TRANSITIONS: dict[ApplierState, dict[str, frozenset[ApplierState]]] = {
    S.DISCONNECTED: {"start": frozenset({S.CONNECT}), "tick": frozenset({S.DISCONNECTED, S.CONNECT}),
                     "disconnected": _GONE},
    S.CONNECT: {"connected": frozenset({S.AUTH}), "ignore": frozenset({S.STOPPED}), "disconnected": _GONE,
                "tick": frozenset({S.CONNECT, S.DISCONNECTED})},
    S.AUTH: {"subscribed": frozenset({S.SYNC, S.FOLLOW}), "refused": _GONE, "disconnected": _GONE,
             "tick": frozenset({S.AUTH, S.DISCONNECTED})},
    S.SYNC: {"rows_received": frozenset({S.SYNC}), "rows_applied": frozenset({S.SYNC, S.FOLLOW}),
             "apply_failed": frozenset({S.SYNC, S.STOPPED}), "schema_pending": frozenset({S.SYNC}),
             "schema_check": frozenset({S.SYNC}) | _GONE, "heartbeat": frozenset({S.SYNC, S.FOLLOW}),
             "disconnected": _GONE, "tick": frozenset({S.SYNC}) | _GONE},
    S.FOLLOW: {"rows_received": frozenset({S.FOLLOW}), "rows_applied": frozenset({S.FOLLOW}),
               "apply_failed": frozenset({S.FOLLOW, S.STOPPED}), "schema_pending": frozenset({S.FOLLOW}),
               "schema_check": frozenset({S.FOLLOW}) | _GONE, "heartbeat": frozenset({S.FOLLOW}),
               "disconnected": _GONE, "tick": frozenset({S.FOLLOW}) | _GONE},
    S.STOPPED: {"tick": frozenset({S.STOPPED}), "disconnected": frozenset({S.STOPPED}),
                "rows_applied": frozenset({S.STOPPED})},
}
# A member removed from the set (`box.remove`) is followed no more, whatever the state.
for _row in APPLIER_TRANSITIONS.values():
    _row["removed"] = frozenset({S.STOPPED})

@dataclass
class Applier:
    peer: str
    timeout_s: float
    backoff_max_s: float = 30.0
    skip_conflict: bool = False
    state: ApplierState = ApplierState.DISCONNECTED
    message: str | None = None
    last_heard_s: float = 0.0
    retry_at_s: float = 0.0
    attempts: int = 0
    sync_target: VClock = field(default_factory=VClock)
    upstream_vclock: VClock = field(default_factory=VClock)
    lag_s: float = 0.0
    failed_row: tuple[int, int] | None = None
    failures: int = 0
    waiting: SchemaWait | None = None

    def __str__(self) -> str:
        return f"applier for {self.peer}"

    @transition(APPLIER_TRANSITIONS)
    def start(self, now_s: float) -> list[Action]:
        self.state, self.last_heard_s = S.CONNECT, now_s
        return [Connect(peer=self.peer)]

    @transition(APPLIER_TRANSITIONS)
    def connected(self, now_s: float, vclock: VClock, last_txn: Mapping[int, tuple[int, int]], *, include_own: bool = False) -> list[Action]:
        self.state, self.last_heard_s = S.AUTH, now_s
        return [
            SendSubscribe(
                peer=self.peer, vclock=vclock.replicated().to_dict(), last_txn=dict(last_txn), include_own=include_own
            )
        ]

    @transition(APPLIER_TRANSITIONS)
    def subscribed(self, now_s: float, relay_vclock: VClock, local_vclock: VClock) -> list[Action]:
        self.message, self.last_heard_s = None, now_s
        self.sync_target = relay_vclock.copy()
        self.upstream_vclock = relay_vclock.copy()
        self.state = S.FOLLOW if local_vclock.covers(relay_vclock.replicated()) else S.SYNC
        return []

    @transition(APPLIER_TRANSITIONS)
    def refused(self, now_s: float, refusal: Refusal, message: str) -> list[Action]:
        """The peer refused SUBSCRIBE. A final refusal (split brain, rows gone, another
        replica set) stops the applier: the operator decides. A peer that does not know us
        yet is tried again after the backoff."""
        if refusal.final:
            self.state, self.message = S.STOPPED, message
            return [Disconnect(peer=self.peer, reason=message)]
        return self.disconnected(now_s, message) + [Disconnect(peer=self.peer, reason=message)]

    @transition(APPLIER_TRANSITIONS)
    def removed(self, now_s: float) -> list[Action]:
        """The upstream was removed from the replica set: nothing it sends is taken from
        now on (a removed member that still writes forks from the set, docs/design/README.md §4.7)."""
        linked = self.state in (S.AUTH, S.SYNC, S.FOLLOW)
        if self.state is not S.STOPPED:
            self.state, self.message, self.waiting = S.STOPPED, "removed from the replica set", None
        return [Disconnect(peer=self.peer, reason="removed from the replica set")] if linked else []

    @transition(APPLIER_TRANSITIONS)
    def rows_received(self, now_s: float, records: Sequence[Record], *, own_allowed: bool = False) -> list[Action]:
        """Rows from the relay go to the writer; `own_allowed` while the member recovers
        rows of its own origin (it subscribed with `include_own`)."""
        self.last_heard_s = now_s
        for record in records:
            if record.lsn > self.upstream_vclock.get(record.origin):
                self.upstream_vclock.reset(record.origin, record.lsn)
        if self.waiting is not None:
            self.waiting = replace(self.waiting, records=self.waiting.records + tuple(records))
            return []
        if not records:
            return []
        return [ApplyRows(peer=self.peer, records=tuple(records), own_allowed=own_allowed,
                          skip_conflicts=self.skip_conflict)]

    @transition(APPLIER_TRANSITIONS)
    def rows_applied(self, now_s: float, durable_vclock: VClock) -> list[Action]:
        """The writer made rows durable: acknowledge, and leave SYNC once caught up."""
        if self.state is S.STOPPED:
            return []
        self._progressed(durable_vclock)
        self._leave_sync(durable_vclock)
        return [SendAck(peer=self.peer, vclock=durable_vclock.replicated().to_dict())]

    def _progressed(self, durable_vclock: VClock) -> None:
        """Rows were made durable: the link works, so the next failure backs off from the start."""
        self.attempts = 0
        if self.failed_row is not None and durable_vclock.get(self.failed_row[0]) >= self.failed_row[1]:
            self.failed_row, self.failures = None, 0

    def _leave_sync(self, durable_vclock: VClock) -> None:
        """Synced once we hold what the relay had at subscribe time, from whichever peer."""
        if self.state is S.SYNC and durable_vclock.covers(self.sync_target.replicated()):
            self.state = S.FOLLOW

    @transition(APPLIER_TRANSITIONS)
    def apply_failed(self, now_s: float, error: str) -> list[Action]:
        """A row could not be applied; with skip_conflict the runtime skipped it already."""
        if self.skip_conflict:
            return []
        self.state, self.message, self.waiting = S.STOPPED, error, None
        return [Disconnect(peer=self.peer, reason=error)]

    @transition(APPLIER_TRANSITIONS)
    def schema_pending(self, now_s: float, schema_id: tuple[int, int], records: Sequence[Record],
                       pending: VClock, *, own_allowed: bool = False) -> list[Action]:
        """The writer took the rows of `records` before the first whose schema it lacks
        (`pending`: what it holds, flushed or not); the rest wait for that schema."""
        if self.waiting is not None:
            raise LocalProtocolError(f"applier for {self.peer}: schema_pending while it waits already")
        self.waiting = SchemaWait(
            schema_id=schema_id, records=tuple(r for r in records if r.lsn > pending.get(r.origin)),
            own_allowed=own_allowed, deadline_s=now_s + SILENCE_TIMEOUTS * self.timeout_s)
        return []

    @transition(APPLIER_TRANSITIONS)
    def schema_check(self, now_s: float, pending: VClock) -> list[Action]:
        """The host looks again while rows wait: once the member holds their schema they go
        to the writer, past the deadline the link breaks."""
        waiting = self.waiting
        if waiting is None:
            return []
        origin, lsn = waiting.schema_id
        if pending.get(origin) >= lsn:
            self.waiting, self.last_heard_s = None, now_s
            records = tuple(r for r in waiting.records if r.lsn > pending.get(r.origin))
            if not records:
                return []
            return [ApplyRows(peer=self.peer, records=records, own_allowed=waiting.own_allowed,
                              skip_conflicts=self.skip_conflict)]
        return self._wait_expired(now_s, waiting)

    def _wait_expired(self, now_s: float, waiting: SchemaWait) -> list[Action]:
        if now_s < waiting.deadline_s:
            return []
        first, (origin, lsn) = waiting.records[0], waiting.schema_id
        reason = f"row {first.origin}:{first.lsn} waited too long for its schema {origin}:{lsn}"
        stopped = self.disconnected(now_s, reason, failed_row=(first.origin, first.lsn))
        return stopped or [Disconnect(peer=self.peer, reason=reason)]

    @transition(APPLIER_TRANSITIONS)
    def heartbeat(self, now_s: float, relay_vclock: VClock, durable_vclock: VClock) -> list[Action]:
        """The relay is alive; answer with what we hold so it knows we are too. Rows
        that reached us through other peers may have synced us with this one: a recovering
        member must not wait for rows this relay will never send."""
        self.last_heard_s = now_s
        self.upstream_vclock = self.upstream_vclock.merge(relay_vclock)
        self._progressed(durable_vclock)
        self._leave_sync(durable_vclock)
        return [SendAck(peer=self.peer, vclock=durable_vclock.replicated().to_dict())]

    @transition(APPLIER_TRANSITIONS)
    def ignore(self, now_s: float, message: str) -> list[Action]:
        """The upstream is this instance itself, or a member followed by its UUID already."""
        self.state, self.message = S.STOPPED, message
        return [Disconnect(peer=self.peer, reason=message)]

    @transition(APPLIER_TRANSITIONS)
    def disconnected(self, now_s: float, reason: str, *, failed_row: tuple[int, int] | None = None) -> list[Action]:
        """The link broke; try again after a capped exponential backoff. `failed_row` is
        the row whose apply broke it, if one did: the same row failing again and again
        stops the applier."""
        self.waiting = None
        if self.state is S.STOPPED:
            return []
        if failed_row is not None:
            self.failures = self.failures + 1 if failed_row == self.failed_row else 1
            self.failed_row = failed_row
            if self.failures >= APPLY_FAILURES_MAX:
                origin, lsn = failed_row
                message = f"row {origin}:{lsn} failed {self.failures} times in a row, last: {reason}"
                self.state, self.message = S.STOPPED, message
                return [Disconnect(peer=self.peer, reason=message)]
        self.state, self.message = S.DISCONNECTED, reason
        self.attempts += 1
        self.retry_at_s = now_s + min(self.backoff_max_s, self.timeout_s * 2 ** min(self.attempts - 1, 16))
        return []

    @transition(APPLIER_TRANSITIONS)
    def tick(self, now_s: float) -> list[Action]:
        if self.state is S.DISCONNECTED and now_s >= self.retry_at_s:
            self.state, self.last_heard_s = S.CONNECT, now_s
            return [Connect(peer=self.peer)]
        if self.waiting is not None:
            return self._wait_expired(now_s, self.waiting)
        if self.state in (S.CONNECT, S.AUTH, S.SYNC, S.FOLLOW) and now_s - self.last_heard_s > SILENCE_TIMEOUTS * self.timeout_s:
            reason = f"no message from {self.peer} for {now_s - self.last_heard_s:.1f} s"
            self.disconnected(now_s, reason)
            return [Disconnect(peer=self.peer, reason=reason)]
        return []

    def check_invariants(self) -> None:
        assert self.state in APPLIER_TRANSITIONS
        assert self.state is not S.STOPPED or self.message, "a stopped applier says why"
        assert self.attempts >= 0
        assert self.waiting is None or (self.state in (S.SYNC, S.FOLLOW) and self.waiting.records), (
            "rows wait for a schema only on a link that receives, and only while there are rows")


# ---------------------------------------------------------------- relay

# The subscriber id of an anonymous follower's relay: no member has it (ids are 1..31), and
# rows of origin 0 (local tables) are never relayed anyway.
ANONYMOUS_SUBSCRIBER = LOCAL_ORIGIN


class RelayState(Enum):
    SUBSCRIBE = "subscribe"
    FOLLOW = "follow"
    STOPPED = "stopped"


R = RelayState
_FOLLOWING = {"rows": frozenset({R.FOLLOW}), "synced": frozenset({R.FOLLOW}), "lost_rows": frozenset({R.FOLLOW}),
              "ack": frozenset({R.FOLLOW}), "tick": frozenset({R.FOLLOW, R.STOPPED})}
# As the applier's: state -> event -> the states it may leave the relay in. A stopped relay
# takes every event of a following one and does nothing.
RELAY_TRANSITIONS: dict[RelayState, dict[str, frozenset[RelayState]]] = {
    R.SUBSCRIBE: {"subscribe": frozenset({R.FOLLOW, R.STOPPED})},
    R.FOLLOW: _FOLLOWING,
    R.STOPPED: {event: frozenset({R.STOPPED}) for event in _FOLLOWING},
}


@dataclass
class Relay:
    """Serves one subscriber; `sent` is what it has sent, `acked` what it confirmed.

    Rows of this member's own origin (`own`) go out only once durable (FINDINGS F1): a
    row a peer holds must not be one an OS crash can take from us, or we would reuse its
    LSN. Rows past the durable cut are withheld, and every row after them too (log order),
    until the runtime says the cut moved; the relay asks for the sync (`SyncWal`). Past
    `WITHHELD_ROWS_MAX` it keeps none and re-reads them from the log (`ReadLog`)."""

    subscriber: int
    own: int
    timeout_s: float
    state: RelayState = RelayState.SUBSCRIBE
    include_own: bool = False
    sent: VClock = field(default_factory=VClock)
    acked: VClock = field(default_factory=VClock)
    held_at_subscribe: VClock = field(default_factory=VClock)
    durable: VClock = field(default_factory=VClock)
    withheld: list[Record] = field(default_factory=list)
    behind: bool = False
    last_sent_s: float = 0.0
    last_ack_s: float = 0.0

    def __str__(self) -> str:
        return f"relay for {self.subscriber}"

    @transition(RELAY_TRANSITIONS)
    def subscribe(
        self,
        now_s: float,
        *,
        vclock: VClock,
        last_txn: Mapping[int, tuple[int, int]],
        local_txn_at: Mapping[int, int | None],
        log_start: VClock,
        include_own: bool = False,
    ) -> Refuse | list[Action]:
        """Accept a subscriber, and read the log for it; or say why not. `local_txn_at[origin]` is the txn id this
        member holds at `last_txn[origin]`'s LSN (None when it does not hold that row)."""
        for origin, (lsn, txn_id) in sorted(last_txn.items()):
            ours = local_txn_at.get(origin)
            if ours is not None and ours != txn_id:
                self.state = RelayState.STOPPED
                return Refuse(
                    refusal=Refusal.SPLIT_BRAIN,
                    message=(
                        f"split brain at origin {origin} lsn {lsn}: the subscriber holds txn "
                        f"{txn_id:#x}, this member holds {ours:#x}"
                    ),
                )
        wanted = vclock.copy()
        if not include_own:
            wanted.reset(self.subscriber, max(wanted.get(self.subscriber), log_start.get(self.subscriber)))
        wanted.reset(LOCAL_ORIGIN, log_start.get(LOCAL_ORIGIN))
        if not wanted.covers(log_start.replicated()):
            self.state = RelayState.STOPPED
            return Refuse(
                refusal=Refusal.ROWS_UNAVAILABLE,
                message=(
                    f"this member's log starts at {log_start.to_dict()}; the subscriber needs rows after "
                    f"{vclock.to_dict()}: join again from a checkpoint"
                ),
            )
        self.state = RelayState.FOLLOW
        self.include_own = include_own
        replicated = vclock.replicated()
        self.sent, self.acked, self.held_at_subscribe = replicated, replicated.copy(), replicated.copy()
        self.last_sent_s = self.last_ack_s = now_s
        return [ReadLog(subscriber=self.subscriber, after=self.sent.to_dict())]

    @transition(RELAY_TRANSITIONS)
    def rows(self, now_s: float, records: Sequence[Record], durable: VClock) -> list[Action]:
        """Rows flushed here, in log order (from the log or as they are flushed): send what
        the subscriber lacks, up to the durable cut of our own rows."""
        if self.state is not RelayState.FOLLOW or self.behind:
            return []
        waiting = bool(self.withheld)
        self.withheld += [r for r in records if self._wanted(r)]
        if len(self.withheld) > WITHHELD_ROWS_MAX:
            self.withheld, self.behind = [], True
            return [SyncWal()]
        return self._release(now_s, durable, asked=waiting)

    @transition(RELAY_TRANSITIONS)
    def synced(self, now_s: float, durable: VClock) -> list[Action]:
        """Our WAL was fsynced up to `durable`: rows withheld for it may go."""
        if self.state is not RelayState.FOLLOW:
            return []
        if self.behind:
            self.behind = False
            self.durable = self.durable.merge(durable)
            return [ReadLog(subscriber=self.subscriber, after=self.sent.to_dict())]
        return self._release(now_s, durable, asked=False)

    @transition(RELAY_TRANSITIONS)
    def lost_rows(self, now_s: float) -> list[Action]:
        """Rows flushed here did not reach the relay (its queue was full): read the log."""
        if self.state is not RelayState.FOLLOW:
            return []
        self.withheld, self.behind = [], False
        return [ReadLog(subscriber=self.subscriber, after=self.sent.to_dict())]

    def _wanted(self, record: Record) -> bool:
        origin = record.origin
        return origin != LOCAL_ORIGIN and (origin != self.subscriber or self.include_own)

    def _release(self, now_s: float, durable: VClock, *, asked: bool) -> list[Action]:
        self.durable = self.durable.merge(durable)
        cut = self.durable.get(self.own)
        out = []
        for index, record in enumerate(self.withheld):
            if record.origin == self.own and record.lsn > cut:
                self.withheld = self.withheld[index:]
                break
            admission = admit(self.sent.get(record.origin), record.lsn)
            if admission is Admission.HELD:
                continue
            if admission is Admission.GAP:
                raise LocalProtocolError(
                    f"relay for {self.subscriber}: row {record.origin}:{record.lsn} after "
                    f"{record.origin}:{self.sent.get(record.origin)} is a hole"
                )
            self.sent.follow(record.origin, record.lsn)
            out.append(record)
        else:
            self.withheld = []
        actions: list[Action] = []
        if out:
            self.last_sent_s = now_s
            actions.append(SendRows(subscriber=self.subscriber, records=tuple(out)))
        if self.withheld and not asked:
            actions.append(SyncWal())
        return actions

    @transition(RELAY_TRANSITIONS)
    def ack(self, now_s: float, vclock: VClock) -> None:
        self.last_ack_s = now_s
        self.acked = self.acked.merge(vclock)

    @transition(RELAY_TRANSITIONS)
    def tick(self, now_s: float, local_vclock: VClock) -> list[Action]:
        if self.state is not RelayState.FOLLOW:
            return []
        if now_s - self.last_ack_s > SILENCE_TIMEOUTS * self.timeout_s:
            self.state = RelayState.STOPPED
            return [Disconnect(peer=str(self.subscriber), reason=f"subscriber {self.subscriber} silent")]
        if now_s - self.last_sent_s >= self.timeout_s:
            self.last_sent_s = now_s
            return [SendHeartbeat(subscriber=self.subscriber, vclock=local_vclock.to_dict())]
        return []

    def sent_past(self, durable: VClock) -> int:
        """How many rows of our own origin this relay sent beyond `durable` (the subscriber
        may hold more of them than we have synced: it got them before, from a checkpoint
        or another incarnation of this relay)."""
        own = self.own
        return max(0, self.sent.get(own) - max(durable.get(own), self.held_at_subscribe.get(own)))

    def check_invariants(self) -> None:
        assert self.state in RelayState
        assert self.sent.get(LOCAL_ORIGIN) == 0 or self.state is RelayState.SUBSCRIBE, "local rows are never relayed"
        assert self.sent_past(self.durable) == 0, "own rows are relayed only once durable"
        assert not (self.behind and self.withheld), "a relay behind keeps no row: it re-reads the log"
        assert len(self.withheld) <= WITHHELD_ROWS_MAX
