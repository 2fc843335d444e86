#!/usr/bin/env python3
"""Membership and repair benchmark: checkpoint transfer, delta sync, crash to DEAD, WAL disk use.

    /work/main/.venv/bin/python bench/bench_repair.py [--quick] [--only transfer,delta,dead,wal]

What it measures (the issue "Membership and repair", Benchmarks), each section selectable
with `--only` and sized by its flags; `--quick` makes every size small:

0. LIMITS measured in this run: fsyncs/s of 4 KiB appends and loopback round trips/s
   (`bench.kit.limits`); with the transfer, also a raw loopback TCP throughput (1 MiB
   `sendall`s to another process) and a streamed file write + fsync, MB/s.
1. TRANSFER (`bench.scenarios.repair_transfer`): a fresh member of ours filled with
   `--transfer-mb` MB (default 1024; 64 with `--quick`), `box.snapshot()`, then `replicaset
   join` of a second member: the transfer's MB/s between the member's `join_serving` and the
   joiner's `joined` log events, and the joiner's peak RSS (VmHWM).
2. DELTA (`bench.scenarios.delta_sync`): three members, member 3 stopped cleanly,
   `--delta-rows` rows (default 1,000,000; 50,000 with `--quick`) written on member 1 in
   INSERTs of `--delta-batch-rows`, member 3 restarted: rows/s until its vclock equals
   member 1's.
3. DEAD (`bench.scenarios.swim_dead`): three members with the default `[cluster]` timers,
   member 3 killed with SIGKILL, seconds until members 1 and 2 both show it `dead` in
   `box.info.members`; `--dead-runs` runs (default 5; 2 with `--quick`), min and median.
4. WAL (`bench.scenarios.wal_growth`): our set with WAL GC set to act within the run and a
   Tarantool 2.6 mesh with its default `checkpoint_count` and the same
   `checkpoint_interval`, each under the same paced single-row write load for
   `--wal-seconds` (default 600; 60 with `--quick`); member 1's WAL and checkpoint sizes
   sampled; max and final MiB, and whether ours stayed bounded.
5. TARGETS with MET / MISSED: transfer >= 300 MB/s, joiner peak RSS < 256 MB, delta sync
   >= 100,000 rows/s, our WAL bounded; crash to DEAD has no target (printed beside the
   timers).

Every process runs on 127.0.0.1 on free ports and is stopped by pid in a `finally`; the
temporary directory is removed. Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kit.limits import (measure_disk_stream, measure_fsync_limit, measure_loopback_limit,  # noqa: E402
                              measure_loopback_throughput_limit)
from bench.kit.report import (MIB, fmt_int, fmt_ms, header_lines, load_average, notes_lines, progress,  # noqa: E402
                              run_facts, target_lines)
from bench.kit.runs import TARANTOOL_HELP, TMP_DIR_HELP, start_run  # noqa: E402
from bench.scenarios import delta_sync, repair_transfer, swim_dead, wal_growth  # noqa: E402

SECTIONS = ("transfer", "delta", "dead", "wal")
TARGET_TRANSFER_MB_S = 300.0
TARGET_JOINER_RSS_MB = 256.0
TARGET_DELTA_ROWS_S = 100_000.0


def measure_limits(work: Path, args: argparse.Namespace, warmup_s: float) -> dict[str, Any]:
    seconds = 1.0 if args.quick else 2.0
    progress(f"limits: fsync and loopback, {seconds:g} s each")
    limits: dict[str, Any] = {"seconds": seconds, "fsync": measure_fsync_limit(work, seconds, warmup_s),
                              "loopback": measure_loopback_limit(work, seconds, warmup_s)}
    if "transfer" in args.only:
        progress("limits: loopback TCP throughput and a streamed file write")
        limits["tcp"] = measure_loopback_throughput_limit(work, seconds, warmup_s)
        limits["disk_stream"] = measure_disk_stream(work, min(args.transfer_mb, 1024) * MIB)
    return limits


def limits_lines(limits: dict[str, Any]) -> list[str]:
    fsync, loop = limits["fsync"], limits["loopback"]
    out = [f"0. LIMITS  measured in this run, {limits['seconds']:g} s each",
           f"  fsync of a 4 KiB append: {fmt_int(fsync.get('fsyncs_per_s'))}/s, p50 {fmt_ms(fsync.get('p50_ns'))} ms, "
           f"p99 {fmt_ms(fsync.get('p99_ns'))} ms",
           f"  loopback round trip (Python sockets, another process): {fmt_int(loop.get('rt_per_s'))}/s, "
           f"p50 {fmt_ms(loop.get('p50_ns'))} ms"]
    if "tcp" in limits:
        tcp, disk = limits["tcp"], limits["disk_stream"]
        out.append(f"  loopback TCP throughput (1 MiB sendall to another process that drops it): "
                   f"{fmt_int(tcp.get('mb_per_s'))} MB/s")
        out.append(f"  streamed file write, 1 MiB writes of {disk['bytes'] / MIB:.0f} MB then fsync: "
                   f"{disk['mb_per_s']:.0f} MB/s (write {disk['write_s']:.2f} s, fsync {disk['fsync_s']:.2f} s)")
    return out


def targets(report: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str, bool | None]]:
    found: list[tuple[str, str, bool | None]] = []
    s = report["sections"]
    if "transfer" in s:
        mbs = repair_transfer.transfer_mb_per_s(s["transfer"])
        found.append((f"transfer >= {TARGET_TRANSFER_MB_S:g} MB/s ({args.transfer_mb} MB)",
                      "-" if mbs is None else f"{mbs:.1f} MB/s", None if mbs is None else mbs >= TARGET_TRANSFER_MB_S))
        hwm = repair_transfer.joiner_hwm_mb(s["transfer"])
        found.append((f"joiner peak RSS < {TARGET_JOINER_RSS_MB:g} MB", "-" if hwm is None else f"{hwm:.1f} MB",
                      None if hwm is None else hwm < TARGET_JOINER_RSS_MB))
    if "delta" in s:
        rate = delta_sync.rows_per_s(s["delta"])
        found.append((f"delta sync >= {TARGET_DELTA_ROWS_S:,.0f} rows/s ({args.delta_rows:,} rows)",
                      "-" if rate is None else f"{rate:,.0f} rows/s", None if rate is None else rate >= TARGET_DELTA_ROWS_S))
    if "dead" in s:
        figures = swim_dead.dead_figures(s["dead"])
        found.append(("crash -> DEAD everywhere (no target), median", "-" if figures is None else f"{figures[1]:.2f} s",
                      None))
    if "wal" in s:
        ours = s["wal"].get("wal_ours", {})
        ok = wal_growth.bounded(ours, args.wal_seconds, args.wal_margin)
        value = "-" if not ours.get("samples") else f"{wal_growth.figures(ours, args.wal_seconds)['wal_max_mib']:.1f} MiB max"
        found.append((f"our WAL bounded over {args.wal_seconds:g} s with GC on", value, ok))
    return found


def notes(report: dict[str, Any]) -> list[str]:
    found = []
    for name, entry in report["sections"].items():
        entries = entry.items() if name == "wal" else [(name, entry)]
        for label, e in entries:
            if e.get("failure"):
                found.append(f"{label}: FAILED: {e['failure'][:400]}")
            found.extend(f"{label}: {note}" for note in e.get("notes", []))
            if e.get("exit_codes") and any(c not in (0, None) for c in e["exit_codes"]):
                found.append(f"{label}: exit codes after SIGTERM {e['exit_codes']}")
            found.extend(f"{label} log: {line}" for line in e.get("log_notes", []))
        if name in report["loadavg"]:
            before, after = report["loadavg"][name]
            found.append(f"{name}: load average {before} -> {after}")
    return found


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out = header_lines("bench_repair", report)
    out.append(f"tarantool: {report['tarantool_version']}; sections {','.join(args.only)}; load average at start "
               f"{report['loadavg_start']}, at end {report['loadavg_end']}; {report['cpus']} cores shared by every "
               f"process and the client")
    out.append("")
    out += limits_lines(report["limits"])
    s = report["sections"]
    if "transfer" in s:
        out += ["", f"1. TRANSFER  {args.transfer_mb} MB of {repair_transfer.join_ours.JOIN_VALUE_BYTES}-char random "
                "text rows on a fresh member, box.snapshot(), then `replicaset join` of a second member"]
        out += repair_transfer.report_lines(s["transfer"], report["limits"])
    if "delta" in s:
        out += ["", "2. DELTA SYNC  member 3 stopped cleanly, rows written on member 1, member 3 restarted; "
                "timed until its vclock equals member 1's"]
        out += delta_sync.report_lines(s["delta"])
    if "dead" in s:
        out += ["", "3. CRASH TO DEAD  kill -9 member 3 of three; until members 1 and 2 both show it dead"]
        out += swim_dead.report_lines(s["dead"])
    if "wal" in s:
        out += ["", "4. WAL DISK USE  member 1 of a three-member set under a steady paced write load, GC on"]
        out += wal_growth.report_lines(s["wal"], args.wal_seconds, args.wal_rate, args.wal_sample_s,
                                       args.wal_checkpoint_interval, args.wal_retention_s, args.wal_margin)
    out += ["", "5. TARGETS"]
    out += target_lines(targets(report, args), 48, 16)
    out.append("")
    out += notes_lines(notes(report))
    print("\n".join(out), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: 64 MB transfer, 50,000 rows, 2 dead runs, a 60 s WAL run")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections (default all: {','.join(SECTIONS)})")
    parser.add_argument("--transfer-mb", type=int, default=None, help="MB in the database to transfer (default 1024; 64 quick)")
    parser.add_argument("--delta-rows", type=int, default=None, help="rows member 3 misses (default 1,000,000; 50,000 quick)")
    parser.add_argument("--delta-batch-rows", type=int, default=100,
                        help="rows per INSERT, one transaction (default 100: at 1000, 256 catch-up records exceed "
                             "max_frame_bytes and the member never catches up; see RESULTS_repair.md)")
    parser.add_argument("--delta-replication-timeout", type=float, default=0.2,
                        help="replication_timeout of the delta set (default 0.2 s, as the other benchmark sets; "
                             "the server's default is 1)")
    parser.add_argument("--dead-runs", type=int, default=None, help="kills of member 3 (default 5; 2 quick)")
    parser.add_argument("--wal-seconds", type=float, default=None, help="write run per set (default 600; 60 quick)")
    parser.add_argument("--wal-rate", type=float, default=500.0, help="paced writes/s of the WAL run (default 500)")
    parser.add_argument("--wal-sample-s", type=float, default=None, help="seconds between size samples (default 5; 2 quick)")
    parser.add_argument("--wal-checkpoint-interval", type=float, default=None,
                        help="checkpoint_interval of both sets in the WAL run (default 30 s; 10 quick)")
    parser.add_argument("--wal-retention-s", type=float, default=None,
                        help="our [gc] min_retention_s and delta_sync_threshold_seconds; max_retention_s is twice it "
                             "(default 30; 10 quick)")
    parser.add_argument("--wal-margin", type=float, default=0.25,
                        help="bounded: 2nd-half max WAL <= 1st-half max x (1 + margin) + one segment (default 0.25)")
    parser.add_argument("--tmp-dir", type=Path, default=None, help=TMP_DIR_HELP)
    parser.add_argument("--tarantool", default=None, help=TARANTOOL_HELP)
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in args.only if name not in SECTIONS]
    if unknown or not args.only:
        parser.error(f"--only takes {','.join(SECTIONS)}, not {','.join(unknown) or 'nothing'}")
    q = args.quick
    defaults = {"transfer_mb": (1024, 64), "delta_rows": (1_000_000, 50_000), "dead_runs": (5, 2),
                "wal_seconds": (600.0, 60.0), "wal_sample_s": (5.0, 2.0), "wal_checkpoint_interval": (30.0, 10.0),
                "wal_retention_s": (30.0, 10.0)}
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if q else full)
    checks = [("--transfer-mb", 1 <= args.transfer_mb <= 16384, "between 1 and 16384"),
              ("--delta-rows", 1 <= args.delta_rows <= 100_000_000, "between 1 and 100,000,000"),
              ("--delta-batch-rows", 1 <= args.delta_batch_rows <= 20_000, "between 1 and 20,000"),
              ("--delta-replication-timeout", 0.01 <= args.delta_replication_timeout <= 60, "between 0.01 and 60"),
              ("--dead-runs", 1 <= args.dead_runs <= 50, "between 1 and 50"),
              ("--wal-seconds", 10 <= args.wal_seconds <= 7200, "between 10 and 7200"),
              ("--wal-rate", 1 <= args.wal_rate <= 20_000, "between 1 and 20000"),
              ("--wal-sample-s", 0.2 <= args.wal_sample_s <= 60, "between 0.2 and 60"),
              ("--wal-checkpoint-interval", 1 <= args.wal_checkpoint_interval <= 3600, "between 1 and 3600"),
              ("--wal-retention-s", 1 <= args.wal_retention_s <= 3600, "between 1 and 3600"),
              ("--wal-margin", 0 <= args.wal_margin <= 10, "between 0 and 10")]
    for flag, ok, rule in checks:
        if not ok:
            parser.error(f"{flag} must be {rule}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run = start_run(args, "bench_repair_")
    report: dict[str, Any] = {**run_facts(), "tarantool_version": run.tarantool_version, "sections": {},
                              "loadavg": {}}
    try:
        report["limits"] = measure_limits(run.work, args, run.warmup_s)
        for name in SECTIONS:
            if name not in args.only:
                continue
            before = load_average()
            t0 = time.monotonic()
            if name == "transfer":
                report["sections"][name] = repair_transfer.run(run.work, args.transfer_mb)
            elif name == "delta":
                report["sections"][name] = delta_sync.run(run.work, args.delta_rows, args.delta_batch_rows,
                                                           args.delta_replication_timeout)
            elif name == "dead":
                report["sections"][name] = swim_dead.run(run.work, args.dead_runs)
            elif name == "wal":
                if not run.tarantool:
                    progress("wal: Tarantool is not installed; ours alone")
                report["sections"][name] = wal_growth.run(run.work, run.tarantool, args.wal_seconds, args.wal_rate,
                                                          args.wal_sample_s, args.wal_checkpoint_interval,
                                                          args.wal_retention_s)
            report["loadavg"][name] = (before, load_average())
            progress(f"{name}: done in {time.monotonic() - t0:.0f} s")
    finally:
        shutil.rmtree(run.work, ignore_errors=True)
    report["loadavg_end"] = load_average()
    print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
