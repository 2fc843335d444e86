"""WAL garbage collection: which segments of the log may go (docs/design/README.md §4.8, Tarantool's GC
consumers, Marmot's retention window).

Theory of operation:
- A segment holds the rows between its start vclock and the next segment's start; the
  live (last) segment is never collected. A consumer at vclock C is past segment i when
  the next segment's start is at or below C: it will never read a row of segment i again.
  Starts only grow along the log, so the segments a consumer is past are a prefix of it,
  and what goes is always a prefix: the log never gets a hole.
- Recovery consumers, never overruled: the oldest kept checkpoint (a restart that finds
  SQLite behind the WAL's start rebuilds from it and replays the rest: FINDINGS F3,
  `LocalRecovery_ReplayBelowWalStart`) and the database itself (the rows SQLite does not
  hold yet). With no checkpoint nothing goes: a rebuild would need the log from its start.
- One consumer per registered peer, at the vclock it last acknowledged to our relay (a
  peer never heard from is at zero: it may need everything). Rows of the local origin are
  never sent, so they do not count for peers.
- Time: a segment goes only once it is older than `min_retention_s` (rows kept for delta
  sync whatever the consumers say), and once older than `max_retention_s` whatever the
  peers say: a peer that stayed away that long repairs from a checkpoint instead
  (anti-entropy), so the disk stays bounded.

The core holds the peers' consumers; the host hands it the log's segments, the kept
checkpoints and the database's vclock at each pass, and removes what it is told.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from wal import VClock, covers


class Keeper(Enum):
    """Why the oldest segment that stays, stays (`box.info.gc`)."""

    LIVE = "live segment"
    NO_CHECKPOINT = "no checkpoint to recover from"
    CHECKPOINT = "oldest checkpoint"
    DATABASE = "database"
    PEER = "peer"
    MIN_RETENTION = "min retention"


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    """A log segment as the host sees it: `start` is the vclock at its first row,
    `written_s` when its last row was written (on the host's clock)."""

    name: str
    start: VClock
    written_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveSegments:
    """Remove these segments, the oldest of the log, in this order."""

    names: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Kept:
    """The outcome of a pass: how many segments stay and why the oldest of them does
    (`peer` names the peer holding it, when a peer does)."""

    segments: int
    keeper: Keeper
    peer: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    remove: RemoveSegments | None
    kept: Kept


class WalGc:
    """One member's GC consumers of its log, and the decision of what goes."""

    def __init__(self, *, min_retention_s: float, max_retention_s: float) -> None:
        if not 0 <= min_retention_s <= max_retention_s:
            raise ValueError(f"retention: need 0 <= min ({min_retention_s}) <= max ({max_retention_s})")
        self.min_retention_s = min_retention_s
        self.max_retention_s = max_retention_s
        self.peers: dict[int, dict[int, int]] = {}  # peer id -> the vclock it acknowledged
        self._floor: dict[int, int] = {}  # the log's start after the last removal, for the invariant
        self._recovery: dict[int, int] | None = None  # the recovery consumers' floor at that pass

    def peers_changed(self, peers: Iterable[int]) -> None:
        """The registered peers (this member excluded): a new one is at zero until it
        acknowledges; one no longer registered holds nothing back."""
        wanted = set(peers)
        self.peers = {peer: self.peers.get(peer, {}) for peer in sorted(wanted)}

    def peer_acked(self, peer: int, vclock: VClock | Mapping[int, int]) -> None:
        """`peer` holds `vclock` durably. Its latest word counts, even lower than before (a
        peer that lost rows in an OS crash needs them again, if they are still here)."""
        if peer in self.peers:
            self.peers[peer] = (vclock if isinstance(vclock, VClock) else VClock(dict(vclock))).replicated().to_dict()

    def collect(self, now_s: float, segments: Sequence[Segment], *, checkpoints: Sequence[VClock],
                database: VClock) -> Plan:
        """What goes now: the longest prefix of the log every rule lets go."""
        recovery = None if not checkpoints else min(checkpoints, key=lambda c: c.signature).to_dict()
        removable: list[str] = []
        keeper: tuple[Keeper, int | None] = (Keeper.LIVE, None)
        for segment, following in zip(segments, segments[1:]):
            reason = self._keeper(now_s, segment, following.start, recovery, database)
            if reason is not None:
                keeper = reason
                break
            removable.append(segment.name)
        kept = Kept(segments=len(segments) - len(removable), keeper=keeper[0], peer=keeper[1])
        if removable:
            assert recovery is not None
            self._floor = segments[len(removable)].start.to_dict()
            self._recovery = {o: min(recovery.get(o, 0), database.get(o)) for o in {*recovery, *database.to_dict()}}
        self.check_invariants()
        return Plan(remove=RemoveSegments(names=tuple(removable)) if removable else None, kept=kept)

    def _keeper(self, now_s: float, segment: Segment, upto: VClock, recovery: Mapping[int, int] | None,
                database: VClock) -> tuple[Keeper, int | None] | None:
        """Who still needs `segment` (whose rows end at `upto`), or None when it may go."""
        if recovery is None:
            return Keeper.NO_CHECKPOINT, None
        upto_all = upto.to_dict()
        if not covers(recovery, upto_all):
            return Keeper.CHECKPOINT, None
        if not covers(database.to_dict(), upto_all):
            return Keeper.DATABASE, None
        age_s = now_s - segment.written_s
        if age_s < self.min_retention_s:
            return Keeper.MIN_RETENTION, None
        if age_s < self.max_retention_s:
            upto_replicated = upto.replicated().to_dict()
            for peer, acked in self.peers.items():
                if not covers(acked, upto_replicated):
                    return Keeper.PEER, peer
        return None

    def check_invariants(self) -> None:
        """The log never starts past what recovery from the oldest checkpoint and the
        database need (FINDINGS F3)."""
        if self._recovery is not None:
            assert all(lsn <= self._recovery.get(o, 0) for o, lsn in self._floor.items()), (
                f"WAL GC moved the log's start to {self._floor}, past the recovery consumers at {self._recovery}")
