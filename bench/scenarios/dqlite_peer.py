"""dqlite, the Raft + SQLite peer: Debian's `go-dqlite` ships `dqlite-benchmark`, which is both
the three nodes and the client. Node 1 is started with `--driver --cluster A,B,C` (it
self-elects, waits for the others, then runs the `kvwrite` workload from its own process against
itself, the leader), nodes 2 and 3 with `--join A`. The client is therefore dqlite's own Go
workload, not the PyPI connector the other sets take: each worker runs single-row writes of a
random 32-byte key and a `--value-size` value, each in its own transaction committed by Raft
quorum (2 of 3), and writes every request's start time (ns since the epoch) and latency, and
every error, to one file per worker under `<dir>/<node 1>/results`.

`--duration` is whole seconds: the run lasts ceil(warm-up + seconds); the requests started in the
first `warmup_s` are left out, as for the other sets. CPU per operation: the three processes'
CPU seconds (sampled every 50 ms) over the measured window, divided by the operations in the
same window; node 1's share includes the client workload. Every node is a fresh cluster on free
127.0.0.1 ports per connection count, stopped by pid; the divergent-row check is not possible
here: the database lives in Raft segments and snapshots, and `dqlite` queries go to the leader
only."""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.kit.client import CONNECTION_COUNTS, VALUE_BYTES
from bench.kit.procfs import CpuSampler
from bench.kit.procs import HOST, Proc
from bench.kit.report import fmt_int, fmt_ms, percentile, progress
from replicaset.testing.processes import free_port

INSTALL_HINT = "apt-get install -y go-dqlite"
CLUSTER_TIMEOUT_S = 60
RUN_MARGIN_S = 30.0
CPU_SAMPLE_INTERVAL_S = 0.05
ERROR_SAMPLES_MAX = 3


def find_dqlite_benchmark(explicit: str | None) -> str | None:
    """`explicit` when given and executable (None when it is not), else `dqlite-benchmark` on PATH."""
    candidate = explicit or shutil.which("dqlite-benchmark")
    return candidate if candidate and os.access(candidate, os.X_OK) else None


def parse_result_file(path: Path) -> tuple[list[tuple[int, float]], list[tuple[int, str]]]:
    """One worker's file: (start ns, latency ms) of each request, (ns, message) of each error."""
    measurements: list[tuple[int, float]] = []
    errors: list[tuple[int, str]] = []
    section = None
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("measurements"):
            section = measurements
            continue
        if line.strip() == "errors":
            section = errors
            continue
        if section is None or not line.strip():
            continue
        stamp, _, rest = line.partition(" ")
        if section is measurements:
            measurements.append((int(stamp), float(rest)))
        else:
            errors.append((int(stamp), rest))
    return measurements, errors


def run_cluster(work: Path, binary: str, nconn: int, warmup_s: float, seconds: float) -> dict[str, Any]:
    """One fresh three-node cluster, `nconn` workers; its figures, or `failure`."""
    run_dir = work / f"dqlite_{nconn}"
    run_dir.mkdir()
    addrs = [f"{HOST}:{free_port()}" for _ in range(3)]
    duration_s = math.ceil(warmup_s + seconds)
    common = ["--value-size", str(VALUE_BYTES), "--workers", str(nconn), "--duration", str(duration_s),
              "--cluster-timeout", str(CLUSTER_TIMEOUT_S)]
    nodes: list[Proc] = []
    out: dict[str, Any] = {"duration_s": duration_s}
    sampler: CpuSampler | None = None
    try:
        nodes.append(Proc.spawn("dqlite n1", [binary, "--db", addrs[0], "--driver", "--cluster", ",".join(addrs),
                                              "--dir", str(run_dir / "n1"), *common], run_dir / "n1.log"))
        for n in (2, 3):
            nodes.append(Proc.spawn(f"dqlite n{n}", [binary, "--db", addrs[n - 1], "--join", addrs[0],
                                                     "--dir", str(run_dir / f"n{n}")], run_dir / f"n{n}.log"))
        sampler = CpuSampler([node.pid for node in nodes], CPU_SAMPLE_INTERVAL_S)
        deadline = time.monotonic() + CLUSTER_TIMEOUT_S + duration_s + RUN_MARGIN_S
        while nodes[0].proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        sampler.stop()
        if nodes[0].proc.poll() is None:
            raise RuntimeError(f"the driver did not finish in {deadline:.0f} s:\n{nodes[0].tail()}")
        if nodes[0].proc.returncode != 0:
            raise RuntimeError(f"the driver exited with {nodes[0].proc.returncode}:\n{nodes[0].tail()}")
        files = sorted((run_dir / "n1" / addrs[0] / "results").glob("*"))
        if not files:
            raise RuntimeError(f"no result files under {run_dir / 'n1' / addrs[0] / 'results'}:\n{nodes[0].tail()}")
        measurements: list[tuple[int, float]] = []
        errors: list[tuple[int, str]] = []
        for path in files:
            found, failed = parse_result_file(path)
            measurements += found
            errors += failed
        out.update(figures(measurements, errors, warmup_s, sampler))
        out["workers_files"] = len(files)
    except Exception as exc:  # noqa: BLE001 - the peer failing must not stop the report
        out["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"dqlite {nconn} workers: FAILED: {out['failure']}")
    finally:
        if sampler is not None:
            sampler.stop()
        out["exit_codes"] = [node.stop() for node in nodes]
    return out


def figures(measurements: list[tuple[int, float]], errors: list[tuple[int, str]], warmup_s: float,
            sampler: CpuSampler) -> dict[str, Any]:
    """ops/s, latencies and errors of the requests started after the warm-up; CPU per operation
    over the sampled window inside the measured one."""
    if not measurements:
        return {"ops": 0, "ops_per_s": None, "errors": len(errors),
                "error_samples": sorted({m for _, m in errors})[:ERROR_SAMPLES_MAX]}
    first = min(stamp for stamp, _ in measurements + errors)
    warm_end = first + int(warmup_s * 1e9)
    measured = [(stamp, ms) for stamp, ms in measurements if stamp >= warm_end]
    failed = [(stamp, message) for stamp, message in errors if stamp >= warm_end]
    ordered = sorted(int(ms * 1e6) for _, ms in measured)
    last_done = max((stamp + int(ms * 1e6) for stamp, ms in measured), default=warm_end)
    elapsed_s = (last_done - warm_end) / 1e9
    window = sampler.window(warm_end, last_done)
    cpu_s: list[float | None] | None = None
    window_ops = 0
    if window is not None:
        w0, w1, cpu_s = window
        window_ops = sum(1 for stamp, _ in measured if w0 <= stamp < w1)
    return {
        "ops": len(ordered),
        "ops_per_s": len(ordered) / elapsed_s if elapsed_s > 0 else None,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
        "max_ns": float(ordered[-1]) if ordered else float("nan"),
        "errors": len(failed),
        "error_samples": sorted({message for _, message in failed})[:ERROR_SAMPLES_MAX],
        "stalls": sum(1 for latency in ordered if latency > 1e9),
        "cpu_s": cpu_s,
        "cpu_window_ops": window_ops,
    }


def run(work: Path, binary: str | None, warmup_s: float, seconds: float) -> dict[str, Any]:
    """Both connection counts (workers), each on its own fresh cluster; `skipped` without the tool."""
    if binary is None:
        return {"skipped": f"dqlite-benchmark not found ({INSTALL_HINT})"}
    entry: dict[str, Any] = {"binary": binary, "loads": {}}
    for nconn in CONNECTION_COUNTS:
        progress(f"dqlite: {nconn} worker(s), three nodes, {math.ceil(warmup_s + seconds)} s run")
        load = run_cluster(work, binary, nconn, warmup_s, seconds)
        entry["loads"][nconn] = load
        progress(f"dqlite: {fmt_int(load.get('ops_per_s'))} ops/s, {load.get('errors', '-')} errors")
    return entry


def cpu_us_per_op(load: dict[str, Any]) -> tuple[float | None, float | None]:
    """(all nodes, node 1 with the client) CPU microseconds per operation in the sampled window."""
    cpu, ops = load.get("cpu_s"), load.get("cpu_window_ops")
    if not cpu or not ops or any(c is None for c in cpu):
        return None, None
    return sum(cpu) / ops * 1e6, cpu[0] / ops * 1e6


def report_lines(entry: dict[str, Any]) -> list[str]:
    """Section 4: dqlite's figures as its own tool measured them."""
    out = ["4. DQLITE  dqlite-benchmark kvwrite on 3 nodes (Raft quorum commit, SQLite): single-row writes, "
           f"32-byte random key, {VALUE_BYTES}-byte value; the client is dqlite-benchmark's own Go workload "
           "inside node 1 (the leader), not the PyPI connector"]
    if "skipped" in entry:
        return out + [f"  skipped: {entry['skipped']}"]
    out.append(f"  {'set':<16} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9} {'errors':>6} "
               f"{'stalls':>6} {'RTs/op':>6} {'CPU us/op all':>13} {'n1':>6}")
    for nconn, load in entry["loads"].items():
        if "failure" in load and "ops" not in load:
            out.append(f"  {'dqlite':<16} {nconn:>5} {'-':>9}  (FAILED: {load['failure'].splitlines()[0][:100]})")
            continue
        all_us, n1_us = cpu_us_per_op(load)
        out.append(f"  {'dqlite':<16} {nconn:>5} {fmt_int(load['ops_per_s']):>9} {fmt_ms(load.get('p50_ns')):>8} "
                   f"{fmt_ms(load.get('p99_ns')):>8} {fmt_ms(load.get('max_ns')):>9} {load['errors']:>6} "
                   f"{load.get('stalls', 0):>6} {1:>6} {fmt_int(all_us):>13} {fmt_int(n1_us):>6}")
        if load["errors"]:
            out.append(f"    errors: {load['error_samples']} (dqlite-benchmark does not retry them)")
    out.append("  (errors: failed requests after the warm-up; CPU: the three nodes over the sampled window, node 1 "
               "includes the client)")
    return out
