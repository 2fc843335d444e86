"""Benchmark of the Spark WAL-merge audit (docs/audit.md).

    .venv/bin/python bench/bench_audit.py --rows 10000000 [--dir DIR] [--keep]

Generates a clean three-member WAL set with tools/gen_walset.py (64 MiB segments), then measures
on local[2]: the single-process Python baseline (the `wal` reader plus msgpack decode of every
payload), JVM/session start, the scan alone (read and decode every row: `count()` of the data
source), the full audit (checks 1-4, timeline, delay; JVM start excluded), and peak RSS of the
driver JVM (which runs the executor in local mode) and the Python workers, sampled from /proc.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import msgpack  # noqa: E402

import gen_walset  # noqa: E402
from wal.segment import list_segments, read_segment_records  # noqa: E402

SAMPLE_INTERVAL_S = 0.2
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE_KIB
    except (OSError, IndexError, ValueError):
        return 0


def _descendants(root: int) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
        names[int(entry)] = name
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            out.append((child, names.get(child, "?")))
            stack.append(child)
    return out


class PeakRss:
    """Samples the RSS of this process tree: driver Python, the JVM, Python workers."""

    def __init__(self) -> None:
        self.peak_total_kib = 0
        self.peak_jvm_kib = 0
        self.peak_workers_kib = 0
        self.peak_driver_py_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            procs = _descendants(me)
            jvm = sum(_rss_kib(p) for p, n in procs if n == "java")
            workers = sum(_rss_kib(p) for p, n in procs if n != "java")
            driver = _rss_kib(me)
            self.peak_jvm_kib = max(self.peak_jvm_kib, jvm)
            self.peak_workers_kib = max(self.peak_workers_kib, workers)
            self.peak_driver_py_kib = max(self.peak_driver_py_kib, driver)
            self.peak_total_kib = max(self.peak_total_kib, jvm + workers + driver)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def python_baseline(dirs: list[Path]) -> tuple[int, float]:
    """One process: every segment with the `wal` reader, every payload decoded."""
    started = time.monotonic()
    rows = 0
    unpackb = msgpack.unpackb
    for d in dirs:
        for path in list_segments(d / "wal"):
            for _, record in read_segment_records(path):
                unpackb(record.payload, raw=False, strict_map_key=False)
                rows += 1
    return rows, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--segment-bytes", type=int, default=64 << 20)
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-audit-"))
    results: dict[str, object] = {"rows_requested": args.rows}
    try:
        if not (root / "manifest.json").exists():
            t = time.monotonic()
            manifest = gen_walset.generate(root, rows=args.rows, segment_bytes=args.segment_bytes)
            (root / "manifest.json").write_text(json.dumps(manifest))
            results["generate_s"] = round(time.monotonic() - t, 1)
        manifest = json.loads((root / "manifest.json").read_text())
        dirs = [Path(p) for p in manifest["members"].values()]
        results["wal_bytes"] = sum(p.stat().st_size for d in dirs for p in list_segments(d / "wal"))
        results["segments"] = sum(len(list_segments(d / "wal")) for d in dirs)

        base_rows, base_s = python_baseline(dirs)
        results["baseline_rows"] = base_rows
        results["baseline_s"] = round(base_s, 2)
        results["baseline_rows_per_s"] = round(base_rows / base_s)

        from replicaset.audit.run import load_records, run_audit
        from replicaset.audit.inputs import discover
        from replicaset.audit.session import open_session

        with PeakRss() as rss:
            t0 = time.monotonic()
            spark = open_session("local[2]")
            results["session_start_s"] = round(time.monotonic() - t0, 2)
            t = time.monotonic()
            scanned = load_records(spark, discover(dirs)).count()
            scan_s = time.monotonic() - t
            results["scan_rows"] = scanned
            results["scan_s"] = round(scan_s, 2)
            results["scan_rows_per_s"] = round(scanned / scan_s)
            t = time.monotonic()
            code, report = run_audit(dirs, spark=spark, stream=io.StringIO(), progress=False)
            audit_s = time.monotonic() - t
            spark.stop()
        results["audit_exit_code"] = code
        results["audit_s"] = round(audit_s, 2)
        results["audit_rows_per_s"] = round(report["rows_total"] / audit_s)
        results["end_to_end_s"] = round(results["session_start_s"] + audit_s, 2)  # type: ignore[operator]
        results["audit_read_s"] = report["timing_s"]["read"]
        results["peak_rss_total_mib"] = rss.peak_total_kib // 1024
        results["peak_rss_jvm_mib"] = rss.peak_jvm_kib // 1024
        results["peak_rss_python_workers_mib"] = rss.peak_workers_kib // 1024
        results["peak_rss_driver_python_mib"] = rss.peak_driver_py_kib // 1024
        results["scan_vs_baseline"] = round(results["scan_rows_per_s"] / results["baseline_rows_per_s"], 2)  # type: ignore[operator]
        results["audit_vs_baseline"] = round(results["audit_rows_per_s"] / results["baseline_rows_per_s"], 2)  # type: ignore[operator]
        print(json.dumps(results, indent=2))
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
