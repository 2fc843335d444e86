"""Checks 1-4 as Spark jobs over the records DataFrame, plus the statistics the reports plot.

Every check returns `CheckResult(name, count, violations)`; a violation names its rows
(member, segment, offset, origin, lsn). Rows that should be there and are not (a gap, a start
above the horizon, a member behind) cannot be pointed at, so those violations carry
`missing: [first lsn, last lsn]` of their origin and, in `rows`, the present rows next to the hole.
At most `VIOLATIONS_LISTED_MAX` are listed; `count` is the full number.

1. apply_once: an (origin, lsn) appears twice in one member's WAL.
2. order: within a member, an origin's rows are out of order (an LSN after a higher one), or an
   LSN is missing between two present ones, or above the member's horizon (WAL start vclock and
   checkpoint vclocks) before the first present one.
3. agreement: one (origin, lsn) has different txn ids or payload digests on different members.
4. completeness: a member's WAL ends below the componentwise maximum vclock of the set.

Checks 1 and 2 first find the (member, origin) groups whose rows, in log order, are not each one
LSN above the row before (`walk_logs`, one sorted pass per segment that also yields the
replication delay, with what crosses segments carried from `segment_stats`). Only those can hold a duplicate,
a row out of order or a gap between present rows, so the detailed jobs run on them alone: a clean
set costs one window, not a group-by per LSN with lists of rows. Check 3 and the timeline share
one aggregate per (origin, lsn) (`per_lsn`).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from replicaset.audit.inputs import MemberInput
from replicaset.audit.columns import unsigned64

VIOLATIONS_LISTED_MAX = 1000
TIMELINE_BUCKETS = 60
DELAY_BUCKETS_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
HLC_PHYSICAL_SHIFT = 22
LOCAL_ORIGIN = 0


@dataclass(slots=True, kw_only=True)
class CheckResult:
    name: str
    title: str
    count: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return self.count == 0

    def add(self, violation: dict[str, Any]) -> None:
        self.count += 1
        if len(self.violations) < VIOLATIONS_LISTED_MAX:
            self.violations.append(violation)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "ok": self.ok, "count": self.count,
                "listed": len(self.violations), "skipped": self.skipped,
                "violations": self.violations}


def _row_ref(r: Any, member: str | None = None) -> dict[str, Any]:
    """A row as a violation names it; `member` for a row struct that does not hold its own."""
    return {"member": member if member is not None else r["member"], "segment": r["segment"],
            "offset": r["offset"], "txn_id": unsigned64(r["txn_id"]) if r["txn_id"] is not None else None,
            "digest": f"{unsigned64(r['digest']):016x}" if r["digest"] is not None else None}


def _keyed(records: Any, keys: list[tuple[Any, ...]], schema: str) -> Any:
    """The records whose key columns (named by `schema`) take one of `keys`: a broadcast join."""
    from pyspark.sql import functions as F

    wanted = records.sparkSession.createDataFrame(keys, schema)
    return records.join(F.broadcast(wanted), wanted.columns)


def _within(records: Any, groups: list[tuple[str, int]]) -> Any:
    return _keyed(records, groups, "member STRING, origin INT")


def check_apply_once(records: Any, irregular: list[tuple[str, int]]) -> CheckResult:
    """`irregular`: the groups `walk_logs` found; no other group can log an LSN twice."""
    from pyspark.sql import functions as F

    result = CheckResult(name="apply_once", title="1. apply-once: no (origin, lsn) twice in a member's WAL")
    if not irregular:
        return result
    dups = (_within(records, irregular).groupBy("member", "origin", "lsn")
            .agg(F.count("*").alias("n"),
                 F.sort_array(F.collect_list(F.struct("pos", "segment", "offset", "txn_id", "digest",
                                                      "member"))).alias("rows"))
            .filter("n > 1"))
    total = dups.count()
    for r in dups.orderBy("member", "origin", "lsn").limit(VIOLATIONS_LISTED_MAX).collect():
        result.add({"member": r["member"], "origin": r["origin"], "lsn": r["lsn"],
                    "detail": f"{r['member']} logs {r['origin']}:{r['lsn']} {r['n']} times",
                    "rows": [_row_ref(x) for x in r["rows"]]})
    result.count = total
    return result


def check_order(records: Any, members: list[MemberInput], first_rows: list[Any],
                irregular: list[tuple[str, int]]) -> CheckResult:
    """`first_rows`: per (member, origin) the lowest LSN present and its row (the frontier job);
    `irregular`: the groups `walk_logs` found, the only ones that can be out of order or
    have a hole between present rows."""
    result = CheckResult(name="order", title="2. per-origin order: LSNs strictly increase with no gap above the horizon")
    found = _disorder(records, irregular) if irregular else []
    swapped_total = sum(1 for f in found if f[3]["kind"] == "out_of_order")
    gaps_total = len(found) - swapped_total
    if swapped_total >= VIOLATIONS_LISTED_MAX or gaps_total >= VIOLATIONS_LISTED_MAX:
        swapped_total, gaps_total = _disorder_totals(records, irregular)
    horizons = {m.name: m.horizon for m in members}
    start_total = 0
    for r in first_rows:
        origin = r["origin"]
        allowed = horizons.get(r["member"], {}).get(origin, 0) + 1
        if origin != LOCAL_ORIGIN and r["min_lsn"] > allowed:
            start_total += 1
            found.append((r["member"], origin, allowed, {
                "member": r["member"], "origin": origin, "lsn": allowed, "kind": "gap",
                "missing": [allowed, r["min_lsn"] - 1],
                "detail": f"{r['member']}: origin {origin} starts at lsn {r['min_lsn']}, but its "
                          f"horizon (WAL start and checkpoints) is {allowed - 1}: "
                          f"lsn {allowed}..{r['min_lsn'] - 1} are missing",
                "rows": [_row_ref(r["first"], r["member"])]}))
    for *_, violation in sorted(found, key=lambda f: f[:3]):
        result.add(violation)
    result.count = swapped_total + gaps_total + start_total
    return result


def _disorder_frames(records: Any, irregular: list[tuple[str, int]]) -> tuple[Any, Any]:
    """Rows logged after a higher LSN of their origin (`swapped`) and holes between present
    LSNs (`gaps`), in the irregular groups."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Each (origin, lsn) once, at its first position: a duplicate is check 1's business.
    first = _within(records, irregular).groupBy("member", "origin", "lsn").agg(
        F.min(F.struct("pos", "segment", "offset", "txn_id", "digest")).alias("at"))
    by_pos = Window.partitionBy("member", "origin").orderBy(F.col("at.pos"))
    before = by_pos.rowsBetween(Window.unboundedPreceding, -1)
    swapped = (first
               .withColumn("max_before", F.max("lsn").over(before))
               .withColumn("prev", F.lag(F.struct(F.col("lsn"), F.col("at")), 1).over(by_pos))
               .filter("lsn < max_before"))
    by_lsn = Window.partitionBy("member", "origin").orderBy("lsn")
    gaps = (first.withColumn("prev", F.lag(F.struct(F.col("lsn"), F.col("at")), 1).over(by_lsn))
            .filter("prev is not null and lsn > prev.lsn + 1"))
    return swapped, gaps


def _disorder_totals(records: Any, irregular: list[tuple[str, int]]) -> tuple[int, int]:
    swapped, gaps = _disorder_frames(records, irregular)
    return swapped.count(), gaps.count()


def _disorder(records: Any, irregular: list[tuple[str, int]]) -> list[tuple[str, int, int, dict[str, Any]]]:
    """The listed out-of-order rows and gaps, at most `VIOLATIONS_LISTED_MAX` of each."""
    swapped, gaps = _disorder_frames(records, irregular)
    found: list[tuple[str, int, int, dict[str, Any]]] = []
    for r in swapped.limit(VIOLATIONS_LISTED_MAX).collect():
        p = r["prev"]
        found.append((r["member"], r["origin"], r["lsn"], {
            "member": r["member"], "origin": r["origin"], "lsn": r["lsn"], "kind": "out_of_order",
            "detail": f"{r['member']}: {r['origin']}:{r['lsn']} is logged after "
                      f"{r['origin']}:{r['max_before']} (the row before it is {r['origin']}:{p['lsn']})",
            "rows": [_row_ref(p["at"], r["member"]),
                     _row_ref(r["at"], r["member"])]}))
    for r in gaps.limit(VIOLATIONS_LISTED_MAX).collect():
        p = r["prev"]
        low, high = p["lsn"] + 1, r["lsn"] - 1
        found.append((r["member"], r["origin"], low, {
            "member": r["member"], "origin": r["origin"], "lsn": low, "kind": "gap",
            "missing": [low, high],
            "detail": f"{r['member']}: origin {r['origin']} lacks lsn {low}"
                      + (f"..{high}" if high > low else "")
                      + f" between {r['origin']}:{p['lsn']} and {r['origin']}:{r['lsn']}",
            "rows": [_row_ref(p["at"], r["member"]),
                     _row_ref(r["at"], r["member"])]}))
    return found


BYPASS_PARTIAL_AGGREGATION = "spark.sql.execution.bypassPartialAggregation"


def per_lsn(records: Any) -> Any:
    """One row per (origin, lsn) in the set: the lowest and highest txn id and payload digest
    over its copies, and its HLC. Check 3 and the timeline read it, so it comes persisted and
    computed; the caller unpersists it.

    A segment holds each (origin, lsn) once, so the aggregate before the shuffle would reduce
    nothing: it is bypassed for this job alone (13 % of it at 10M rows)."""
    from pyspark.sql import functions as F

    spark = records.sparkSession
    before = spark.conf.get(BYPASS_PARTIAL_AGGREGATION, None)
    spark.conf.set(BYPASS_PARTIAL_AGGREGATION, "true")
    try:
        lsns = records.groupBy("origin", "lsn").agg(
            F.min("txn_id").alias("txn_lo"), F.max("txn_id").alias("txn_hi"),
            F.min("digest").alias("digest_lo"), F.max("digest").alias("digest_hi"),
            F.min("hlc").alias("hlc")).persist()
        lsns.count()
    finally:
        if before is None:
            spark.conf.unset(BYPASS_PARTIAL_AGGREGATION)
        else:
            spark.conf.set(BYPASS_PARTIAL_AGGREGATION, before)
    return lsns


def check_agreement(records: Any, lsns: Any) -> CheckResult:
    """`lsns`: `per_lsn(records)`. One txn id and one digest per (origin, lsn) is the same as
    the lowest and the highest of each being equal."""
    result = CheckResult(name="agreement", title="3. agreement: one (origin, lsn) has one txn id and payload on every member")
    bad = lsns.filter("txn_lo != txn_hi or digest_lo != digest_hi").select("origin", "lsn")
    bad_keys = bad.orderBy("origin", "lsn").limit(VIOLATIONS_LISTED_MAX).collect()
    if not bad_keys:
        return result
    total = bad.count()
    keys = [(k["origin"], k["lsn"]) for k in bad_keys]
    copies = (_keyed(records, keys, "origin INT, lsn BIGINT")
              .select("origin", "lsn", "member", "segment", "offset", "txn_id", "digest").collect())
    by_key: dict[tuple[int, int], list[Any]] = {}
    for c in copies:
        by_key.setdefault((c["origin"], c["lsn"]), []).append(c)
    for origin, lsn in keys:
        rows = sorted(by_key.get((origin, lsn), []), key=lambda c: (c["member"], c["offset"]))
        variants: dict[tuple[int, int], list[str]] = {}
        for c in rows:
            variants.setdefault((c["txn_id"], c["digest"]), []).append(c["member"])
        text = "; ".join(f"{'/'.join(ms)}: txn {unsigned64(t)} digest {unsigned64(d):016x}"
                         for (t, d), ms in variants.items())
        result.add({"origin": origin, "lsn": lsn, "member": None,
                    "detail": f"{origin}:{lsn} differs between members ({text})",
                    "rows": [_row_ref(c) for c in rows]})
    result.count = total
    return result


def segment_stats(records: Any) -> list[Any]:
    """Per (member, seg_index, origin): rows, lowest and highest LSN, HLC range, captured row
    changes, and the LSN and stamped HLC of the origin's first row in the segment. One job of
    plain numbers; the frontier and the log walk are both folded from it in the driver."""
    from pyspark.sql import functions as F

    pos, hlc = F.col("pos"), F.col("hlc")
    return (records.groupBy("member", "seg_index", "origin")
            .agg(F.count("*").alias("rows"), F.min("lsn").alias("min_lsn"),
                 F.max("lsn").alias("max_lsn"), F.min("hlc").alias("min_hlc"),
                 F.max("hlc").alias("max_hlc"), F.sum("n_rows").alias("changes"),
                 F.min_by("lsn", pos).alias("first_lsn"),
                 F.min_by("hlc", F.when(hlc.isNotNull(), pos)).alias("first_hlc"))
            .orderBy("member", "seg_index", "origin").collect())


def _fold(values: list[Any], pick: Any) -> Any:
    present = [v for v in values if v is not None]
    return pick(present) if present else None


def frontier(records: Any, stats: list[Any]) -> list[Any]:
    """Per (member, origin): rows, lowest and highest LSN and the rows holding them (`first`,
    `last`: where a hole before or after them is named), HLC range, captured row changes.
    `stats`: `segment_stats(records)`; the rows at both ends are looked up by key (a min_by over
    a row struct would build the struct for every row)."""
    from pyspark.sql import Row

    groups: dict[tuple[str, int], list[Any]] = {}
    for r in stats:
        groups.setdefault((r["member"], r["origin"]), []).append(r)
    if not groups:
        return []
    folded = {
        key: {"rows": sum(r["rows"] for r in rs), "min_lsn": min(r["min_lsn"] for r in rs),
              "max_lsn": max(r["max_lsn"] for r in rs),
              "min_hlc": _fold([r["min_hlc"] for r in rs], min),
              "max_hlc": _fold([r["max_hlc"] for r in rs], max),
              "changes": _fold([r["changes"] for r in rs], sum)}
        for key, rs in sorted(groups.items())}
    ends = {(m, o, f[k]) for (m, o), f in folded.items() for k in ("min_lsn", "max_lsn")}
    found: dict[tuple[str, int, int], list[Any]] = {}
    for r in (_keyed(records, sorted(ends), "member STRING, origin INT, lsn BIGINT")
              .select("member", "origin", "lsn", "pos", "segment", "offset", "txn_id", "digest")
              .collect()):
        found.setdefault((r["member"], r["origin"], r["lsn"]), []).append(r)

    def at(member: str, origin: int, lsn: int, pick: Any) -> Any:
        r = pick(found[(member, origin, lsn)], key=lambda c: c["pos"])
        return Row(lsn=lsn, pos=r["pos"], segment=r["segment"], offset=r["offset"],
                   txn_id=r["txn_id"], digest=r["digest"])

    return [Row(member=m, origin=o, **f, first=at(m, o, f["min_lsn"], min),
                last=at(m, o, f["max_lsn"], max)) for (m, o), f in folded.items()]


def end_vclocks(members: list[MemberInput], frontier_rows: list[Any]) -> dict[str, dict[int, int]]:
    """Each member's WAL end: its highest LSN per origin, or its WAL start where it has none."""
    ends = {m.name: {o: lsn for o, lsn in m.wal_start.items()} for m in members}
    for r in frontier_rows:
        end = ends.setdefault(r["member"], {})
        end[r["origin"]] = max(end.get(r["origin"], 0), r["max_lsn"])
    return ends


def check_completeness(
    members: list[MemberInput], ends: dict[str, dict[int, int]], frontier_rows: list[Any],
) -> tuple[CheckResult, dict[int, int]]:
    """`frontier_rows` give each member's last row of an origin, after which its missing tail
    belongs."""
    result = CheckResult(name="completeness", title="4. completeness: every member covers every origin up to the set's maximum vclock")
    last_rows = {(r["member"], r["origin"]): r["last"] for r in frontier_rows}
    top: dict[int, int] = {}
    for end in ends.values():
        for origin, lsn in end.items():
            if origin != LOCAL_ORIGIN:
                top[origin] = max(top.get(origin, 0), lsn)
    for m in members:
        end = ends.get(m.name, {})
        for origin, lsn in sorted(top.items()):
            have = end.get(origin, 0)
            if have < lsn:
                last = last_rows.get((m.name, origin))
                result.add({"member": m.name, "origin": origin, "lsn": have + 1, "behind": lsn - have,
                            "missing": [have + 1, lsn],
                            "detail": f"{m.name} is behind on origin {origin}: it ends at lsn {have}, "
                                      f"the set at {lsn} ({lsn - have} rows behind, "
                                      f"{origin}:{have + 1}..{origin}:{lsn} missing)",
                            "rows": [] if last is None else [_row_ref(last, m.name)]})
    return result, dict(sorted(top.items()))


def timeline(lsns: Any, frontier_rows: list[Any]) -> dict[str, Any]:
    """Rows per origin over time: each (origin, lsn) once (`lsns`: `per_lsn(records)`),
    bucketed by its HLC physical ms."""
    from pyspark.sql import functions as F

    hlcs = [r[k] for r in frontier_rows for k in ("min_hlc", "max_hlc") if r[k] is not None]
    if not hlcs:
        return {"start_ms": 0, "bucket_ms": 1, "series": {}}
    low = min(hlcs) >> HLC_PHYSICAL_SHIFT
    high = max(hlcs) >> HLC_PHYSICAL_SHIFT
    width = max(1, (high - low) // TIMELINE_BUCKETS + 1)
    once = lsns.filter("hlc is not null")
    rows = (once.withColumn("bucket", (F.shiftright("hlc", HLC_PHYSICAL_SHIFT) - F.lit(low)) / F.lit(width))
            .withColumn("bucket", F.col("bucket").cast("int"))
            .groupBy("origin", "bucket").count().collect())
    series: dict[str, list[int]] = {}
    for r in rows:
        counts = series.setdefault(str(r["origin"]), [0] * (TIMELINE_BUCKETS + 1))
        counts[min(r["bucket"], TIMELINE_BUCKETS)] += r["count"]
    return {"start_ms": low, "bucket_ms": width, "series": dict(sorted(series.items()))}


@dataclass(slots=True)
class LogWalk:
    """What one backwards pass over every member's log found (`walk_logs`)."""

    irregular: list[tuple[str, int]]
    """(member, origin) groups where some row is not one LSN below the next row of its origin
    in log order: only these can log an LSN twice, out of order or with a hole (checks 1, 2)."""
    delays: dict[str, list[tuple[int, int]]]
    """Per member, (delay in ms, rows) sorted by delay: see `replication_delay`."""


def walk_logs(records: Any, members: list[MemberInput], stats: list[Any]) -> LogWalk:
    """One sort of each segment, newest row first, for two things that need log order.

    The irregular groups: at each row, the LSN of the next row of its origin (a running `last`
    per origin over the rows after it) must be one above its own. The replication delay of rows
    from other origins, from HLC timestamps alone: a WAL row carries its origin's commit HLC but
    no arrival time, so the arrival is bounded by what the receiving member did next. Its next
    own row is stamped after it logged the remote row (the HLC also passes every stamp it
    receives), so delay (upper bound) = physical ms of the member's next own row minus the
    physical ms of the remote row. Members whose id is unknown (no instance.toml) have no
    delays. Both are running frames: an unbounded-following frame is recomputed for every row
    in Spark (quadratic), hence backwards.

    Sorting per segment, not per member, gives Spark one task per segment instead of one per
    member (three members on two cores left one idle for a third of the sort). What a
    segment's last rows need from later segments (the first LSN of each origin, the first own
    HLC) comes from `stats`, carried back in the driver and joined in.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = records.sparkSession
    ids = {m.name: m.instance_id for m in members if m.instance_id is not None}
    carry_lsn, carry_own = _carries(stats, ids)
    origins = sorted({r["origin"] for r in stats})
    if not origins:
        return LogWalk(irregular=[], delays={})
    backwards = Window.partitionBy("member", "seg_index").orderBy(F.col("pos").desc())
    after = backwards.rowsBetween(Window.unboundedPreceding, -1)
    upto = backwards.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    origin, lsn, hlc, self_id = F.col("origin"), F.col("lsn"), F.col("hlc"), F.col("self_id")
    following_lsn: Any = None
    for o in origins:
        of_origin = F.last(F.when(origin == o, lsn), ignorenulls=True).over(after)
        following_lsn = (F.when(origin == o, of_origin) if following_lsn is None
                         else following_lsn.when(origin == o, of_origin))
    following_lsn = F.coalesce(following_lsn, F.col("carry_lsn"))
    next_own = F.coalesce(F.last(F.when(origin == self_id, hlc), ignorenulls=True).over(upto),
                          F.col("carry_own"))
    walked = (records.select("member", "seg_index", "pos", "origin", "lsn", "hlc")
              .join(F.broadcast(spark.createDataFrame(
                  list(ids.items()), "member STRING, self_id INT")), "member", "left")
              .join(F.broadcast(spark.createDataFrame(
                  carry_lsn, "member STRING, seg_index INT, origin INT, carry_lsn BIGINT")),
                  ["member", "seg_index", "origin"], "left")
              .join(F.broadcast(spark.createDataFrame(
                  carry_own, "member STRING, seg_index INT, carry_own BIGINT")),
                  ["member", "seg_index"], "left")
              .select("member",
                      F.when(following_lsn != lsn + 1, origin).alias("irregular"),
                      F.when((origin != self_id) & (origin != LOCAL_ORIGIN),
                             F.shiftright(next_own, HLC_PHYSICAL_SHIFT)
                             - F.shiftright(hlc, HLC_PHYSICAL_SHIFT)).alias("delay_ms"))
              .groupBy("member", "irregular", "delay_ms").count())
    irregular: set[tuple[str, int]] = set()
    delays: dict[str, dict[int, int]] = {}
    for r in walked.collect():
        if r["irregular"] is not None:
            irregular.add((r["member"], r["irregular"]))
        if r["delay_ms"] is not None:
            per = delays.setdefault(r["member"], {})
            per[r["delay_ms"]] = per.get(r["delay_ms"], 0) + r["count"]
    return LogWalk(irregular=sorted(irregular),
                   delays={m: sorted(d.items()) for m, d in sorted(delays.items())})


def _carries(stats: list[Any], ids: dict[str, int]) -> tuple[list[tuple[str, int, int, int]], list[tuple[str, int, int]]]:
    """For each segment, walking each member's segments from the last: per origin the first
    LSN of that origin in a later segment, and the first stamped own HLC in a later segment."""
    by_member: dict[str, dict[int, dict[int, Any]]] = {}
    for r in stats:
        by_member.setdefault(r["member"], {}).setdefault(r["seg_index"], {})[r["origin"]] = r
    carry_lsn: list[tuple[str, int, int, int]] = []
    carry_own: list[tuple[str, int, int]] = []
    for member, segments in by_member.items():
        later_lsn: dict[int, int] = {}
        later_own: int | None = None
        own = ids.get(member)
        for seg_index in sorted(segments, reverse=True):
            carry_lsn.extend((member, seg_index, o, later_lsn[o]) for o in segments[seg_index] if o in later_lsn)
            if later_own is not None:
                carry_own.append((member, seg_index, later_own))
            for o, r in segments[seg_index].items():
                later_lsn[o] = r["first_lsn"]
            first_own = segments[seg_index].get(own) if own is not None else None
            if first_own is not None and first_own["first_hlc"] is not None:
                later_own = first_own["first_hlc"]
    return carry_lsn, carry_own


def replication_delay(walk: LogWalk, members: list[MemberInput]) -> dict[str, Any]:
    """The delay histogram and exact (nearest-rank) percentiles per member, from the counts
    of `walk_logs`."""
    if not any(m.instance_id is not None for m in members):
        return {"method": "unavailable: no member id known", "histogram": [], "per_member": {}}
    edges = list(DELAY_BUCKETS_MS)
    histogram: dict[str, list[int]] = {}
    per_member: dict[str, dict[str, int]] = {}
    for member, delays in walk.delays.items():
        bins = histogram.setdefault(member, [0] * len(edges))
        for delay, n in delays:
            bins[max(0, bisect.bisect_right(edges, delay) - 1)] += n
        total = sum(n for _, n in delays)
        per_member[member] = {"rows": total, "p50_ms": nearest_rank(delays, total, 0.5),
                              "p90_ms": nearest_rank(delays, total, 0.9),
                              "p99_ms": nearest_rank(delays, total, 0.99), "max_ms": delays[-1][0]}
    return {
        "method": "upper bound: physical ms of the member's next own row minus the row's own "
                  "(HLC stamp >> 22)",
        "bucket_edges_ms": edges,
        "histogram": histogram,
        "per_member": per_member,
    }


def nearest_rank(counted: list[tuple[int, int]], total: int, fraction: float) -> int:
    """The value at rank ceil(fraction * total) of values given as sorted (value, count)."""
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for value, n in counted:
        seen += n
        if seen >= rank:
            return value
    raise ValueError(f"rank {rank} is above the {total} values counted")
