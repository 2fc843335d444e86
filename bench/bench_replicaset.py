#!/usr/bin/env python3
"""Replica-set benchmark: our three-member set next to a three-instance Tarantool 2.6 mesh.

    /work/main/.venv/bin/python bench/bench_replicaset.py [--seconds N] [--quick] [--join-mb M]

What it measures, in this order:

1. Writes/s of `INSERT OR REPLACE INTO kv VALUES (?, ?)` with 1 and 16 connections (16 threads,
   each its own connection, PyPI `tarantool` connector) against the first member of (a) our
   three-member set (`wal_mode = "write"`, `replication_timeout = 0.2`) and (b) a three-instance
   Tarantool 2.6 master-master full mesh (`wal_mode='write'`, `replication_connect_quorum=3`).
   After each load: how long the other members took to reach the first member's vclock.
2. Replication lag by watermark polling: one writer thread inserts rows with increasing ids on
   member 1 (paced at `--lag-rate`, default 500/s, then unpaced = full load of one connection),
   recording each id's ack time; one poller thread runs `SELECT max(k) FROM kv` on member 2 in a
   tight (bounded) loop, recording when each watermark is first seen. lag(i) = time of the first
   poll reply showing a watermark >= i minus ack(i); p50/p99/max, and the mean poll period, which
   bounds the resolution.
3. Initial join: a fresh one-member set of ours is filled with `--join-mb` MB of rows (random
   8 KiB text values, multi-row INSERTs of 2 MiB), `box.snapshot()`, then `replicaset join` of a
   new member is timed from process start until it answers and its vclock equals the first
   member's; MB/s = checkpoint bytes / seconds; the joiner's peak RSS (VmHWM, polled). The same
   with Tarantool 2.6 (a master filled with as many MB of random values, `box.snapshot()`, a
   replica started with `replication = {master}`) unless `--no-tarantool-join`.
4. Targets with MET / MISSED.

Every process is started on 127.0.0.1 (free ports) and stopped by pid in a `finally`; the
temporary directory is removed. Progress goes to stderr, the report to stdout. The sets are
`bench.kit.sets`; steps 1, 2 and 3 are `bench.scenarios.set_writes`, `lag`, `join_ours` and
`join_tarantool`.
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
from bench.kit.report import (fmt_ratio, header_lines, load_average, notes_lines, progress, ratio,  # noqa: E402
                              run_facts, target_lines)
from bench.kit.sets import OurSet, TarantoolSet, run_set, table_digest, wait_converged  # noqa: E402
from bench.kit.runs import SECONDS_HELP, TARANTOOL_HELP, TMP_DIR_HELP, settle_seconds, start_run  # noqa: E402
from bench.kit.tarantool import INSTALL_HINT  # noqa: E402
from bench.scenarios import join_ours, join_tarantool, lag, set_writes  # noqa: E402

TARGET_RATIO = 1.0
TARGET_LAG_P99_MS = 1.0
TARGET_JOIN_MB_S = 200.0
TARGET_JOIN_RSS_MB = 256.0
TARANTOOL_QUOTED_JOIN = "Tarantool 2.6 joined a 412 MB snapshot at 24 MB/s on this machine (figure given in the brief)"


def bench_set(rs: OurSet | TarantoolSet, args: argparse.Namespace, warmup_s: float, report: dict[str, Any]) -> None:
    """Steps 1 and 2 on one set, then whether its members agree (`run_set` starts and
    stops it)."""

    def measure(entry: dict[str, Any]) -> None:
        took, vclocks = wait_converged(rs)
        entry["ports"] = list(rs.ports)
        entry["statuses"] = [rs.status(p) for p in rs.ports]
        progress(f"{rs.name}: up on ports {rs.ports}, status {entry['statuses']}, vclocks {vclocks}")
        set_writes.run(rs, args.seconds, warmup_s, entry)
        lag.run(rs, args.lag_rate, args.seconds, warmup_s, args.poll_interval_ms, entry)
        took, vclocks = wait_converged(rs)
        entry["final_vclocks"] = vclocks
        entry["final_converged"] = took is not None
        digests = [table_digest(p) for p in rs.ports]
        entry["digests"] = digests
        if len(set(digests)) != 1:
            entry["notes"].append(f"DIVERGENCE: kv differs between members: {digests}")
        entry["statuses_end"] = [rs.status(p) for p in rs.ports]

    run_set(rs, report["sets"], measure, converge={}, lag={})


def join_lines(report: dict[str, Any], join_mb: int) -> list[str]:
    """Section 3: each join that ran, or why it failed; the quoted reference."""
    out = [f"3. INITIAL JOIN  {join_mb} MB of {join_ours.JOIN_VALUE_BYTES}-char random text rows, box.snapshot(), "
           "then a new member joins; timed from process start until it answers and its vclock equals the member's"]
    for name, module in (("ours", join_ours), ("tarantool", join_tarantool)):
        j = report["join"].get(name)
        if j is None:
            continue
        if "failure" in j and "seconds" not in j:
            out.append(f"  {name}: FAILED: {j['failure'].splitlines()[0][:200]}")
            out += [f"      {line[:200]}" for line in j["failure"].splitlines()[1:8]]
            continue
        out += module.report_lines(j)
    out.append(f"  reference: {TARANTOOL_QUOTED_JOIN}" + ("" if "tarantool" in report["join"] else "; not measured in this run"))
    return out


def targets(report: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str, bool | None]]:
    sets = report["sets"]
    found: list[tuple[str, str, bool | None]] = []
    for nconn in CONNECTION_COUNTS:
        value = ratio(set_writes.ops_per_s(sets, "ours", nconn), set_writes.ops_per_s(sets, "tarantool", nconn))
        found.append((f"writes ours/tarantool >= {TARGET_RATIO:.1f}x, {nconn} conn", fmt_ratio(value),
                      None if value is None else value >= TARGET_RATIO))
    paced = sets.get("ours", {}).get("lag", {}).get("paced")
    p99 = paced["p99_ns"] / 1e6 if paced and paced["rows"] and paced["p99_ns"] == paced["p99_ns"] else None
    found.append((f"lag p99 < {TARGET_LAG_P99_MS:g} ms at {args.lag_rate:g}/s", "-" if p99 is None else f"{p99:.3f} ms",
                  None if p99 is None else p99 < TARGET_LAG_P99_MS))
    j = report["join"].get("ours", {})
    mbs = j.get("mb_per_s") if "seconds" in j else None
    found.append((f"join >= {TARGET_JOIN_MB_S:g} MB/s ({args.join_mb} MB)", "-" if mbs is None else f"{mbs:.1f} MB/s",
                  None if mbs is None else mbs >= TARGET_JOIN_MB_S))
    hwm = j.get("joiner_hwm_kb") if "seconds" in j else None
    hwm_mb = hwm / 1024 if hwm else None
    found.append((f"joiner peak RSS < {TARGET_JOIN_RSS_MB:g} MB", "-" if hwm_mb is None else f"{hwm_mb:.1f} MB",
                  None if hwm_mb is None else hwm_mb < TARGET_JOIN_RSS_MB))
    return found


def notes(report: dict[str, Any]) -> list[str]:
    """Skipped or failed sets, whether the members agree at the end, exit codes, the logs."""
    found = []
    for name in set_writes.SETS:
        entry = report["sets"].get(name, {})
        if entry.get("skipped"):
            found.append(f"{name}: skipped: {entry['skipped']}")
        if entry.get("failure"):
            found.append(f"{name}: FAILED: {entry['failure']}")
        found.extend(f"{name}: {note}" for note in entry.get("notes", []))
        if "digests" in entry:
            same = len(set(entry["digests"])) == 1
            found.append(f"{name}: at the end vclocks {'agree' if entry.get('final_converged') else 'DISAGREE'} "
                         f"{entry.get('final_vclocks', [None])[0]}; kv rows/digest {'agree' if same else 'DIFFER'} "
                         f"{entry['digests'][0] if same else entry['digests']}; status {entry.get('statuses_end')}")
        if entry.get("exit_codes") and any(c not in (0, None) for c in entry["exit_codes"]):
            found.append(f"{name}: exit codes after SIGTERM {entry['exit_codes']}")
        found.extend(f"{name} log: {line}" for line in entry.get("log_notes", []))
    for name, j in report["join"].items():
        found.extend(f"join {name}: {note}" for note in j.get("notes", []))
        if j.get("exit_codes") and any(c not in (0, None) for c in j["exit_codes"]):
            found.append(f"join {name}: exit codes after SIGTERM {j['exit_codes']}")
        found.extend(f"join {name} log: {line}" for line in j.get("log_notes", []))
    return found


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out = header_lines("bench_replicaset", report)
    out.append(f"tarantool: {report['tarantool_version']}; measure {args.seconds:g} s after {report['warmup_s']:g} s "
               f"warm-up; load average at start {report['loadavg_start']}, at end {report['loadavg_end']}")
    out.append("three members each: ours wal_mode=write replication_timeout=0.2; tarantool wal_mode='write', full mesh, "
               "replication_connect_quorum=3; all on this machine's 2 cores with the client")
    out.append("")
    out += set_writes.report_lines(report["sets"])
    out.append("")
    out += lag.report_lines(report["sets"], args.lag_rate, args.poll_interval_ms)
    out.append("")
    out += join_lines(report, args.join_mb)
    out.append("")
    out.append("4. TARGETS")
    out += target_lines(targets(report, args), 40, 11)
    out.append("")
    out += notes_lines(notes(report))
    print("\n".join(out), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help=SECONDS_HELP)
    parser.add_argument("--quick", action="store_true", help="2 s per figure and a 64 MB join")
    parser.add_argument("--join-mb", type=int, default=None, help="MB to fill before the join (default 1024; 64 with --quick)")
    parser.add_argument("--lag-rate", type=float, default=500.0, help="paced writer rate for the lag figure (default 500/s)")
    parser.add_argument("--poll-interval-ms", type=float, default=0.0,
                        help="sleep between the lag poller's queries (default 0: a tight loop, as specified)")
    parser.add_argument("--no-tarantool-join", action="store_true", help="skip Tarantool's join (quote the known figure)")
    parser.add_argument("--tmp-dir", type=Path, default=None, help=TMP_DIR_HELP)
    parser.add_argument("--tarantool", default=None, help=TARANTOOL_HELP)
    args = parser.parse_args(argv)
    settle_seconds(parser, args)
    if args.join_mb is None:
        args.join_mb = 64 if args.quick else 1024
    if not 1 <= args.join_mb <= 16384:
        parser.error("--join-mb must be between 1 and 16384")
    if not 0 <= args.poll_interval_ms <= 1000:
        parser.error("--poll-interval-ms must be between 0 and 1000")
    if not 1 <= args.lag_rate <= 100_000:
        parser.error("--lag-rate must be between 1 and 100000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run(args, "bench_replicaset_")
    warmup_s, binary, work = run.warmup_s, run.tarantool, run.work
    report: dict[str, Any] = {**run_facts(), "tarantool_version": run.tarantool_version, "warmup_s": warmup_s,
                              "sets": {}, "join": {}}
    try:
        bench_set(OurSet(work), args, warmup_s, report)
        if binary:
            bench_set(TarantoolSet(work, binary), args, warmup_s, report)
        else:
            report["sets"]["tarantool"] = {"skipped": f"tarantool is not installed ({INSTALL_HINT})"}
        report["join"]["ours"] = join_ours.run(work, args.join_mb)
        if binary and not args.no_tarantool_join:
            report["join"]["tarantool"] = join_tarantool.run(work, binary, args.join_mb)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = load_average()
    print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
