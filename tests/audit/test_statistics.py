"""The report's statistics on a hand-made set of rows, where every figure is counted by hand:
the replication delay's histogram and percentiles, and the timeline of rows per origin."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.audit import checks
from replicaset.audit.inputs import MemberInput
from tests.audit.conftest import SPARK_TIMEOUT

pytestmark = SPARK_TIMEOUT

SHIFT = checks.HLC_PHYSICAL_SHIFT


def _member(name: str, instance_id: int) -> MemberInput:
    return MemberInput(name=name, directory=Path(name), wal_dir=Path(name), kind="wal",
                       instance_id=instance_id, segments=[])


SEGMENT = 1 << 40
"""pos = seg_index << 40 | offset"""


def _rows(spark, rows):  # type: ignore[no-untyped-def]
    return spark.createDataFrame(
        [(m, pos >> 40, pos, origin, lsn, 7, 9, ms << SHIFT, 1) for m, pos, origin, lsn, ms in rows],
        "member STRING, seg_index INT, pos BIGINT, origin INT, lsn BIGINT, txn_id BIGINT, "
        "digest BIGINT, hlc BIGINT, n_rows INT")


def test_delay_is_the_next_own_row_minus_the_remote_row_with_exact_percentiles(spark) -> None:
    # m1 (id 1) logs remote rows of origin 2 at 100, 101, 102 ms, then its own row at 105 ms:
    # delays 5, 4, 3. Then remote rows at 200 and 230 ms, its own at 240 in its next segment
    # (and a row it could not decode, with no stamp, before it): delays 40, 10. A remote row
    # after its last own row has no bound yet and is left out.
    records = _rows(spark, [
        ("m1", 1, 2, 1, 100), ("m1", 2, 2, 2, 101), ("m1", 3, 2, 3, 102), ("m1", 4, 1, 1, 105),
        ("m1", 5, 2, 4, 200), ("m1", 6, 2, 5, 230), ("m1", SEGMENT + 1, 1, 2, 240),
        ("m1", SEGMENT + 2, 2, 6, 300),
        ("m2", 1, 1, 1, 105), ("m2", 2, 2, 1, 106),
    ])
    members = [_member("m1", 1), _member("m2", 2)]
    walk = checks.walk_logs(records, members, checks.segment_stats(records))
    assert walk.irregular == []
    delay = checks.replication_delay(walk, members)
    edges = delay["bucket_edges_ms"]
    assert delay["per_member"] == {
        "m1": {"rows": 5, "p50_ms": 5, "p90_ms": 40, "p99_ms": 40, "max_ms": 40},
        "m2": {"rows": 1, "p50_ms": 1, "p90_ms": 1, "p99_ms": 1, "max_ms": 1},
    }
    bins = delay["histogram"]["m1"]
    assert sum(bins) == 5
    assert bins[edges.index(2)] == 2 and bins[edges.index(5)] == 1 and bins[edges.index(10)] == 1
    assert bins[edges.index(20)] == 1


@pytest.mark.parametrize(("fraction", "value"), [(0.01, 3), (0.5, 5), (0.6, 5), (0.61, 10), (1.0, 40)])
def test_nearest_rank_reads_counted_values(fraction: float, value: int) -> None:
    counted = [(3, 2), (5, 4), (10, 3), (40, 1)]
    assert checks.nearest_rank(counted, 10, fraction) == value


def test_timeline_counts_each_origin_lsn_once_however_many_members_log_it(spark) -> None:
    records = _rows(spark, [
        ("m1", 1, 1, 1, 1000), ("m1", 2, 1, 2, 1000), ("m1", 3, 2, 1, 1059),
        ("m2", 1, 1, 1, 1000), ("m2", 2, 2, 1, 1059), ("m2", 3, 2, 2, 1059),
    ])
    records = records.withColumn("segment", records.member).withColumn("offset", records.pos)
    frontier = checks.frontier(records, checks.segment_stats(records))
    line = checks.timeline(checks.per_lsn(records), frontier)
    assert (line["start_ms"], line["bucket_ms"]) == (1000, 1)
    assert sum(line["series"]["1"]) == 2 and line["series"]["1"][0] == 2
    assert sum(line["series"]["2"]) == 2 and line["series"]["2"][59] == 2


def test_the_log_walk_names_each_group_where_a_row_does_not_follow_the_one_before(spark) -> None:
    # m1: origin 2 logs 1, 2, then 2 again in its next segment; origin 3 logs 1, then 3 (a hole)
    # in the next segment. m2: origin 2 logs 2, 1 (swapped), origin 3 logs 1, 2 across its two
    # segments. Origin 1 (each member's own) is consecutive everywhere, across segments too.
    records = _rows(spark, [
        ("m1", 1, 1, 1, 10), ("m1", 2, 2, 1, 10), ("m1", 3, 2, 2, 11), ("m1", 4, 3, 1, 11),
        ("m1", SEGMENT + 5, 2, 2, 11), ("m1", SEGMENT + 6, 3, 3, 12), ("m1", SEGMENT + 7, 1, 2, 13),
        ("m2", 1, 2, 2, 11), ("m2", 2, 2, 1, 10), ("m2", 3, 3, 1, 11),
        ("m2", SEGMENT + 4, 3, 2, 12), ("m2", SEGMENT + 5, 1, 1, 20),
    ])
    members = [_member("m1", 1), _member("m2", 9)]
    walk = checks.walk_logs(records, members, checks.segment_stats(records))
    assert walk.irregular == [("m1", 2), ("m1", 3), ("m2", 2)]
    # m2's id is 9: it has no own rows, so no delay is bounded; m1's rows of origins 2 and 3
    # before its own row at 13 ms are.
    assert list(walk.delays) == ["m1"] and sum(n for _, n in walk.delays["m1"]) == 5


def test_segments_that_follow_each_other_are_regular_across_the_boundary(spark) -> None:
    # Three segments; in each, three pairs of rows: m1's own (origin 1), then one of origin 2,
    # one ms apart; each origin's LSNs run on from segment to segment.
    rows = [("m1", seg * SEGMENT + 2 * i + origin - 1, origin, 3 * seg + i + 1, 10 * seg + i)
            for seg in range(3) for i in range(3) for origin in (1, 2)]
    records = _rows(spark, rows)
    walk = checks.walk_logs(records, [_member("m1", 1)], checks.segment_stats(records))
    assert walk.irregular == []
    # An origin-2 row is bounded by the own row after it: 1 ms later inside a segment, and for
    # a segment's last one the next segment's first own row, 8 ms later. The very last has none.
    assert walk.delays == {"m1": [(1, 6), (8, 2)]}
