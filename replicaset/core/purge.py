"""Tombstone purge: when a member may forget the tombstones that deletes left in
`_rs_version` (docs/design/README.md §4.2 and 4.8; `specs/TombstonePurge.tla`, whose names this module
shares; docs/design/tombstone-purge.md).

Theory of operation:
- A tombstone T (the version a delete stored for its key) is there to refuse rows older
  than the delete that are still on their way. Once T is gone such a row finds no version
  and is applied: the deleted row comes back, on this member only. So T may go only once
  this member has applied every row of its key older than T; apply-once then drops any
  copy still in flight.
- Which rows are older than T? A member's clock passes T's stamp when it applies T (the
  HLC receive rule), so every row it writes afterwards is newer. The older rows of member
  M are those M wrote before it applied T: their LSNs are at most M's own LSN in any
  vclock M acknowledged that covers T (a vclock is a prefix of M's log, which holds M's
  rows and T in the order M took them).
- Epochs. At each pass the host gives the vclock each registered member last
  acknowledged (this member's own vclock for itself). The horizon H is their
  componentwise minimum; W (`wait_for`) is each member's own LSN in that same
  acknowledgement. The pending epoch is `(bound, wait_for)`: every acknowledgement that
  gave `wait_for` covered every row under `bound` (phase one, spec
  WaitForCoversOlderRows). When H covers `wait_for`, this member holds every row older
  than a tombstone under `bound` (phase two, spec PurgedKeysCovered): the pass returns
  `bound`, and the next epoch starts with this pass's H and W. Stale acknowledgements
  only make the purge later.
- Membership: the registered members are the keys of `vclocks`. A member added ends the
  pending epoch unfinished (rows it wrote before it applied a tombstone are bounded by
  nothing in it) and the next epoch counts it; until it acknowledges, it is at zero and
  nothing new goes. A removed member no longer acknowledges, so it stops counting as an
  acknowledger, but rows of its origin may still be in flight: the host says where its
  origin ends (`member_removed`), and every epoch waits for that LSN. A member that
  leaves the set without `member_removed` is the host's error.

The core decides; the host deletes. A bound is a map origin -> LSN: a tombstone goes when
the row that wrote it, `(origin, lsn)`, is `under` it. The host runs passes beside WAL GC
and feeds the same acknowledgements (its GC consumers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from replicaset.core.transitions import LocalProtocolError
from wal import LOCAL_ORIGIN, VClock, covers

Clock = dict[int, int]
"""origin -> LSN, without zero entries (a vclock's replicated part as a plain dict)."""


def _clock(items: Mapping[int, int]) -> Clock:
    """Validated (VClock's checks), origin 0 and zero entries dropped."""
    checked = VClock(dict(items))
    return {origin: lsn for origin, lsn in checked.items() if origin != LOCAL_ORIGIN}


def horizon(vclocks: Iterable[Mapping[int, int]]) -> Clock:
    """The componentwise minimum (spec Horizon): the rows every one of `vclocks` holds."""
    clocks = list(vclocks)
    if not clocks:
        return {}
    origins = set().union(*clocks)
    low = {origin: min(clock.get(origin, 0) for clock in clocks) for origin in origins}
    return {origin: lsn for origin, lsn in low.items() if lsn}


def under(bound: Mapping[int, int], origin: int, lsn: int) -> bool:
    """Is a tombstone written by row `origin:lsn` under `bound` (spec Under)?"""
    return origin != LOCAL_ORIGIN and 0 < lsn <= bound.get(origin, 0)


def under_stamps(stamps: Mapping[int, int], hlc: int, origin: int) -> bool:
    """The same, for storage that keeps a version's `(hlc, origin)` and not its LSN:
    `stamps[o]` must be the stamp of row `o:bound[o]` (or of any earlier row of `o`).
    An origin's stamps increase with its LSNs, so the row is under the bound exactly when
    its stamp is at most that one (spec HlcFollowsLsn)."""
    return origin != LOCAL_ORIGIN and origin in stamps and hlc <= stamps[origin]


@dataclass(frozen=True, slots=True, kw_only=True)
class Epoch:
    """A pending epoch: tombstones under `bound` go once the horizon covers `wait_for`.
    `members` are the members whose acknowledgements it was taken from."""

    members: frozenset[int]
    bound: Clock
    wait_for: Clock


class PurgeHorizon:
    """One member's purge epochs, fed the registered members' acknowledged vclocks."""

    def __init__(self) -> None:
        self.epoch: Epoch | None = None
        self.removed: dict[int, int] = {}  # removed member -> last LSN of its origin
        self.purged: Clock = {}  # the last bound returned
        # At the pass that returned `purged`: this member's own vclock and the wait_for
        # that released it (check_invariants).
        self._own_then: Clock = {}
        self._released_by: Clock = {}

    def observed(self, own: int, vclocks: Mapping[int, Mapping[int, int]]) -> Clock | None:
        """A purge pass (spec Observed). `vclocks`: every registered member's last
        acknowledged vclock, `own`'s being this member's vclock (what SQLite holds).
        Returns the bound to purge under now, or None when nothing new may go."""
        clocks = self._checked(own, vclocks)
        members = frozenset(clocks)
        epoch = self.epoch
        if epoch is not None and not members >= epoch.members:
            gone = sorted(epoch.members - members)
            raise LocalProtocolError(f"purge: member(s) {gone} left the set without member_removed")
        if epoch is not None and members != epoch.members:
            epoch = None  # a member was added: its older rows are bounded by nothing here
        now = horizon(clocks.values())
        wait_for = self._next_wait_for(clocks)
        if epoch is None:
            self.epoch = Epoch(members=members, bound=now, wait_for=wait_for)
            self.check_invariants()
            return None
        if not covers(now, epoch.wait_for):  # spec EpochDone
            return None
        if now != epoch.bound:
            self.epoch = Epoch(members=members, bound=now, wait_for=wait_for)  # spec NextEpoch
        bound = epoch.bound
        if covers(self.purged, bound):
            self.check_invariants()
            return None  # purged under it (or more) already
        self.purged, self._own_then, self._released_by = dict(bound), clocks[own], dict(epoch.wait_for)
        self.check_invariants()
        return dict(bound)

    def member_removed(self, member: int, last_lsn: int) -> None:
        """`member` left the set for good; `last_lsn` is the highest LSN of its origin that
        any remaining member holds or will receive (the removal settles it: the member is
        stopped first). The pending epoch waits for the rows of its origin that it both
        wrote before its acknowledgement and left behind; later epochs wait for them all."""
        VClock({member: last_lsn})  # validates both
        if member == LOCAL_ORIGIN or member in self.removed:
            raise LocalProtocolError(f"purge: member {member} cannot be removed (again)")
        self.removed[member] = last_lsn
        epoch = self.epoch
        if epoch is not None and member in epoch.members:
            wait_for = dict(epoch.wait_for)
            wait_for[member] = min(wait_for.get(member, 0), last_lsn)
            self.epoch = Epoch(members=epoch.members - {member}, bound=epoch.bound,
                               wait_for={o: lsn for o, lsn in wait_for.items() if lsn})
        self.check_invariants()

    def _checked(self, own: int, vclocks: Mapping[int, Mapping[int, int]]) -> dict[int, Clock]:
        if own not in vclocks:
            raise LocalProtocolError(f"purge: the vclocks lack this member ({own})")
        clocks: dict[int, Clock] = {}
        for member, vclock in vclocks.items():
            if member == LOCAL_ORIGIN or member in self.removed:
                raise LocalProtocolError(f"purge: {member} is not a registered member")
            try:
                clocks[member] = _clock(vclock)
            except ValueError as exc:
                raise LocalProtocolError(f"purge: vclock of member {member}: {exc}") from exc
        return clocks

    def _next_wait_for(self, clocks: Mapping[int, Clock]) -> Clock:
        """Each member's own LSN in its acknowledgement (spec NextWaitFor), and the last
        LSN of each removed member's origin."""
        wait_for = {member: clock.get(member, 0) for member, clock in clocks.items()}
        wait_for.update(self.removed)
        return {origin: lsn for origin, lsn in wait_for.items() if lsn}

    def check_invariants(self) -> None:
        """What the spec's invariants rest on, as far as the core sees it."""
        epoch = self.epoch
        if epoch is not None:
            assert not epoch.members & set(self.removed), f"purge: epoch {epoch} counts a removed member"
            # W and H come from the same acknowledgements, and a member's own entry in
            # its acknowledgement is at least what every member holds of its origin.
            assert covers(epoch.wait_for, {o: n for o, n in epoch.bound.items() if o in epoch.members}), (
                f"purge: epoch {epoch} waits for less than its bound")
        # Phase two: the last bound returned and the wait_for that released it were both
        # held here when it was returned (spec PurgedKeysCovered's premise).
        assert covers(self._own_then, self.purged) and covers(self._own_then, self._released_by), (
            f"purge: returned {self.purged} with {self._released_by} while holding {self._own_then}")


# ---------------------------------------------------------------- members that leave


@dataclass(frozen=True, slots=True)
class PurgeUnder:
    """Delete the tombstones under `bound` (spec PurgeUnder)."""

    bound: Clock


@dataclass(frozen=True, slots=True)
class RemovalSettled:
    """`member`'s origin ends at `last_lsn` for good: keep it (a restart must not count
    the member again, nor forget where its origin ends)."""

    member: int
    last_lsn: int


@dataclass(frozen=True, slots=True)
class PurgeStopped:
    """A settled origin went on past its end: the rule's premise failed, purge no more."""

    reason: str


Action = PurgeUnder | RemovalSettled | PurgeStopped


@dataclass(slots=True)
class Leaving:
    """A member no longer registered whose origin's end is not settled yet."""

    ack: Clock  # its last acknowledgement, counted as a stale one until settled
    own_then: Clock  # this member's vclock when it saw the removal: it holds the removal
    covered_s: float | None = None  # when every remaining member first held `own_then`


class TombstonePurge:
    """The purge passes of one member: `PurgeHorizon`'s epochs, and where the origin of a
    removed member ends (`member_removed`'s `last_lsn`), which no one announces.

    Theory of operation (docs/design/tombstone-purge.md, "Membership"):
    - A member removed (`box.remove`) stops writing once it sees its own row gone, and the
      others stop taking rows from it once they applied the removal (their appliers of it
      stop). Rows of its origin may still travel between the remaining members, but no new
      ones enter: the highest LSN of its origin that any remaining member holds settles.
    - Until it is settled the member keeps counting, at its last acknowledgement (a stale
      one, which only delays). It is settled `settle_s` after every remaining member's
      acknowledgement first covered this member's vclock at the removal (so each applied
      the removal): `last_lsn` is then the highest LSN of its origin in any vclock given.
    - Which members left: one registered at the last pass and not now, or an origin this
      member holds rows of that is not registered (rows of a member are in every log after
      its registration, so holding them means holding the registration, and its absence
      means the removal: the case of a restart, which forgets the last pass). An origin
      only another member's acknowledgement names may be a member whose registration has
      not reached this one yet: while one is named, nothing is purged.
    - Settled ends are kept by the host (`RemovalSettled`) and given back at start
      (`restored`). Should a settled origin show more rows later, the premise failed: purge
      stops for good (`PurgeStopped`) rather than risk a resurrection.
    """

    def __init__(self, *, settle_s: float) -> None:
        if not settle_s >= 0:
            raise ValueError(f"purge: settle_s must be >= 0, got {settle_s!r}")
        self.settle_s = settle_s
        self.horizon = PurgeHorizon()
        self.leaving: dict[int, Leaving] = {}
        self.stopped: str | None = None
        self._acks: dict[int, Clock] = {}  # the last pass's acknowledgements of registered members

    def restored(self, removed: Mapping[int, int]) -> None:
        """The settled ends the host kept, at start."""
        for member, last_lsn in sorted(removed.items()):
            self.horizon.member_removed(member, last_lsn)

    def passed(self, now_s: float, own: int, vclocks: Mapping[int, Mapping[int, int]]) -> list[Action]:
        """A pass: `vclocks` holds every registered member's last acknowledged vclock, this
        member's (`own`) being what SQLite holds, the registered set read from that state."""
        if self.stopped is not None:
            return []
        if own not in vclocks:
            raise LocalProtocolError(f"purge: the vclocks lack this member ({own})")
        clocks: dict[int, Clock] = {}
        for member, vclock in vclocks.items():
            try:
                clocks[member] = _clock(vclock)
            except ValueError as exc:
                raise LocalProtocolError(f"purge: vclock of member {member}: {exc}") from exc
        if overrun := self._overrun(clocks):
            self.stopped = overrun
            return [PurgeStopped(reason=overrun)]
        registered, removed = set(clocks), set(self.horizon.removed)
        for member in (set(clocks[own]) | set(self._acks)) - registered - removed - set(self.leaving):
            self.leaving[member] = Leaving(ack=self._acks.get(member, {}), own_then=clocks[own])
        self._acks = clocks
        actions: list[Action] = [*self._settle(now_s, clocks)]
        named = set().union(*clocks.values()) - registered - set(self.horizon.removed) - set(self.leaving)
        if named:
            self.check_invariants()
            return actions  # a member this one does not know of yet may have written them
        counted = {**clocks, **{member: leaving.ack for member, leaving in self.leaving.items()}}
        bound = self.horizon.observed(own, counted)
        if bound:
            actions.append(PurgeUnder(bound=bound))
        self.check_invariants()
        return actions

    def _overrun(self, clocks: Mapping[int, Clock]) -> str | None:
        for member, last_lsn in self.horizon.removed.items():
            seen = max(clock.get(member, 0) for clock in clocks.values())
            if seen > last_lsn:
                return (f"rows of removed member {member} up to {seen} arrived after its origin was settled "
                        f"at {last_lsn}: tombstones are no longer purged")
        return None

    def _settle(self, now_s: float, clocks: Mapping[int, Clock]) -> list[Action]:
        settled: list[Action] = []
        for member, leaving in sorted(self.leaving.items()):
            if leaving.covered_s is None:
                if all(covers(clock, leaving.own_then) for clock in clocks.values()):
                    leaving.covered_s = now_s
                continue
            if now_s - leaving.covered_s < self.settle_s:
                continue
            last_lsn = max([leaving.ack.get(member, 0), *(clock.get(member, 0) for clock in clocks.values())])
            del self.leaving[member]
            self.horizon.member_removed(member, last_lsn)
            settled.append(RemovalSettled(member=member, last_lsn=last_lsn))
        return settled

    def check_invariants(self) -> None:
        assert not set(self.leaving) & set(self.horizon.removed), "purge: a member both leaving and settled"
        self.horizon.check_invariants()
