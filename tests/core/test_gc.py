"""WAL GC's decision (`replicaset.core.gc`): what goes, what stays and why."""

import pytest

from replicaset.core.gc import Keeper, Segment, WalGc
from wal import VClock

HOUR = 3600.0


def log(*starts: dict[int, int], written: list[float] | None = None) -> list[Segment]:
    """Segments starting at `starts`, the i-th last written at `written[i]` (time 0 by default)."""
    written = written or [0.0] * len(starts)
    return [Segment(name=f"{i:020d}.wal", start=VClock(start), written_s=at)
            for i, (start, at) in enumerate(zip(starts, written))]


SEGMENTS = log({}, {1: 10}, {1: 20, 2: 5}, {1: 30, 2: 5})  # the last one is live
END = VClock({1: 35, 2: 5})


def gc(min_s: float = HOUR, max_s: float = 24 * HOUR, peers: dict[int, dict[int, int]] | None = None) -> WalGc:
    core = WalGc(min_retention_s=min_s, max_retention_s=max_s)
    core.peers_changed(peers or {})
    for peer, acked in (peers or {}).items():
        core.peer_acked(peer, VClock(acked))
    return core


def removed(plan) -> list[str]:
    return list(plan.remove.names) if plan.remove else []


def test_segments_every_consumer_is_past_go_once_older_than_the_minimum():
    core = gc(peers={2: {1: 35, 2: 5}, 3: {1: 20, 2: 5}})
    plan = core.collect(2 * HOUR, SEGMENTS, checkpoints=[VClock({1: 30, 2: 5})], database=END)
    assert removed(plan) == [SEGMENTS[0].name, SEGMENTS[1].name], "peer 3 at 1:20 is past the first two"
    assert plan.kept.keeper is Keeper.PEER and plan.kept.peer == 3 and plan.kept.segments == 2


def test_the_live_segment_always_stays():
    plan = gc(peers={2: {1: 99, 2: 99}}).collect(99 * HOUR, SEGMENTS, checkpoints=[END], database=END)
    assert removed(plan) == [s.name for s in SEGMENTS[:-1]]
    assert plan.kept.keeper is Keeper.LIVE and plan.kept.segments == 1


def test_nothing_goes_inside_the_minimum_retention_whatever_the_consumers_say():
    segments = log({}, {1: 10}, {1: 20}, written=[0.0, 2 * HOUR, 3 * HOUR])
    plan = gc().collect(2.5 * HOUR, segments, checkpoints=[VClock({1: 20})], database=VClock({1: 20}))
    assert removed(plan) == [segments[0].name], "the second segment was written half an hour ago"
    assert plan.kept.keeper is Keeper.MIN_RETENTION


def test_a_peer_behind_holds_the_log_until_the_maximum_retention_then_not():
    core = gc(peers={2: {1: 5}})
    at = {"checkpoints": [VClock({1: 30, 2: 5})], "database": END}
    plan = core.collect(10 * HOUR, SEGMENTS, **at)
    assert removed(plan) == [] and plan.kept.keeper is Keeper.PEER and plan.kept.peer == 2
    assert removed(core.collect(25 * HOUR, SEGMENTS, **at)) == [s.name for s in SEGMENTS[:-1]]


def test_a_registered_peer_never_heard_from_needs_everything():
    core = gc(peers={2: {1: 99}})
    core.peers_changed([2, 3])
    plan = core.collect(2 * HOUR, SEGMENTS, checkpoints=[END], database=END)
    assert removed(plan) == [] and plan.kept.peer == 3


def test_a_peer_no_longer_registered_holds_nothing_back():
    core = gc(peers={2: {1: 99, 2: 99}, 3: {}})
    core.peers_changed([2])
    assert len(removed(core.collect(2 * HOUR, SEGMENTS, checkpoints=[END], database=END))) == 3


def test_recovery_from_the_oldest_checkpoint_keeps_its_rows_even_past_the_maximum():
    """FINDINGS F3: a restart that finds SQLite behind the log's start rebuilds from the oldest
    checkpoint and replays the rest, which must still be in the log."""
    plan = gc().collect(99 * HOUR, SEGMENTS, checkpoints=[VClock({1: 15}), VClock({1: 30, 2: 5})], database=END)
    assert removed(plan) == [SEGMENTS[0].name], "rows 1:11..1:15 lie in the second segment"
    assert plan.kept.keeper is Keeper.CHECKPOINT


def test_without_a_checkpoint_nothing_goes():
    plan = gc().collect(99 * HOUR, SEGMENTS, checkpoints=[], database=END)
    assert removed(plan) == [] and plan.kept.keeper is Keeper.NO_CHECKPOINT


def test_rows_the_database_does_not_hold_yet_stay():
    plan = gc().collect(99 * HOUR, SEGMENTS, checkpoints=[VClock({1: 30, 2: 5})], database=VClock({1: 12}))
    assert removed(plan) == [SEGMENTS[0].name] and plan.kept.keeper is Keeper.DATABASE


def test_rows_of_the_local_origin_never_hold_a_peer_back():
    segments = log({}, {0: 50, 1: 10}, {0: 60, 1: 10})
    plan = gc(peers={2: {1: 10}}).collect(2 * HOUR, segments, checkpoints=[VClock({0: 60, 1: 10})],
                                          database=VClock({0: 60, 1: 10}))
    assert removed(plan) == [s.name for s in segments[:-1]]


def test_a_peer_that_lost_rows_is_believed():
    """An ack lower than before (an OS crash on the peer) holds the log again where it is left."""
    core = gc(peers={2: {1: 35, 2: 5}})
    core.peer_acked(2, VClock({1: 5}))
    assert removed(core.collect(2 * HOUR, SEGMENTS, checkpoints=[END], database=END)) == []


def test_retention_must_be_ordered():
    with pytest.raises(ValueError, match="retention"):
        WalGc(min_retention_s=10, max_retention_s=5)
