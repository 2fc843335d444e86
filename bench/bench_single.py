#!/usr/bin/env python3
"""Single-instance benchmark: WAL appends, SQL writes over iproto, memory; next to Tarantool 2.6.

    /work/main/.venv/bin/python bench/bench_single.py [--seconds N] [--quick] [--client-procs K]

What it measures, in this order, each for `--seconds` after a short warm-up:

1. The disk's group-commit limit: N x (os.write of a 4 KiB block + os.fsync) => fsyncs/s.
2. `wal.Wal.append` rows/s per wal_mode (write, fsync) at 1, 16 and 256 records per append,
   each as a fraction of that limit (fsyncs/s x group size); the storage engine in process:
   CPU per single-row transaction at a flush every 1, 16 and 256, beside SQLite's own
   statements for it on a bare connection (`--engine-only`: this section alone).
3. The loopback round-trip limit: a trivial blocking-socket ping-pong with a separate process.
4. `INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)` through the PyPI `tarantool` connector with 1
   and 16 connections against (a) our server, (b) Tarantool 2.6 (wal_mode='write'), (c) a
   do-nothing trio iproto server in its own process (the ceiling of our stack). ops/s, p50/p99,
   server and client CPU, RSS idle and peak.
5. Targets: MET / MISSED.

Every server is started by this script on 127.0.0.1 (a free port), one at a time, and stopped by
pid in a `finally`; every temporary directory is removed. Steps 1 and 3 are `bench.kit.limits`,
2 is `bench.scenarios.wal_append` and `bench.scenarios.engine_txn`, 4 is `bench.scenarios.single_writes`. The helper servers of
(c) and step 3 can also be run by hand: `--noop-server PORT`, `--echo-server PORT`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kit import limits  # noqa: E402
from bench.kit.client import CONNECTION_COUNTS  # noqa: E402
from bench.kit.procs import pin_children_to_this_checkout  # noqa: E402
from bench.kit.report import (fmt_int, fmt_ms, fmt_ratio, header_lines, load_average, notes_lines,  # noqa: E402
                              progress, ratio, run_facts, target_lines)
from bench.kit.runs import settle_seconds  # noqa: E402
from bench.kit.tarantool import INSTALL_HINT, find_tarantool  # noqa: E402
from bench.scenarios import engine_txn, noop_server, single_writes, wal_append  # noqa: E402

# Targets printed next to the figures.
# Issue "The fast path": >= 0.8x Tarantool's ops/s at 1 connection, >= 1.0x at 16.
TARGET_RATIO_VS_TARANTOOL = {1: 0.8, 16: 1.0}
TARGET_P99_1CONN_MS = 1.0
TARGET_IDLE_RSS_MB = 80.0
TARGET_CPU_PER_OP_VS_TARANTOOL = 1.5


def targets(servers: dict[str, Any]) -> list[tuple[str, str, bool | None]]:
    found: list[tuple[str, str, bool | None]] = []
    if not servers:
        return found
    for nconn in CONNECTION_COUNTS:
        value = ratio(single_writes.ops_per_s(servers, "ours", nconn), single_writes.ops_per_s(servers, "tarantool", nconn))
        target = TARGET_RATIO_VS_TARANTOOL[nconn]
        found.append((f"ours >= {target:.1f}x tarantool at {nconn} conn", fmt_ratio(value),
                      None if value is None else value >= target))
    for nconn in CONNECTION_COUNTS:
        value = single_writes.cpu_per_op_ratio(servers, nconn)
        found.append((f"ours server CPU/op <= {TARGET_CPU_PER_OP_VS_TARANTOOL:g}x tarantool's, {nconn} conn",
                      fmt_ratio(value), None if value is None else value <= TARGET_CPU_PER_OP_VS_TARANTOOL))
    run1 = servers.get("ours", {}).get("runs", {}).get(1)
    p99 = run1["p99_ns"] / 1e6 if run1 and run1["ops"] else None
    found.append((f"ours p99 < {TARGET_P99_1CONN_MS:g} ms at 1 conn", "-" if p99 is None else f"{p99:.3f} ms",
                  None if p99 is None else p99 < TARGET_P99_1CONN_MS))
    idle = servers.get("ours", {}).get("idle_rss_kb")
    idle_mb = idle / 1024 if idle else None
    found.append((f"ours idle RSS < {TARGET_IDLE_RSS_MB:g} MB", "-" if idle_mb is None else f"{idle_mb:.1f} MB",
                  None if idle_mb is None else idle_mb < TARGET_IDLE_RSS_MB))
    return found


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out = header_lines("bench_single", report)
    out.append(f"measure {args.seconds:g} s after {report['warmup_s']:g} s warm-up; temp dir on {report['tmp_base']}; "
               f"load average (1/5/15 min) at start {report['loadavg_start']}, at end {report['loadavg_end']}")
    out.append("")
    fs = report["fsync"]
    out.append(f"DISK  write {limits.FSYNC_BLOCK_BYTES} B + fsync: {fmt_int(fs['fsyncs_per_s'])} fsyncs/s "
               f"(p50 {fmt_ms(fs['p50_ns'])} ms, p99 {fmt_ms(fs['p99_ns'])} ms, max {fmt_ms(fs['max_ns'])} ms)")
    out.append("")
    out += wal_append.report_lines(report["wal"], fs["fsyncs_per_s"])
    out.append("")
    out += engine_txn.report_lines(report["engine"])
    out.append("")
    if args.engine_only:
        out.append("TARGETS")
        out += target_lines(engine_txn.targets(report["engine"]), 36, 10)
        print("\n".join(out), flush=True)
        return
    lb = report["loopback"]
    out.append(f"LOOPBACK  Python socket ping-pong, 1 connection: {fmt_int(lb.get('rt_per_s'))} round trips/s "
               f"(p50 {fmt_ms(lb.get('p50_ns'))} ms, p99 {fmt_ms(lb.get('p99_ns'))} ms)")
    out.append("")
    out += single_writes.report_lines(report["servers"], args.client_procs, lb.get("rt_per_s"))
    out.append("")
    out.append("TARGETS")
    out += target_lines(engine_txn.targets(report["engine"]) + targets(report["servers"]), 44, 10)
    out.append("")
    out += notes_lines(single_writes.notes(report["servers"]))
    print("\n".join(out), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per figure (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 s per figure instead of 5")
    parser.add_argument("--client-procs", type=int, default=1, metavar="K",
                        help="spread the 16 connections over K client processes (default 1: threads only)")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="where temporary data dirs go (default: the system temp dir); fsync and WAL "
                             "figures are for this filesystem")
    parser.add_argument("--engine-only", action="store_true",
                        help="the disk, WAL and engine figures only: no servers")
    parser.add_argument("--tarantool", default=None, help="Tarantool binary (default /usr/bin/tarantool or PATH)")
    parser.add_argument("--noop-server", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--echo-server", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settle_seconds(parser, args, low=0.1)
    if not 1 <= args.client_procs <= 16:
        parser.error("--client-procs must be between 1 and 16")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.noop_server is not None:
        return noop_server.main(args.noop_server)
    if args.echo_server is not None:
        return limits.echo_server_main(args.echo_server)

    pin_children_to_this_checkout()
    warmup_s = 0.5 if args.quick else 1.0
    work = Path(tempfile.mkdtemp(prefix="bench_single_", dir=args.tmp_dir))
    report: dict[str, Any] = {**run_facts(), "warmup_s": warmup_s, "tmp_base": str(work.parent), "servers": {}}
    try:
        progress(f"disk fsync limit in {work}")
        report["fsync"] = limits.measure_fsync_limit(work, args.seconds, min(warmup_s, 0.5))
        report["wal"] = wal_append.run(work, args.seconds, min(warmup_s, 0.5))
        report["engine"] = engine_txn.run(work, args.seconds, min(warmup_s, 0.5))
        if not args.engine_only:
            _bench_servers(work, args, warmup_s, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = load_average()
    print_report(report, args)
    return 0


def _bench_servers(work: Path, args: argparse.Namespace, warmup_s: float, report: dict[str, Any]) -> None:
    """The loopback limit, then the SQL load on our server, Tarantool and the no-op server."""
    servers = report["servers"]
    progress("loopback round trip")
    report["loopback"] = limits.measure_loopback_limit(work, args.seconds, warmup_s)
    load = {"seconds": args.seconds, "client_procs": args.client_procs, "warmup_s": warmup_s, "servers": servers}
    single_writes.bench_server("ours", lambda: single_writes.start_ours(work), True, **load)
    binary = find_tarantool(args.tarantool)
    if binary is None:
        message = f"tarantool is not installed: install it with `{INSTALL_HINT}`"
        progress(message)
        servers["tarantool"] = {"skipped": message, "runs": {}}
    else:
        single_writes.bench_server("tarantool", lambda: single_writes.start_tarantool(work, binary), False, **load)
    single_writes.bench_server("noop", lambda: single_writes.start_noop(work), False, **load)


if __name__ == "__main__":
    sys.exit(main())
