#!/usr/bin/env python3
"""Quorum benchmark: our three-member set at ONE and at QUORUM, next to Tarantool 2.6's
synchronous replication and dqlite, in one run.

    /work/main/.venv/bin/python bench/bench_quorum.py [--seconds N] [--quick]

What it measures, in this order:

1. LIMITS: fsyncs/s of 4 KiB appends in the temporary directory and loopback round trips/s
   (`bench.kit.limits`), the ceilings the figures below are read against. Then the floors
   (`bench.scenarios.noop_quorum`): three processes that send a QUORUM commit's messages and
   write its records and do nothing else, with group fsyncs and without fsyncs, loaded with
   single-row commits like the sets: what the protocol's shape costs on this stack before any
   of our logic runs.
2. Single-row commits (`INSERT OR REPLACE INTO kv VALUES (?, ?)`) and 3. 10-statement
   transactions, with 1 and 16 connections on member 1 of: our set with
   `default_write_consistency = "one"`, the same with `"quorum"` (the PyPI connector cannot
   send the OPTIONS map, so the level is the members' default), and a Tarantool 2.6 full mesh
   with `replication_synchro_quorum = 2` and `kv` is_sync (`bench.scenarios.quorum_writes`).
   Stalls (requests slower than 1 s) are counted, and after the loads the rows of all three
   members are compared (divergent rows).
4. dqlite: `dqlite-benchmark` on three nodes, 1 and 16 workers (`bench.scenarios.dqlite_peer`);
   its own Go client, not ours.
5. Ratios: QUORUM / ONE, ours / each peer, each figure as a fraction of the limits, server CPU
   per operation. Beside the three-member sets, a set of one at the default level (which
   decides alone) and the same member at ONE with `wal_mode = "fsync"`.
6. Where one QUORUM commit's time goes: paced commits on a traced set of its own
   (`bench.scenarios.quorum_timeline`).
7. Targets with MET / MISSED.

Each set runs alone (started, loaded, checked, stopped by pid in a `finally`); every process is
on 127.0.0.1 on free ports; the temporary directory is removed. Progress goes to stderr, the
report to stdout. A separate script rather than a section of bench_replicaset.py: its sets
(two of ours at different levels, a synchronous Tarantool mesh, dqlite), its transactions and
its targets are its own, and bench_replicaset.py's join and lag sections would only lengthen it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kit.client import CONNECTION_COUNTS  # noqa: E402
from bench.kit.limits import measure_fsync_limit, measure_loopback_limit  # noqa: E402
from bench.kit.report import (fmt_int, fmt_ms, fmt_ratio, header_lines, load_average, notes_lines, progress,  # noqa: E402
                              ratio, run_facts, target_lines)
from bench.kit.sets import OurSet, TarantoolSet, run_set, wait_converged  # noqa: E402
from bench.kit.runs import SECONDS_HELP, TARANTOOL_HELP, TMP_DIR_HELP, settle_seconds, start_run  # noqa: E402
from bench.kit.tarantool import INSTALL_HINT  # noqa: E402
from bench.scenarios import dqlite_peer, noop_quorum, quorum_timeline, quorum_writes  # noqa: E402

ONE, QUORUM, TARANTOOL = "ours_one", "ours_quorum", "tarantool_sync"
SETS = (ONE, QUORUM, TARANTOOL)
# A set of one at the default level, which decides alone (core.quorum.decides_alone), beside
# the same member at ONE with wal_mode = "fsync": both make a write durable before answering.
ALONE, ALONE_FSYNC = "one_member_quorum", "one_member_one_fsync"
ALONE_SETS = (ALONE_FSYNC, ALONE)
ALONE_WITHIN = 1.2
FLOOR, FLOOR_NOSYNC = "floor_fsync", "floor_no_fsync"
FLOORS = (FLOOR, FLOOR_NOSYNC)
SYNCHRO_TIMEOUT_S = 5.0  # ours' default synchro_timeout_s; Tarantool's replication_synchro_timeout the same
REPLICATION_TIMEOUT_S = 0.2  # ours' replication_timeout in bench.kit.sets; Tarantool's the same
TARGET_P50_MS = 1.0
TARGET_P99_MS = 3.0
TARGET_OPS_16 = 3000.0
TIMELINE_PACE_S = 0.05
MARMOT_REFERENCE = ("Marmot v2 README (quoted in the issue, not measured here): 3 nodes, 16 threads, QUORUM, "
                    "10-statement transactions, 3,370 ops/s, p99 85 ms on a laptop")


def bench_set(rs: OurSet | TarantoolSet, args: argparse.Namespace, warmup_s: float, report: dict[str, Any]) -> None:
    """One set's loads and checks (`run_set` starts and stops it)."""

    def measure(entry: dict[str, Any]) -> None:
        wait_converged(rs)
        progress(f"{rs.name}: up on ports {rs.ports}")
        quorum_writes.run(rs, args.seconds, warmup_s, entry)

    run_set(rs, report["sets"], measure)


def measure_limits(work: Path, args: argparse.Namespace, warmup_s: float) -> dict[str, Any]:
    seconds = min(args.seconds, 2.0)
    progress(f"limits: fsync and loopback, {seconds:g} s each")
    return {"fsync": measure_fsync_limit(work, seconds, warmup_s),
            "loopback": measure_loopback_limit(work, seconds, warmup_s), "seconds": seconds}


def limits_lines(limits: dict[str, Any]) -> list[str]:
    fsync, loop = limits["fsync"], limits["loopback"]
    return ["1. LIMITS  measured in this run, " + f"{limits['seconds']:g} s each",
            f"  fsync of a 4 KiB append: {fmt_int(fsync.get('fsyncs_per_s'))}/s, p50 {fmt_ms(fsync.get('p50_ns'))} ms, "
            f"p99 {fmt_ms(fsync.get('p99_ns'))} ms",
            f"  loopback round trip (Python sockets, another process): {fmt_int(loop.get('rt_per_s'))}/s, "
            f"p50 {fmt_ms(loop.get('p50_ns'))} ms"]


def single(report: dict[str, Any], name: str, nconn: int, kind: str = "single") -> dict[str, Any] | None:
    return quorum_writes.load_of(report["sets"], name, kind, nconn)


def dqlite_load(report: dict[str, Any], nconn: int) -> dict[str, Any] | None:
    load = report["dqlite"].get("loads", {}).get(nconn)
    return load if load and load.get("ops_per_s") else None


def ratio_lines(report: dict[str, Any]) -> list[str]:
    """Section 5: QUORUM against ONE and the peers, the limits, CPU per operation."""
    sets = report["sets"]

    def ops(name: str, kind: str, nconn: int) -> float | None:
        return quorum_writes.ops_per_s(sets, name, kind, nconn)

    out = ["5. RATIOS  (ops/s of the first over the second)"]
    for kind in quorum_writes.KINDS:
        out.append(f"  {kind:<6} " + "   ".join(
            f"{n} conn: quorum/one {fmt_ratio(ratio(ops(QUORUM, kind, n), ops(ONE, kind, n)))}, "
            f"quorum/tarantool_sync {fmt_ratio(ratio(ops(QUORUM, kind, n), ops(TARANTOOL, kind, n)))}"
            for n in CONNECTION_COUNTS))
    for kind in quorum_writes.KINDS:
        out.append(f"  {kind:<6} one member, quorum/one with wal_mode=fsync: " + "   ".join(
            f"{n} conn {fmt_ratio(ratio(ops(ALONE, kind, n), ops(ALONE_FSYNC, kind, n)))}" for n in CONNECTION_COUNTS))
    out.append("  single quorum/floor_fsync (what our logic leaves of the floor): " + "   ".join(
        f"{n} conn {fmt_ratio(ratio(ops(QUORUM, 'single', n), ops(FLOOR, 'single', n)))}" for n in CONNECTION_COUNTS))
    out.append("  single quorum/dqlite: " + "   ".join(
        f"{n} conn {fmt_ratio(ratio(ops(QUORUM, 'single', n), (dqlite_load(report, n) or {}).get('ops_per_s')))}"
        for n in CONNECTION_COUNTS))
    fsync, loop = report["limits"]["fsync"], report["limits"]["loopback"]
    out.append("  single-row commits at 1 conn against the limits (ops/s / loopback round trips/s, ops/s / fsyncs/s; "
               "p50 in loopback round trips and in fsyncs):")
    rows = [(name, single(report, name, 1)) for name in SETS + FLOORS] + [("dqlite", dqlite_load(report, 1))]
    for name, load in rows:
        if not load:
            continue
        out.append(f"    {name:<16} {fmt_ratio(ratio(load['ops_per_s'], loop.get('rt_per_s'))):>7} "
                   f"{fmt_ratio(ratio(load['ops_per_s'], fsync.get('fsyncs_per_s'))):>7}   p50 = "
                   f"{fmt_ratio(ratio(load['p50_ns'], loop.get('p50_ns')))} round trips = "
                   f"{fmt_ratio(ratio(load['p50_ns'], fsync.get('p50_ns')))} fsyncs")
    out.append("  server CPU per operation, all three members (us), single / txn at 16 conn:")
    for name in SETS + ALONE_SETS + FLOORS:
        loads = [single(report, name, 16, kind) for kind in quorum_writes.KINDS]
        cpu = [quorum_writes.cpu_us_per_op(load)[0] if load else None for load in loads]
        out.append(f"    {name:<16} {fmt_int(cpu[0]):>7} / {fmt_int(cpu[1]):>7}")
    dq = dqlite_load(report, 16)
    if dq:
        out.append(f"    {'dqlite':<16} {fmt_int(dqlite_peer.cpu_us_per_op(dq)[0]):>7} /       -   (client included)")
    return out


def speed_targets(report: dict[str, Any], name: str, label: str) -> list[tuple[str, str, bool | None]]:
    """The latency and throughput targets, read on set `name`."""
    found: list[tuple[str, str, bool | None]] = []
    one_conn = single(report, name, 1)
    for what, key, limit in (("p50", "p50_ns", TARGET_P50_MS), ("p99", "p99_ns", TARGET_P99_MS)):
        value = one_conn[key] / 1e6 if one_conn and one_conn[key] == one_conn[key] else None
        found.append((f"{label} {what} < {limit:g} ms, 1 conn", "-" if value is None else f"{value:.3f} ms",
                      None if value is None else value < limit))
    sixteen = single(report, name, 16)
    value = sixteen["ops_per_s"] if sixteen else None
    found.append((f"{label} >= {TARGET_OPS_16:,.0f} ops/s, 16 conn", fmt_int(value),
                  None if value is None else value >= TARGET_OPS_16))
    value = ratio(quorum_writes.ops_per_s(report["sets"], name, "single", 1), (dqlite_load(report, 1) or {}).get("ops_per_s"))
    found.append((f"{label}/dqlite >= 1, 1 conn", fmt_ratio(value), None if value is None else value >= 1.0))
    return found


def targets(report: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    sets = report["sets"]
    found = speed_targets(report, QUORUM, "QUORUM")
    loads = [load for kind in quorum_writes.KINDS for load in sets.get(QUORUM, {}).get("loads", {}).get(kind, {}).values()]
    stalls = sum(load["stalls"] for load in loads) if loads else None
    found.append(("QUORUM stalls > 1 s, all loads = 0", "-" if stalls is None else str(stalls),
                  None if stalls is None else stalls == 0))
    for name in (ONE, QUORUM):
        divergent = sets.get(name, {}).get("divergent")
        found.append((f"{name} divergent rows = 0", "-" if divergent is None else str(divergent),
                      None if divergent is None else divergent == 0))
    for kind in quorum_writes.KINDS:
        for nconn in CONNECTION_COUNTS:
            value = ratio(quorum_writes.ops_per_s(sets, QUORUM, kind, nconn),
                          quorum_writes.ops_per_s(sets, TARANTOOL, kind, nconn))
            found.append((f"{kind} quorum/tarantool_sync >= 1, {nconn} conn", fmt_ratio(value),
                          None if value is None else value >= 1.0))
    value = ratio(quorum_writes.ops_per_s(sets, QUORUM, "single", 16), (dqlite_load(report, 16) or {}).get("ops_per_s"))
    found.append(("QUORUM/dqlite >= 1, 16 conn", fmt_ratio(value), None if value is None else value >= 1.0))
    for nconn in CONNECTION_COUNTS:
        value = ratio(quorum_writes.ops_per_s(sets, ALONE, "single", nconn),
                      quorum_writes.ops_per_s(sets, ALONE_FSYNC, "single", nconn))
        found.append((f"one member quorum/one_fsync >= 1/{ALONE_WITHIN:g}, {nconn} conn", fmt_ratio(value),
                      None if value is None else value >= 1 / ALONE_WITHIN))
    return found


def notes(report: dict[str, Any]) -> list[str]:
    """Skipped or failed sets, what each set's checks found, exit codes, the logs."""
    found = []
    for name in SETS + ALONE_SETS + FLOORS:
        entry = report["sets"].get(name, {})
        if entry.get("skipped"):
            found.append(f"{name}: skipped: {entry['skipped']}")
        if entry.get("failure"):
            found.append(f"{name}: FAILED: {entry['failure']}")
        found.extend(f"{name}: {note}" for note in entry.get("notes", []))
        if "divergent" in entry:
            conv = entry.get("converge_s")
            found.append(f"{name}: after the loads vclocks {'agree' if conv is not None else 'DISAGREE'} "
                         f"{entry['final_vclocks'][0]}; rows per member {entry['rows']}; {entry['divergent']} divergent; "
                         f"load average {entry.get('loadavg_start')} -> {entry.get('loadavg_end')}")
        if entry.get("exit_codes") and any(c not in (0, None) for c in entry["exit_codes"]):
            found.append(f"{name}: exit codes after SIGTERM {entry['exit_codes']}")
        found.extend(f"{name} log: {line}" for line in entry.get("log_notes", []))
    dq = report["dqlite"]
    for nconn, load in dq.get("loads", {}).items():
        if load.get("failure"):
            found.append(f"dqlite {nconn}: FAILED: {load['failure']}")
        found.append(f"dqlite {nconn} workers: --duration {load.get('duration_s')} s, {load.get('workers_files', 0)} "
                     f"result files, exit codes {load.get('exit_codes')} (nodes 2 and 3 run until SIGTERM); divergent "
                     "rows not checked (the database lives in Raft segments, queries go to the leader)")
    return found


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out = header_lines("bench_quorum", report)
    out.append(f"tarantool: {report['tarantool_version']}; dqlite: {report['dqlite'].get('binary') or 'not run'}; "
               f"measure {args.seconds:g} s after {report['warmup_s']:g} s warm-up; load average at start "
               f"{report['loadavg_start']}, at end {report['loadavg_end']}")
    out.append(f"three members each, all on this machine's 2 cores with the client: ours wal_mode=write "
               f"replication_timeout={REPLICATION_TIMEOUT_S:g} synchro_timeout_s={SYNCHRO_TIMEOUT_S:g}, "
               f"default_write_consistency one / quorum; tarantool wal_mode='write', full mesh, "
               f"replication_synchro_quorum=2, replication_synchro_timeout={SYNCHRO_TIMEOUT_S:g}, "
               f"replication_timeout={REPLICATION_TIMEOUT_S:g}, kv is_sync; {ALONE_FSYNC} and {ALONE}: one member "
               "of ours, at ONE with wal_mode=fsync and at the default level (quorum, wal_mode=write)")
    out.append("")
    out += limits_lines(report["limits"])
    out.append("")
    out += quorum_writes.report_lines(report["sets"], SETS + ALONE_SETS, FLOORS, MARMOT_REFERENCE)
    out.append("")
    out += dqlite_peer.report_lines(report["dqlite"])
    out.append("")
    out += ratio_lines(report)
    out.append("")
    if "timeline" in report:
        out += quorum_timeline.report_lines(report["timeline"])
        out.append("")
    out.append("7. TARGETS")
    out += target_lines(targets(report), 42, 11)
    out.append(f"  the same read on {FLOOR}, a QUORUM commit's messages and fsyncs with no logic:")
    out += target_lines(speed_targets(report, FLOOR, FLOOR), 42, 11)
    out.append("")
    out += notes_lines(notes(report))
    print("\n".join(out), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help=SECONDS_HELP)
    parser.add_argument("--quick", action="store_true", help="2 s per figure, 0.5 s warm-up")
    parser.add_argument("--no-dqlite", action="store_true", help="skip dqlite")
    parser.add_argument("--timeline-commits", type=int, default=30,
                        help="paced QUORUM commits traced for section 6 (default 30; 0 skips it)")
    parser.add_argument("--tmp-dir", type=Path, default=None, help=TMP_DIR_HELP)
    parser.add_argument("--tarantool", default=None, help=TARANTOOL_HELP)
    parser.add_argument("--dqlite-benchmark", default=None, help="dqlite-benchmark binary (default: on PATH)")
    args = parser.parse_args(argv)
    settle_seconds(parser, args)
    if not 0 <= args.timeline_commits <= 1000:
        parser.error("--timeline-commits must be between 0 and 1000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run(args, "bench_quorum_")
    warmup_s, binary, work = run.warmup_s, run.tarantool, run.work
    report: dict[str, Any] = {**run_facts(), "tarantool_version": run.tarantool_version, "warmup_s": warmup_s,
                              "sets": {}}
    try:
        report["limits"] = measure_limits(work, args, warmup_s)
        for name, sync in ((FLOOR, True), (FLOOR_NOSYNC, False)):
            report["sets"][name] = noop_quorum.run(work, name, sync, args.seconds, warmup_s)
        bench_set(OurSet(work, name=ONE, consistency="one"), args, warmup_s, report)
        bench_set(OurSet(work, name=QUORUM, consistency="quorum"), args, warmup_s, report)
        bench_set(OurSet(work, name=ALONE_FSYNC, consistency="one", options={"wal_mode": "fsync"}, size=1),
                  args, warmup_s, report)
        bench_set(OurSet(work, name=ALONE, consistency="quorum", size=1), args, warmup_s, report)
        if binary:
            bench_set(TarantoolSet(work, binary, name=TARANTOOL, synchro_quorum=2, synchro_timeout_s=SYNCHRO_TIMEOUT_S,
                                   replication_timeout_s=REPLICATION_TIMEOUT_S), args, warmup_s, report)
        else:
            report["sets"][TARANTOOL] = {"skipped": f"tarantool is not installed ({INSTALL_HINT})"}
        if args.no_dqlite:
            report["dqlite"] = {"skipped": "--no-dqlite"}
        else:
            report["dqlite"] = dqlite_peer.run(work, dqlite_peer.find_dqlite_benchmark(args.dqlite_benchmark),
                                               warmup_s, args.seconds)
        if args.timeline_commits:
            report["timeline"] = quorum_timeline.run(work, args.timeline_commits, TIMELINE_PACE_S)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = load_average()
    print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
