"""The Spark WAL-merge audit (docs/audit.md) on `local[2]`, over a WAL set already written:
a single-process Python pass over the same files (the `wal` reader plus msgpack decode of
every payload: the baseline), JVM/session start, the scan alone (read and decode every row:
`count()` of the data source), the full audit (checks 1-4, timeline, delay; JVM start
excluded), and the peak RSS of the driver JVM (which runs the executor in local mode), the
Python workers and the driver, sampled from /proc. `measure_scaling`: the same audit on a
standalone master with two one-core workers, with one executor core and with two."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import msgpack

from bench.kit.procfs import descendants, read_cpu_seconds, read_pss_kib, read_statm_rss_kib
from wal.segment import list_segments, read_segment_records

SAMPLE_INTERVAL_S = 0.2


class PeakRss:
    """Samples the RSS of this process tree (driver Python, the JVM, Python workers) and its
    PSS, in which the pages forked Python workers share with the daemon they came from count
    once."""

    def __init__(self) -> None:
        self.peak_total_kib = 0
        self.peak_jvm_kib = 0
        self.peak_workers_kib = 0
        self.peak_driver_py_kib = 0
        self.peak_pss_total_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            procs = descendants(me)
            jvm = sum(read_statm_rss_kib(p) for p, n in procs if n == "java")
            workers = sum(read_statm_rss_kib(p) for p, n in procs if n != "java")
            driver = read_statm_rss_kib(me)
            self.peak_jvm_kib = max(self.peak_jvm_kib, jvm)
            self.peak_workers_kib = max(self.peak_workers_kib, workers)
            self.peak_driver_py_kib = max(self.peak_driver_py_kib, driver)
            self.peak_total_kib = max(self.peak_total_kib, jvm + workers + driver)
            pss = read_pss_kib(me) + sum(read_pss_kib(p) for p, _ in procs)
            self.peak_pss_total_kib = max(self.peak_pss_total_kib, pss)

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


def measure(dirs: list[Path], results: dict[str, Any]) -> None:
    """Every figure of the audit over the members' data directories `dirs`, added to
    `results` in the order the JSON report prints them."""
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
    results["end_to_end_s"] = round(results["session_start_s"] + audit_s, 2)
    results["audit_read_s"] = report["timing_s"]["read"]
    results["peak_rss_total_mib"] = rss.peak_total_kib // 1024
    results["peak_pss_total_mib"] = rss.peak_pss_total_kib // 1024
    results["peak_rss_jvm_mib"] = rss.peak_jvm_kib // 1024
    results["peak_rss_python_workers_mib"] = rss.peak_workers_kib // 1024
    results["peak_rss_driver_python_mib"] = rss.peak_driver_py_kib // 1024
    results["scan_vs_baseline"] = round(results["scan_rows_per_s"] / results["baseline_rows_per_s"], 2)
    results["audit_vs_baseline"] = round(results["audit_rows_per_s"] / results["baseline_rows_per_s"], 2)


def _tree_cpu_s() -> dict[int, float]:
    """CPU seconds of this process and of each process below it: driver, master, workers,
    executors and their Python workers."""
    me = os.getpid()
    return {p: read_cpu_seconds(p) or 0.0 for p in [me, *(p for p, _ in descendants(me))]}


def _cpu_since(before: dict[int, float]) -> float:
    """CPU seconds spent since `before` by the processes alive now. A process that ended in
    between (the previous application's executor shutting down) is left out, not subtracted."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in _tree_cpu_s().items())


def measure_scaling(dirs: list[Path], results: dict[str, Any], log_dir: Path) -> None:
    """The audit on a standalone master with two workers of one core each: first with one
    executor core for the application (`spark.cores.max=1`), then with both. Each run opens its
    own session, so its executors start fresh; the session start is left out of both."""
    from replicaset.audit.run import run_audit
    from replicaset.audit.session import open_session
    from replicaset.testing.spark_standalone import standalone_cluster

    with standalone_cluster(log_dir, workers=2, cores=1, memory="1g") as master:
        for cores in (1, 2):
            spark = open_session(master,
                                 conf={"spark.cores.max": str(cores), "spark.executor.memory": "1g"})
            try:
                cpu_before = _tree_cpu_s()
                t = time.monotonic()
                code, report = run_audit(dirs, spark=spark, stream=io.StringIO(), progress=False)
                elapsed = time.monotonic() - t
                cpu = _cpu_since(cpu_before)
            finally:
                spark.stop()
            results[f"standalone_{cores}_executor_audit_s"] = round(elapsed, 2)
            # Cores kept busy: a one-core executor's JVM compiles and collects on the other core.
            results[f"standalone_{cores}_executor_cpu_cores"] = round(cpu / elapsed, 2)
            results[f"standalone_{cores}_executor_exit_code"] = code
            results[f"standalone_{cores}_executor_rows_per_s"] = round(report["rows_total"] / elapsed)
    results["standalone_scaling"] = round(
        results["standalone_1_executor_audit_s"] / results["standalone_2_executor_audit_s"], 2)
