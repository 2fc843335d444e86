"""Anti-entropy: how a member that is behind a peer catches up (docs/design/README.md §4.8, Marmot's
delta sync or snapshot transfer).

Theory of operation. The applier following a peer is the delta sync: after SUBSCRIBE it
is in SYNC, streaming what the peer held then, and FOLLOW once it has it all. A member
that FOLLOWs is never sent to a checkpoint, however many rows a burst of writes leaves it
behind for a moment: the stream is keeping up. Every `anti_entropy_interval_seconds` the
member compares its vclock with each alive peer's (what the peer's relay last reported):
- following, or in step (nothing of the peer's missing here): nothing to do;
- behind by at most `delta_sync_threshold_transactions` rows, and for less than
  `delta_sync_threshold_seconds`: DELTA, the missing rows stream through the applier
  (which is what it does already: the decision is counted, nothing else);
- behind by more rows, or behind for longer (delta sync is given that long to catch up):
  SNAPSHOT, a checkpoint transfer from that peer, after which the member goes on from the
  checkpoint's vclock.
A gap (every upstream's log starts past what we hold: their WAL GC removed the rows) is
the replica-set core's rejoin decision (`ReplicaSet.check_rejoin`), which ends in the same
checkpoint transfer; the two decisions are to become one (docs/design/anti-entropy.md).
The host counts it here (`count(Repair.GAP)`), so `runs` holds every repair by kind; the
host keeps `runs` across restarts and re-joins and hands them back at start.
A checkpoint replaces everything the member holds, so it is taken only from a peer that
holds every row of this member's own origin (its vclock of our origin reaches ours):
anything else would lose rows no one else has. A snapshot wanted with no such peer waits
for the next check (our rows reach the peers meanwhile through our relays).

"Behind for longer" is measured by the core itself: from the first check that found the
member syncing behind the peer to the check now, reset whenever a check finds it following
or in step. Time is an argument; the host reads the vclocks and the appliers' states.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from wal import LOCAL_ORIGIN


class Repair(Enum):
    DELTA = "delta"
    SNAPSHOT = "snapshot"
    GAP = "gap"  # the rows we lack are gone everywhere: a re-join from a checkpoint


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerView:
    """What the member knows of one alive peer: its vclock (as its relay last reported it)
    and how far it holds this member's own rows (that vclock, or what it acknowledged to
    our relay, whichever says more)."""

    vclock: Mapping[int, int]
    own_held: int
    syncing: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotTransfer:
    """Transfer a checkpoint from `through` and go on from its vclock."""

    through: int
    reason: str
    behind_rows: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One peer's outcome at a check, for the console and the metrics."""

    peer: int
    repair: Repair | None
    behind_rows: int
    behind_s: float
    reason: str


def behind_rows(own: Mapping[int, int], peer: Mapping[int, int]) -> int:
    """Rows the peer holds that we do not (local rows never travel)."""
    return sum(max(0, lsn - own.get(origin, 0)) for origin, lsn in peer.items() if origin != LOCAL_ORIGIN)


class AntiEntropy:
    def __init__(self, *, member: int, threshold_rows: int, threshold_s: float,
                 runs: Mapping[Repair, int] | None = None) -> None:
        """`runs`: the repairs counted before, as the host kept them."""
        self.member = member
        self.threshold_rows = threshold_rows
        self.threshold_s = threshold_s
        self.runs: dict[Repair, int] = {kind: (runs or {}).get(kind, 0) for kind in Repair}
        self.checks: dict[int, Check] = {}
        self._behind_since_s: dict[int, float] = {}

    def check(self, now_s: float, own: Mapping[int, int], peers: Mapping[int, PeerView]) -> list[SnapshotTransfer]:
        """One pass over the alive peers; at most one snapshot transfer, from the peer we
        are furthest behind among those that hold all our rows."""
        self._behind_since_s = {p: t for p, t in self._behind_since_s.items() if p in peers}
        self.checks = {}
        wanted: list[Check] = []
        for peer, view in sorted(peers.items()):
            check = self._check_peer(now_s, own, peer, view)
            self.checks[peer] = check
            if check.repair is not None:
                self.count(check.repair)
            if check.repair is Repair.SNAPSHOT:
                wanted.append(check)
        own_lsn = own.get(self.member, 0)
        holders = [c for c in wanted if peers[c.peer].own_held >= own_lsn]
        if not holders:
            return []
        best = max(holders, key=lambda c: (c.behind_rows, -c.peer))
        return [SnapshotTransfer(through=best.peer, reason=best.reason, behind_rows=best.behind_rows)]

    def count(self, repair: Repair) -> None:
        self.runs[repair] += 1

    def _check_peer(self, now_s: float, own: Mapping[int, int], peer: int, view: PeerView) -> Check:
        rows = behind_rows(own, view.vclock)
        if rows == 0 or not view.syncing:
            self._behind_since_s.pop(peer, None)
            return Check(peer=peer, repair=None, behind_rows=rows, behind_s=0.0,
                         reason="in step" if rows == 0 else "following")
        since = self._behind_since_s.setdefault(peer, now_s)
        behind_s = now_s - since
        if rows > self.threshold_rows:
            reason = f"behind by {rows} rows, more than delta_sync_threshold_transactions = {self.threshold_rows}"
        elif behind_s > self.threshold_s:
            reason = (f"behind for {behind_s:.0f} s, longer than delta_sync_threshold_seconds = "
                      f"{self.threshold_s:g}")
        else:
            return Check(peer=peer, repair=Repair.DELTA, behind_rows=rows, behind_s=behind_s,
                         reason="the applier streams the missing rows")
        return Check(peer=peer, repair=Repair.SNAPSHOT, behind_rows=rows, behind_s=behind_s, reason=reason)

    def check_invariants(self) -> None:
        assert all(count >= 0 for count in self.runs.values())
        assert set(self._behind_since_s) <= set(self.checks), "behind-since times only of peers checked"
