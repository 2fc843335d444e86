"""The replica-set core: what one member decides about the set it belongs to.

Theory of operation (docs/design/README.md §4.4, 4.7; Tarantool's box.info.status):
- A member starts RECOVERING when it stopped uncleanly under `wal_mode = write` and has
  peers: it may have lost rows of its own origin that a peer holds, so it fetches them
  (its appliers subscribe with `include_own`) and takes no write until every other member
  has answered, or had its link fail before it answered (under F1 no peer holds a row of
  ours we can have lost, so waiting for a dead member gains nothing).
- It is then CONNECTING until it follows `connect_quorum` peers (synced with them: it
  holds all they had when it subscribed); `loading` until `replication_connect_timeout`,
  `orphan` after. A member that joined is then REGISTERING until a majority of the
  registered members hold its `_cluster` row: a row only a minority holds can be lost
  with them and its id given again. RUNNING is final for the life of the process, as in
  Tarantool: a member that lost its peers later keeps taking writes.
- When every upstream refused for want of rows (their logs start after ours ends), only
  a new checkpoint can bring the member back: it re-joins through a member that
  acknowledged every row of its own origin, if the operator allowed it, or says it needs to.
- A member learns it was removed from the set (`box.remove` on another member) either by
  applying the deletion of its own `_cluster` row, or, when it was down meanwhile, from a
  peer that refuses its SUBSCRIBE naming the removal: the row that deleted the member's
  `_cluster` row, `(by, lsn)` stamped `hlc`. Such a refusal is this member's removal only
  when it names this member's id and a row this member does not hold: one whose row it
  holds is of an earlier registration of the same UUID (removed, then joined again), told
  by a peer that has not applied the new one yet. A removed member stops for good (`Removed`):
  any other refusal of an unknown instance waits, as a joiner's row may still be on its way.
- Ids are the smallest free one, the old one to a known UUID (`allocate_id`); any member
  registers a joiner by a quorum transaction, whose conflicts keep ids unique. An id whose
  origin wrote rows is retired, never given to another UUID: the new instance would take
  those rows for its own (`specs/MembershipQuorum.tla`: ids are never reused).

Time is an argument, actions are returned; the node and the simulator carry them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

BOOTSTRAP_ID = 1  # the instance that bootstraps a set writes its first `_cluster` row
MEMBERS_MAX = 31


class Phase(Enum):
    RECOVERING = "recovering"
    CONNECTING = "connecting"
    REGISTERING = "registering"
    RUNNING = "running"


class Status(Enum):
    """`box.info.status`."""

    LOADING = "loading"
    ORPHAN = "orphan"
    RUNNING = "running"


class Condition(Enum):
    """What moves the phase on; the node never sets a phase itself."""

    ALL_ANSWERED = "all_answered"
    QUORUM_MET = "quorum_met"
    MAJORITY_HOLDS = "majority_holds"


# (phase, condition) -> next phase; a condition in a phase not listed changes nothing.
PHASE_TRANSITIONS: dict[tuple[Phase, Condition], Phase] = {
    (Phase.RECOVERING, Condition.ALL_ANSWERED): Phase.CONNECTING,
    (Phase.CONNECTING, Condition.QUORUM_MET): Phase.REGISTERING,
    (Phase.REGISTERING, Condition.MAJORITY_HOLDS): Phase.RUNNING,
}


class Refusal(Enum):
    """Why a peer refused our SUBSCRIBE, as the applier's node classifies it."""

    ROWS_UNAVAILABLE = "rows_unavailable"
    SPLIT_BRAIN = "split_brain"
    OTHER_REPLICASET = "other_replicaset"
    ID_MISMATCH = "id_mismatch"
    NOT_REGISTERED = "not_registered"

    @property
    def final(self) -> bool:
        """No retry can fix it; the operator decides. A peer that does not know us yet
        will: a joiner subscribes to every member at once, and one that has not applied
        the joiner's `_cluster` row soon will."""
        return self is not Refusal.NOT_REGISTERED


class RejoinState(Enum):
    IDLE = "idle"
    WAITING = "waiting"
    DECIDED = "decided"


# ---------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryGaveUp:
    """A recovering member stops waiting for a peer whose link failed before it answered."""

    upstream: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryDone:
    not_answered: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumReached:
    quorum: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistrationHeld:
    """The joiner's `_cluster` row is safe: forget the pending registration on disk."""

    holders: tuple[int, ...]
    members: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RejoinNeeded:
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejoin:
    through: int
    own_lsn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RejoinRefused:
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Removal:
    """Member `instance_id` (`uuid`) left the set: its `_cluster` row was deleted by the row
    `(by, lsn)` that member `by` wrote (the coordinator of `box.remove`), stamped `hlc`."""

    instance_id: int
    uuid: str
    by: int
    lsn: int
    hlc: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Removed:
    """This member was removed from the set: it stops for good. `told_by` is the upstream
    whose refusal said so, None when the member applied its own removal."""

    removal: Removal
    told_by: str | None


Action = (RecoveryGaveUp | RecoveryDone | QuorumReached | RegistrationHeld | RejoinNeeded | Rejoin | RejoinRefused
          | Removed)


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """What the member sees of the set at one moment, gathered by its driver: `caught_up`
    when it holds its registration's barrier."""

    members: int
    upstreams: frozenset[str]
    following: frozenset[str]
    registration_holders: frozenset[int] = frozenset()
    caught_up: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRegistration:
    """A joiner's registration until it takes writes and votes: `(origin, lsn)` is at or
    after its `_cluster` row, and `barrier` what the members that voted for the row held
    durably (MembershipQuorum R3: rows of transactions they prepared under an older view
    are among them)."""

    origin: int
    lsn: int
    barrier: Mapping[int, int]


class MembersFull(Exception):
    """The replica set has MEMBERS_MAX members: no id is free."""


def must_recover(*, unclean: bool, wal_mode_write: bool, has_peers: bool, force_recovery: bool) -> bool:
    """Under `wal_mode = write` an unclean stop may have cost rows of our own origin that
    peers hold; taking writes before fetching them would reuse their LSNs."""
    return unclean and wal_mode_write and has_peers and not force_recovery


def allocate_id(members: Iterable[tuple[int, str]], uuid: str, *, retired: Iterable[int] = ()) -> tuple[int, bool]:
    """The id for `uuid` and whether it is new: its old one, or the smallest free one that
    is not `retired`. A removed member's id whose origin holds rows is retired: an instance
    given it would drop those rows as its own (docs/design/README.md §4.3) and wait for them for good."""
    taken = dict(members)
    for instance_id, member_uuid in taken.items():
        if member_uuid == uuid:
            return instance_id, False
    unusable = set(taken) | set(retired)
    free = next((i for i in range(1, MEMBERS_MAX + 1) if i not in unusable), None)
    if free is None:
        retired_free = sorted(set(retired) - set(taken))
        why = f"; ids {retired_free} are retired: removed members wrote rows under them" if retired_free else ""
        raise MembersFull(f"the replica set already has {len(taken)} members{why}: no id of 1..{MEMBERS_MAX} is free")
    return free, True


def is_removal_of(removal: Removal, instance_id: int, vclock: Mapping[int, int]) -> bool:
    """A peer's record of a removal is this member's own: it names this member's id, and
    a row this member does not hold. A member registered again after its removal (same
    UUID) holds that row: its join's checkpoint came from a member that had applied it."""
    return removal.instance_id == instance_id and vclock.get(removal.by, 0) < removal.lsn


def majority(members: int) -> int:
    return members // 2 + 1


@dataclass
class ReplicaSet:
    instance_id: int
    configured_quorum: int | None
    connect_deadline_s: float
    recovering: bool = False
    registration: PendingRegistration | None = None
    allow_rejoin: bool = False
    phase: Phase = field(init=False)
    answered: set[str] = field(default_factory=set)
    gave_up: set[str] = field(default_factory=set)
    rows_unavailable: set[str] = field(default_factory=set)
    rejoin: RejoinState = RejoinState.IDLE
    rejoin_deadline_s: float = 0.0
    view: View = field(default_factory=lambda: View(members=0, upstreams=frozenset(), following=frozenset()))
    looked: bool = False  # a view was observed: until then the upstreams are unknown, not none
    removal: Removal | None = None  # this member's own, once it learned it

    def __post_init__(self) -> None:
        self.phase = Phase.RECOVERING if self.recovering else Phase.CONNECTING

    # ---------------------------------------------------------------- events

    def observe(self, now_s: float, view: View) -> list[Action]:
        """The set as the member sees it now; moves the phase as far as it goes."""
        self.view, self.looked = view, True
        self.answered |= view.following & view.upstreams
        actions: list[Action] = []
        if self.phase is Phase.RECOVERING and (self.answered | self.gave_up) >= view.upstreams:
            self._move(Condition.ALL_ANSWERED)
            actions.append(RecoveryDone(not_answered=tuple(sorted(self.gave_up - self.answered))))
        if self.phase is Phase.CONNECTING and len(view.following & view.upstreams) >= self.connect_quorum():
            self._move(Condition.QUORUM_MET)
            actions.append(QuorumReached(quorum=self.connect_quorum()))
        if self.phase is Phase.REGISTERING and self._registration_held():
            self._move(Condition.MAJORITY_HOLDS)
            if self.registration is not None:
                self.registration = None
                actions.append(RegistrationHeld(holders=tuple(sorted(view.registration_holders)), members=view.members))
        return actions

    def upstream_failed(self, now_s: float, upstream: str) -> list[Action]:
        """A link broke or was refused: during the start-up fetch, a peer that never
        answered is not waited for."""
        if self.phase is Phase.RECOVERING and upstream not in self.answered | self.gave_up:
            self.gave_up.add(upstream)
            return [RecoveryGaveUp(upstream=upstream)] + (self.observe(now_s, self.view) if self.looked else [])
        return []

    def upstream_refused(self, now_s: float, upstream: str, refusal: Refusal, removal: Removal | None = None,
                         vclock: Mapping[int, int] | None = None) -> list[Action]:
        """`removal`: what the peer knows of the removal of the instance it does not know
        (a NOT_REGISTERED refusal), judged against `vclock`, what this member holds."""
        if refusal is Refusal.ROWS_UNAVAILABLE:
            self.rows_unavailable.add(upstream)
        if (refusal is Refusal.NOT_REGISTERED and removal is not None
                and is_removal_of(removal, self.instance_id, vclock or {})):
            return self._removed(removal, told_by=upstream)
        return self.upstream_failed(now_s, upstream)

    def own_row_deleted(self, now_s: float, removal: Removal) -> list[Action]:
        """This member applied the deletion of its own `_cluster` row."""
        return self._removed(removal, told_by=None)

    def _removed(self, removal: Removal, *, told_by: str | None) -> list[Action]:
        if self.removal is not None:
            return []
        self.removal = removal
        return [Removed(removal=removal, told_by=told_by)]

    def check_rejoin(self, now_s: float, *, own_lsn: int, acked: Mapping[int, int], rejoin_timeout_s: float) -> list[Action]:
        """Every upstream lacks the rows we need: re-join through a member that holds every
        row of ours (`acked`: what each downstream acknowledged of our origin), or say why not."""
        if self.rejoin is RejoinState.DECIDED:
            return []
        if self.rejoin is RejoinState.IDLE:
            if not self.view.upstreams or not self.rows_unavailable >= self.view.upstreams:
                return []
            if not self.allow_rejoin:
                self.rejoin = RejoinState.DECIDED
                return [RejoinNeeded(reason="no member has the rows this instance needs")]
            self.rejoin, self.rejoin_deadline_s = RejoinState.WAITING, now_s + rejoin_timeout_s
        holders = sorted(member for member, lsn in acked.items() if lsn >= own_lsn)
        if holders:
            self.rejoin = RejoinState.DECIDED
            return [Rejoin(through=holders[0], own_lsn=own_lsn)]
        if now_s >= self.rejoin_deadline_s:
            self.rejoin = RejoinState.DECIDED
            return [RejoinRefused(reason=f"no member acknowledged this instance's rows up to lsn {own_lsn}")]
        return []

    # ---------------------------------------------------------------- queries

    def connect_quorum(self) -> int:
        """The configured number of peers, or by default a majority of the registered
        members counting ourselves (the quorum the 2PC counts), so that one member gone
        for good does not keep the rest orphan."""
        peers = len(self.view.upstreams)
        if self.configured_quorum is None:
            return min(peers, majority(self.view.members) - 1)
        return min(self.configured_quorum, peers)

    def status(self, now_s: float) -> Status:
        if self.phase is Phase.RUNNING:
            return Status.RUNNING
        if self.phase is Phase.CONNECTING and now_s < self.connect_deadline_s:
            return Status.LOADING
        return Status.ORPHAN

    def write_refusal(self, now_s: float) -> str | None:
        """Why this member takes no write now, or None when it does."""
        if self.phase is Phase.RUNNING:
            return None
        if self.phase is Phase.RECOVERING:
            return "it is recovering rows of its own origin from the other members after an unclean stop"
        if self.phase is Phase.CONNECTING:
            return f"it reached fewer than replication_connect_quorum = {self.connect_quorum()} peers"
        holders, registration = self.view.registration_holders, self.registration
        assert registration is not None, "only a joiner registers"
        if not self.view.caught_up:
            return (f"it joined the replica set and has not caught up yet with the rows its registration's "
                    f"voters held ({dict(registration.barrier)})")
        return (
            f"it joined the replica set, and its _cluster row (instance {registration.origin}, lsn "
            f"{registration.lsn}) is known to be held by {len(holders)} of {self.view.members} "
            f"members, fewer than the majority of {majority(self.view.members)} it needs"
        )

    def _registration_held(self) -> bool:
        """We must hold the row too: the members we count are our `_cluster`'s. Until we
        hold the barrier as well we neither write nor vote (R3)."""
        if self.registration is None:
            return True
        holders = self.view.registration_holders
        return self.view.caught_up and self.instance_id in holders and len(holders) >= majority(self.view.members)

    def _move(self, condition: Condition) -> None:
        self.phase = PHASE_TRANSITIONS[(self.phase, condition)]

    def check_invariants(self) -> None:
        assert self.phase is not Phase.RECOVERING or self.recovering, "only a member that must recover recovers"
        assert self.phase is not Phase.RUNNING or self.registration is None, (
            "a member takes writes only once a majority holds its registration")
        assert self.rejoin is RejoinState.IDLE or self.rows_unavailable, "a rejoin only when rows are unavailable"
        assert self.removal is None or self.removal.instance_id == self.instance_id, "only our own removal stops us"
