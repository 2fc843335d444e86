"""SWIM membership (docs/design/README.md §4.8): one member's failure detector and its view of the set.

Theory of operation (the SWIM paper with Marmot's states and timeouts; spec
`specs/Swim.tla`, decisions in `docs/design/swim.md`):
- The view holds the registered members (`members_changed`, from `_cluster`), each with
  a state and an incarnation. The member's own entry is ALIVE, or JOINING until it has
  caught up (`caught_up`), at its own incarnation, which only the member itself raises.
- Each protocol period (`gossip_interval_s`) the member pings one other member, walking
  a shuffled list of them: one ping each per round, a new round reshuffles, a newcomer
  goes in at a random place of what is left of the round, REMOVED members are skipped.
  No ack within `ping_timeout_s`: up to `gossip_fanout` other live members ping the
  target for it (PING-REQ) and relay its ack. No ack, direct or relayed, by the end of
  the period: the target is SUSPECT at the incarnation this view holds. DEAD members
  are still pinged (no PING-REQ), so two sides of a healed partition find each other.
- A suspicion becomes DEAD once it has lasted `suspect_timeout_s` and nothing came
  from the member for `dead_timeout_s` (both Marmot's: the first is the time a
  suspected member has to refute, the second bounds the silence before DEAD).
- An update `(member, state, incarnation)` wins when its incarnation is higher, or, at
  the same incarnation, when it escalates (`EQUAL_INCARNATION_MOVES`): a stale ALIVE
  never erases a suspicion only its subject can refute. REMOVED (the operator's) beats
  everything and is final. News of oneself that would win over one's own entry is
  refuted: the incarnation goes above it.
- Every message carries the sender's own entry first (a message from a member proves
  it alive at its incarnation), then, to a member this view holds SUSPECT or DEAD, that
  accusation (so it refutes at once), or its entry as held when its last message claimed
  a lower incarnation (a member restarted at 0 that nobody accuses learns the incarnation
  of its previous life, and goes above it), then the changes this member saw, each sent
  `retransmit_mult * ceil(log10(n + 1))` times, least sent and newest first, at most
  `piggyback_max` updates a message.
- A message from, or news about, a member the view does not hold is ignored: the view
  is `_cluster`'s, never a sender's. A REMOVED member is not listened to; a member that
  learns it was removed goes silent.
- The view steers relays, anti-entropy and whom a coordinator waits for. It never
  changes a quorum's size, which stays counted on the total registered membership
  (docs/design/README.md §4.5): nothing here counts the live members.

Time is an argument (`now_s`), randomness an injected `Shuffler` (`random.Random` in the
runtime, a seeded one in tests); actions are returned, never performed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from replicaset.core.replicaset import MEMBERS_MAX
from replicaset.core.transitions import LocalProtocolError, transition

# A message carries at most this many updates, whatever the sender's `piggyback_max`.
UPDATES_MAX = 16
INCARNATION_MAX = 2**63 - 1
# PING-REQs served at once; one more is dropped (its asker suspects, as on a lost one).
RELAYS_MAX = 32


class MemberState(Enum):
    ALIVE = "alive"
    JOINING = "joining"
    SUSPECT = "suspect"
    DEAD = "dead"
    REMOVED = "removed"


S = MemberState
# The state's number on the wire.
STATE_CODES: dict[MemberState, int] = {S.ALIVE: 0, S.JOINING: 1, S.SUSPECT: 2, S.DEAD: 3, S.REMOVED: 4}
_STATE_BY_CODE = {code: state for state, code in STATE_CODES.items()}

# At an equal incarnation an update replaces the held state only by one further along
# ALIVE -> JOINING -> SUSPECT -> DEAD. A higher incarnation replaces any state but
# REMOVED; REMOVED replaces any state at any incarnation and nothing replaces it.
EQUAL_INCARNATION_MOVES: dict[MemberState, frozenset[MemberState]] = {
    S.ALIVE: frozenset({S.JOINING, S.SUSPECT, S.DEAD}),
    S.JOINING: frozenset({S.SUSPECT, S.DEAD}),
    S.SUSPECT: frozenset({S.DEAD}),
    S.DEAD: frozenset(),
}
_LIVE = frozenset({S.ALIVE, S.JOINING})
_ACCUSED = frozenset({S.SUSPECT, S.DEAD})

_EVENTS = ("tick", "ping_received", "ack_received", "ping_req_received", "members_changed", "removed")
# The member's own state (h11's table, `transitions.transition`): any event may tell it
# it was removed; `caught_up` ends JOINING; a removed member takes every event and does
# nothing.
SELF_TRANSITIONS: dict[MemberState, dict[str, frozenset[MemberState]]] = {
    S.JOINING: {**{e: frozenset({S.JOINING, S.REMOVED}) for e in _EVENTS}, "caught_up": frozenset({S.ALIVE})},
    S.ALIVE: {**{e: frozenset({S.ALIVE, S.REMOVED}) for e in _EVENTS}, "caught_up": frozenset({S.ALIVE})},
    S.REMOVED: {e: frozenset({S.REMOVED}) for e in (*_EVENTS, "caught_up")},
}


class Shuffler(Protocol):
    """Where the core's randomness comes from: `random.Random` has this method."""

    def shuffle(self, x: list[Any], /) -> None: ...


class SwimProtocolError(Exception):
    """A peer's SWIM message does not decode: the datagram is dropped, the view untouched."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SwimSettings:
    """`[cluster]` (Marmot's names and defaults, in seconds). `ping_timeout_s` leaves the
    rest of the period to the indirect probe; `retransmit_mult` is SWIM's lambda."""

    gossip_interval_s: float = 1.0
    ping_timeout_s: float = 0.5
    gossip_fanout: int = 3
    suspect_timeout_s: float = 5.0
    dead_timeout_s: float = 10.0
    piggyback_max: int = 8
    retransmit_mult: int = 4

    def __post_init__(self) -> None:
        if not self.gossip_interval_s > 0:
            raise ValueError(f"gossip_interval_s must be positive, not {self.gossip_interval_s}")
        if not 0 < self.ping_timeout_s < self.gossip_interval_s:
            raise ValueError(f"ping_timeout_s must be in (0, gossip_interval_s), not {self.ping_timeout_s}")
        if self.gossip_fanout < 0:
            raise ValueError(f"gossip_fanout must not be negative, not {self.gossip_fanout}")
        if not 0 < self.suspect_timeout_s <= self.dead_timeout_s:
            raise ValueError(
                f"need 0 < suspect_timeout_s <= dead_timeout_s, not {self.suspect_timeout_s} and {self.dead_timeout_s}")
        if not 2 <= self.piggyback_max <= UPDATES_MAX:
            raise ValueError(f"piggyback_max must be in 2..{UPDATES_MAX}, not {self.piggyback_max}")
        if self.retransmit_mult < 1:
            raise ValueError(f"retransmit_mult must be at least 1, not {self.retransmit_mult}")


# ---------------------------------------------------------------- the wire


@dataclass(frozen=True, slots=True, kw_only=True)
class Update:
    """What one view says of one member; on the wire `[member, state code, incarnation]`."""

    member: int
    state: MemberState
    incarnation: int


def encode_updates(updates: Sequence[Update]) -> list[list[int]]:
    return [[u.member, STATE_CODES[u.state], u.incarnation] for u in updates]


def _is_int(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def decode_updates(raw: object) -> tuple[Update, ...]:
    """Every field checked before any is used: a bad one raises `SwimProtocolError`
    naming it, and the caller feeds nothing of that message to the core."""
    if not isinstance(raw, (list, tuple)):
        raise SwimProtocolError(f"updates must be a list, not {type(raw).__name__}")
    if len(raw) > UPDATES_MAX:
        raise SwimProtocolError(f"{len(raw)} updates in one message, more than {UPDATES_MAX}")
    decoded = []
    for index, item in enumerate(raw):
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise SwimProtocolError(f"update {index} must be [member, state, incarnation], not {item!r:.80}")
        member, code, incarnation = item
        if not _is_int(member, 1, MEMBERS_MAX):
            raise SwimProtocolError(f"update {index}: member {member!r:.40} is not an instance id in 1..{MEMBERS_MAX}")
        if not _is_int(code, 0, len(STATE_CODES) - 1):
            raise SwimProtocolError(f"update {index}: state {code!r:.40} is not a state code")
        if not _is_int(incarnation, 0, INCARNATION_MAX):
            raise SwimProtocolError(f"update {index}: incarnation {incarnation!r:.40} is not in 0..{INCARNATION_MAX}")
        decoded.append(Update(member=member, state=_STATE_BY_CODE[code], incarnation=incarnation))
    return tuple(decoded)


# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPing:
    to: int
    address: str
    seq: int
    updates: tuple[Update, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendAck:
    """The answer to a ping, or a relayed one: `seq` is the asker's."""

    to: int
    address: str
    seq: int
    updates: tuple[Update, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class SendPingReq:
    """Ask `via` to ping `target` and relay its ack under `seq`."""

    via: int
    address: str
    target: int
    seq: int
    updates: tuple[Update, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChanged:
    """This view's entry for `member` changed: for the log, and to steer relays,
    anti-entropy and the coordinator (never the quorum size)."""

    member: int
    state: MemberState
    incarnation: int


Action = SendPing | SendAck | SendPingReq | StateChanged


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberInfo:
    """A row of `box.info.members`; `last_heard_s` is None until a message came."""

    member: int
    address: str
    state: MemberState
    incarnation: int
    last_heard_s: float | None


# ---------------------------------------------------------------- the core


@dataclass(slots=True)
class _Entry:
    address: str
    state: MemberState
    incarnation: int
    last_heard_s: float | None = None
    suspected_s: float | None = None


@dataclass(slots=True)
class _Probe:
    target: int
    seq: int
    sent_s: float
    asked: bool = False
    helpers: frozenset[int] = frozenset()
    acked: bool = False


@dataclass(frozen=True, slots=True)
class _Relay:
    """A ping sent for `origin`'s PING-REQ: `target`'s ack goes back as `origin_seq`."""

    origin: int
    origin_seq: int
    target: int
    expires_s: float


@dataclass(slots=True)
class _Rumor:
    """A change of an entry still to be piggybacked; `order` grows with each change."""

    transmits: int
    order: int


def _wins(held: _Entry, state: MemberState, incarnation: int) -> bool:
    if held.state is S.REMOVED:
        return False
    if state is S.REMOVED:
        return True
    if incarnation != held.incarnation:
        return incarnation > held.incarnation
    return state in EQUAL_INCARNATION_MOVES[held.state]


class Swim:
    """One member's failure detector and membership view. `state` is the member's own
    state (the transition table's); `state_of(member)` any member's, as this view holds it."""

    def __init__(self, member: int, address: str, rng: Shuffler, settings: SwimSettings = SwimSettings(), *,
                 incarnation: int = 0, joining: bool = False) -> None:
        if not _is_int(member, 1, MEMBERS_MAX):
            raise LocalProtocolError(f"swim: {member!r} is not an instance id")
        if not _is_int(incarnation, 0, INCARNATION_MAX):
            raise LocalProtocolError(f"swim of {member}: incarnation {incarnation!r} is not in 0..{INCARNATION_MAX}")
        self.member = member
        self.settings = settings
        self._rng = rng
        self._view: dict[int, _Entry] = {member: _Entry(address, S.JOINING if joining else S.ALIVE, incarnation)}
        self._order: list[int] = []
        self._cursor = 0
        self._period_end_s: float | None = None
        self._probe: _Probe | None = None
        self._relays: dict[int, _Relay] = {}
        self._rumors: dict[int, _Rumor] = {}
        self._changes = 0
        self._next_seq = 1
        self._checked: dict[int, tuple[int, MemberState]] = {}
        # Members whose last message claimed an incarnation below the one held: told it.
        self._behind: set[int] = set()

    def __str__(self) -> str:
        return f"swim of {self.member}"

    @property
    def state(self) -> MemberState:
        return self._view[self.member].state

    @property
    def incarnation(self) -> int:
        return self._view[self.member].incarnation

    def state_of(self, member: int) -> MemberState | None:
        """None: `member` is not a registered member in this view."""
        entry = self._view.get(member)
        return entry.state if entry is not None else None

    def view(self) -> tuple[MemberInfo, ...]:
        return tuple(
            MemberInfo(member=m, address=e.address, state=e.state, incarnation=e.incarnation,
                       last_heard_s=e.last_heard_s)
            for m, e in sorted(self._view.items())
        )

    # ------------------------------------------------------------ events

    @transition(SELF_TRANSITIONS)
    def tick(self, now_s: float) -> list[Action]:
        """Call it often (every ping_timeout_s / 2 or so): probes, suspicions and relays
        move only here, and no later than the tick after they are due."""
        if self.state is S.REMOVED:
            return []
        actions: list[Action] = []
        probe = self._probe
        timed_out = probe is not None and now_s >= probe.sent_s + self.settings.ping_timeout_s
        if probe is not None and timed_out and not probe.acked and not probe.asked:
            actions += self._ask_helpers(now_s, probe)
        if self._period_end_s is None or now_s >= self._period_end_s:
            actions += self._end_probe(now_s)
            actions += self._start_probe(now_s)
        actions += self._expire(now_s)
        return actions

    @transition(SELF_TRANSITIONS)
    def ping_received(self, now_s: float, sender: int, seq: int, updates: Sequence[Update]) -> list[Action]:
        if not self._listens_to(sender):
            return []
        actions = self._heard(now_s, sender, updates)
        if self._listens_to(sender):
            actions.append(self._send_ack(sender, seq))
        return actions

    @transition(SELF_TRANSITIONS)
    def ack_received(self, now_s: float, sender: int, seq: int, updates: Sequence[Update]) -> list[Action]:
        """An ack of our probe, from its target or from a member we asked to ping it; or
        the target's ack of a ping we sent for someone else's PING-REQ, relayed back."""
        if not self._listens_to(sender):
            return []
        actions = self._heard(now_s, sender, updates)
        probe = self._probe
        if probe is not None and probe.seq == seq and (sender == probe.target or sender in probe.helpers):
            probe.acked = True
            self._view[probe.target].last_heard_s = now_s
        relay = self._relays.get(seq)
        if relay is not None and relay.target == sender:
            del self._relays[seq]
            if self._listens_to(relay.origin):
                actions.append(self._send_ack(relay.origin, relay.origin_seq))
        return actions

    @transition(SELF_TRANSITIONS)
    def ping_req_received(self, now_s: float, sender: int, target: int, seq: int,
                          updates: Sequence[Update]) -> list[Action]:
        if not self._listens_to(sender):
            return []
        actions = self._heard(now_s, sender, updates)
        if target == sender or not self._listens_to(target) or not self._listens_to(sender):
            return actions
        if len(self._relays) >= RELAYS_MAX:
            return actions
        relay_seq = self._take_seq()
        self._relays[relay_seq] = _Relay(origin=sender, origin_seq=seq, target=target,
                                         expires_s=now_s + self.settings.gossip_interval_s)
        actions.append(SendPing(to=target, address=self._view[target].address, seq=relay_seq,
                                updates=self._piggyback(target)))
        return actions

    @transition(SELF_TRANSITIONS)
    def members_changed(self, now_s: float, members: Mapping[int, str], *,
                        joining: Set[int] = frozenset()) -> list[Action]:
        """The registered members (`_cluster`: id -> "host:port"). A newcomer is ALIVE, or
        JOINING if in `joining`, at incarnation 0; a member no longer registered leaves
        the view (that is no REMOVED: the registry forgot it). The member itself stays."""
        for member in members:
            if not _is_int(member, 1, MEMBERS_MAX):
                raise LocalProtocolError(f"{self}: {member!r} is not an instance id")
        if self.state is S.REMOVED:
            return []
        for member in [m for m in self._view if m != self.member and m not in members]:
            self._drop(member)
        actions: list[Action] = []
        for member, address in sorted(members.items()):
            if member == self.member:
                continue
            entry = self._view.get(member)
            if entry is not None:
                entry.address = address
                continue
            state = S.JOINING if member in joining else S.ALIVE
            self._view[member] = _Entry(address, state, 0)
            self._join_round(member)
            actions.append(StateChanged(member=member, state=state, incarnation=0))
        return actions

    @transition(SELF_TRANSITIONS)
    def removed(self, now_s: float, member: int) -> list[Action]:
        """The operator removed `member` (a `_cluster` removal seen here): final, and
        gossiped. A member unknown to the view is ignored: the registry dropped it already."""
        if self.state is S.REMOVED or member not in self._view:
            return []
        return self._merge(now_s, Update(member=member, state=S.REMOVED, incarnation=self._view[member].incarnation))

    @transition(SELF_TRANSITIONS)
    def caught_up(self, now_s: float) -> list[Action]:
        """The member holds what its peers held when it joined: JOINING ends, at a new
        incarnation (ALIVE does not beat JOINING at an equal one)."""
        own = self._view[self.member]
        if own.state is not S.JOINING:
            return []
        own.state, own.incarnation = S.ALIVE, own.incarnation + 1
        return [StateChanged(member=self.member, state=own.state, incarnation=own.incarnation)]

    # ------------------------------------------------------------ receiving

    def _listens_to(self, sender: int) -> bool:
        """A removed member listens to no one; no one listens to a removed or unknown one."""
        entry = self._view.get(sender)
        return (self.state is not S.REMOVED and sender != self.member and entry is not None
                and entry.state is not S.REMOVED)

    def _heard(self, now_s: float, sender: int, updates: Sequence[Update]) -> list[Action]:
        """Merge a message's updates; note whether the sender claims less than this view
        holds of it (a restart it has not heard of), to tell it."""
        self._view[sender].last_heard_s = now_s
        actions: list[Action] = []
        for update in updates:
            actions += self._merge(now_s, update)
        claims = [u.incarnation for u in updates if u.member == sender]
        if claims and claims[0] < self._view[sender].incarnation:
            self._behind.add(sender)
        elif claims:
            self._behind.discard(sender)
        return actions

    def _merge(self, now_s: float, update: Update) -> list[Action]:
        held = self._view.get(update.member)
        if held is None or not _wins(held, update.state, update.incarnation):
            return []
        if update.member == self.member:
            return self._news_of_self(update)
        return self._set(now_s, update.member, update.state, max(held.incarnation, update.incarnation))

    def _news_of_self(self, update: Update) -> list[Action]:
        """News that would win over our own entry: a removal is accepted (and the member
        goes silent); anything else is refuted from a higher incarnation."""
        own = self._view[self.member]
        if update.state is S.REMOVED:
            own.state = S.REMOVED
            self._probe, self._relays, self._rumors, self._order, self._cursor = None, {}, {}, [], 0
            self._behind = set()
        else:
            own.incarnation = update.incarnation + 1
        return [StateChanged(member=self.member, state=own.state, incarnation=own.incarnation)]

    def _set(self, now_s: float, member: int, state: MemberState, incarnation: int) -> list[Action]:
        entry = self._view[member]
        entry.state, entry.incarnation = state, incarnation
        entry.suspected_s = now_s if state is S.SUSPECT else None
        if state is S.REMOVED:
            self._leave_round(member)
            if self._probe is not None and self._probe.target == member:
                self._probe = None
        self._changes += 1
        self._rumors[member] = _Rumor(transmits=0, order=self._changes)
        return [StateChanged(member=member, state=state, incarnation=incarnation)]

    def _drop(self, member: int) -> None:
        del self._view[member]
        self._rumors.pop(member, None)
        self._behind.discard(member)
        self._leave_round(member)
        probe = self._probe
        if probe is not None and probe.target == member:
            self._probe = None
        elif probe is not None and member in probe.helpers:
            probe.helpers = probe.helpers - {member}
        self._relays = {seq: r for seq, r in self._relays.items() if member not in (r.origin, r.target)}

    # ------------------------------------------------------------ probing

    def _take_seq(self) -> int:
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq

    def _probed(self) -> list[int]:
        return [m for m, e in self._view.items() if m != self.member and e.state is not S.REMOVED]

    def _join_round(self, member: int) -> None:
        """A newcomer goes in at a random place of what is left of the round."""
        places = list(range(self._cursor, len(self._order) + 1))
        self._rng.shuffle(places)
        self._order.insert(places[0], member)

    def _leave_round(self, member: int) -> None:
        if member in self._order:
            index = self._order.index(member)
            del self._order[index]
            if index < self._cursor:
                self._cursor -= 1

    def _next_target(self) -> int | None:
        if self._cursor >= len(self._order):
            self._order = sorted(self._probed())
            self._rng.shuffle(self._order)
            self._cursor = 0
        if not self._order:
            return None
        target = self._order[self._cursor]
        self._cursor += 1
        return target

    def _start_probe(self, now_s: float) -> list[Action]:
        self._period_end_s = now_s + self.settings.gossip_interval_s
        target = self._next_target()
        if target is None:
            return []
        probe = self._probe = _Probe(target=target, seq=self._take_seq(), sent_s=now_s)
        return [SendPing(to=target, address=self._view[target].address, seq=probe.seq,
                         updates=self._piggyback(target))]

    def _ask_helpers(self, now_s: float, probe: _Probe) -> list[Action]:
        """The indirect probe: it gets the rest of a period, even if the tick came late.
        A DEAD target is pinged directly only."""
        probe.asked = True
        if self._view[probe.target].state is S.DEAD:
            return []
        helpers = [m for m, e in sorted(self._view.items())
                   if m not in (self.member, probe.target) and e.state in _LIVE]
        self._rng.shuffle(helpers)
        probe.helpers = frozenset(helpers[:self.settings.gossip_fanout])
        assert self._period_end_s is not None
        rest_s = self.settings.gossip_interval_s - self.settings.ping_timeout_s
        self._period_end_s = max(self._period_end_s, now_s + rest_s)
        return [SendPingReq(via=h, address=self._view[h].address, target=probe.target, seq=probe.seq,
                            updates=self._piggyback(h)) for h in sorted(probe.helpers)]

    def _end_probe(self, now_s: float) -> list[Action]:
        probe, self._probe = self._probe, None
        if probe is None or probe.acked:
            return []
        entry = self._view[probe.target]
        if entry.state not in _LIVE:
            return []
        return self._set(now_s, probe.target, S.SUSPECT, entry.incarnation)

    def _dead_at_s(self, entry: _Entry) -> float:
        assert entry.suspected_s is not None
        due_s = entry.suspected_s + self.settings.suspect_timeout_s
        if entry.last_heard_s is not None:
            due_s = max(due_s, entry.last_heard_s + self.settings.dead_timeout_s)
        return due_s

    def _expire(self, now_s: float) -> list[Action]:
        actions: list[Action] = []
        for member, entry in sorted(self._view.items()):
            if entry.state is S.SUSPECT and now_s >= self._dead_at_s(entry):
                actions += self._set(now_s, member, S.DEAD, entry.incarnation)
        self._relays = {seq: r for seq, r in self._relays.items() if r.expires_s > now_s}
        return actions

    # ------------------------------------------------------------ sending

    def _send_ack(self, to: int, seq: int) -> SendAck:
        return SendAck(to=to, address=self._view[to].address, seq=seq, updates=self._piggyback(to))

    def _retransmits(self) -> int:
        return self.settings.retransmit_mult * math.ceil(math.log10(len(self._view) + 1))

    def _update(self, member: int) -> Update:
        entry = self._view[member]
        return Update(member=member, state=entry.state, incarnation=entry.incarnation)

    def _piggyback(self, to: int) -> tuple[Update, ...]:
        """Our own entry, `to`'s accusation if we hold one (or its entry, if it claimed
        less), then the least sent and newest changes; a change sent often enough is
        forgotten."""
        chosen = [self.member]
        if self._view[to].state in _ACCUSED or to in self._behind:
            chosen.append(to)
        ranked = sorted(self._rumors.items(), key=lambda item: (item[1].transmits, -item[1].order))
        chosen += [m for m, _ in ranked if m != to][:self.settings.piggyback_max - len(chosen)]
        limit = self._retransmits()
        for member in chosen:
            rumor = self._rumors.get(member)
            if rumor is not None:
                rumor.transmits += 1
                if rumor.transmits >= limit:
                    del self._rumors[member]
        return tuple(self._update(m) for m in chosen)

    # ------------------------------------------------------------ checks

    def check_invariants(self) -> None:
        """Asserted after every event; the monotonic checks compare with the view at the
        previous call."""
        own = self._view.get(self.member)
        assert own is not None, "the view holds the member itself"
        assert own.state in (S.ALIVE, S.JOINING, S.REMOVED), f"own entry {own.state.value}"
        for member, entry in self._view.items():
            assert entry.incarnation >= 0
            assert (entry.state is S.SUSPECT) == (entry.suspected_s is not None), f"suspicion time of {member}"
            before = self._checked.get(member)
            if before is not None:
                incarnation, state = before
                assert entry.incarnation >= incarnation, f"incarnation of {member} went back"
                assert state is not S.REMOVED or entry.state is S.REMOVED, f"{member} left REMOVED"
        self._checked = {m: (e.incarnation, e.state) for m, e in self._view.items()}
        assert self.member not in self._rumors and set(self._rumors) <= set(self._view)
        assert self._behind <= set(self._view) - {self.member}
        assert all(r.transmits >= 0 for r in self._rumors.values())
        if own.state is S.REMOVED:
            assert self._probe is None and not self._relays and not self._order, "a removed member is silent"
            return
        assert len(self._order) == len(set(self._order)) and set(self._order) == set(self._probed()), "one round"
        assert 0 <= self._cursor <= len(self._order)
        probe = self._probe
        if probe is not None:
            assert probe.target in self._probed() and probe.seq < self._next_seq
            assert probe.helpers <= set(self._view) - {self.member, probe.target}
            assert probe.asked or not probe.helpers
        assert len(self._relays) <= RELAYS_MAX
        for seq, relay in self._relays.items():
            assert seq < self._next_seq and (probe is None or seq != probe.seq)
            assert relay.origin in self._view and relay.target in self._view
