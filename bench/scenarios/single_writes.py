"""Single-instance writes: `INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)` through the PyPI
`tarantool` connector with 1 and 16 connections against (a) our server (`wal_mode = "write"`),
(b) Tarantool 2.6 (`wal_mode='write'`), (c) the do-nothing trio iproto server of
`noop_server` (the ceiling of our stack). For each: ops/s, p50/p99/max, server CPU over the
measured window (from /proc) and client CPU, and the server's memory: VmRSS idle, at its peak
under 16 connections, after each load, and VmHWM at the end.

The servers run one at a time, each started on 127.0.0.1 on a free port and stopped by pid;
one failing does not stop the others."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from bench.kit.client import (CONNECTION_COUNTS, KEY_RANGE, SQL_CREATE, VALUE_BYTES, connect, load_figures,
                              run_client_group, run_client_processes)
from bench.kit.procfs import CpuMarks, RssWatch, read_status_kb
from bench.kit.procs import Proc, log_problems, read_lines, start_helper
from bench.kit.report import fmt_int, fmt_ms, fmt_pct, fmt_ratio, progress, ratio
from bench.kit.tarantool import spawn_tarantool, wait_ready
from replicaset.testing.processes import free_port

SQL_INSERT = "INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)"
SERVERS = ("ours", "tarantool", "noop")
CLIENT_SOCKET_TIMEOUT_S = 10.0
SERVER_START_TIMEOUT_S = 30.0
RSS_SAMPLE_INTERVAL_S = 0.1
MEMTX_MEMORY_BYTES = 256 * 1024 * 1024

TARANTOOL_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    wal_mode = 'write',
    memtx_memory = {memtx_memory},
    work_dir = '{work_dir}',
}}
box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
box.execute([[CREATE TABLE IF NOT EXISTS kv(k INTEGER PRIMARY KEY, v TEXT)]])
require('log').info('BENCH_READY')
"""


def start_ours(work: Path) -> Proc:
    config = work / "ours.toml"
    config.write_text('wal_mode = "write"\n[replication]\ndefault_write_consistency = "one"  # as Tarantool\'s asynchronous write\n')
    return Proc.ours("ours", ["bootstrap", "--data-dir", str(work / "ours_data"), "--config", str(config)],
                     work / "ours.log")


def start_tarantool(work: Path, binary: str) -> Proc:
    port = free_port()
    server = spawn_tarantool("tarantool", binary, work / "tarantool", TARANTOOL_INIT, port=port,
                             memtx_memory=MEMTX_MEMORY_BYTES)
    try:
        wait_ready(server, SERVER_START_TIMEOUT_S)
    except Exception:
        server.stop()
        raise
    server.port = port
    return server


def start_noop(work: Path) -> Proc:
    return start_helper("noop", "bench.scenarios.noop_server", work / "noop.log")


def run_load(server: Proc, nconn: int, warmup_s: float, seconds: float, client_procs: int, seed: int) -> dict[str, Any]:
    """One load of `nconn` connections, with the server's CPU time read at the end of the
    warm-up and at the end (timers, so the marks fall on the same instants as the clients'
    window) and its VmRSS sampled throughout."""
    assert server.port is not None
    cpu = CpuMarks([server.pid], warmup_s, seconds)
    procs = max(1, min(client_procs, nconn))
    watch = RssWatch(server.pid, RSS_SAMPLE_INTERVAL_S)
    try:
        if procs == 1:
            def get_start_ns() -> int:
                start_ns = time.monotonic_ns() + 50_000_000
                cpu.schedule(start_ns)
                return start_ns

            result = run_client_group(server.port, nconn, SQL_INSERT, seed, warmup_s, seconds,
                                      CLIENT_SOCKET_TIMEOUT_S, get_start_ns)
            client_cpu_s = result["client_cpu_s"]
            groups = [result]
        else:
            groups, client_cpu_s = run_client_processes(server.port, nconn, procs, SQL_INSERT, seed, warmup_s,
                                                        seconds, CLIENT_SOCKET_TIMEOUT_S, cpu.schedule)
    finally:
        server_cpu_s = cpu.used_s(warmup_s + seconds + 60)[0]
        watch.stop()

    return {
        "server": server.name,
        "conns": nconn,
        "client_procs": procs,
        **load_figures(groups),
        "server_cpu": server_cpu_s / seconds if server_cpu_s is not None else None,
        "client_cpu": client_cpu_s / seconds if client_cpu_s is not None else None,
        "peak_rss_kb": watch.rss_peak_kb,
    }


def execute_once(port: int, sql: str, binds: list[Any] | None = None) -> Any:
    """One statement on a connection of its own."""
    conn = connect(port, CLIENT_SOCKET_TIMEOUT_S)
    try:
        return conn.execute(sql, binds) if binds is not None else conn.execute(sql)
    finally:
        conn.close()


def bench_server(name: str, starter: Callable[[], Proc], create_table: bool, seconds: float, client_procs: int,
                 warmup_s: float, servers: dict[str, Any]) -> None:
    """Start one server, hold it idle, load it with each connection count, stop it; its entry
    in `servers` holds the runs, the memory figures, and why it failed if it did."""
    entry: dict[str, Any] = {"runs": {}}
    servers[name] = entry
    server = None
    try:
        progress(f"{name}: starting")
        server = starter()
        entry["pid"] = server.pid
        assert server.port is not None
        if create_table:
            execute_once(server.port, SQL_CREATE)
        response = execute_once(server.port, SQL_INSERT, [0, "x" * VALUE_BYTES])
        entry["row_count_reply"] = str(getattr(response, "affected_row_count", "?"))
        time.sleep(0.5)
        entry["idle_rss_kb"] = read_status_kb(server.pid, "VmRSS")
        for nconn in CONNECTION_COUNTS:
            progress(f"{name}: {nconn} connection(s), {warmup_s:.1f} s warm-up + {seconds:.1f} s")
            run = run_load(server, nconn, warmup_s, seconds, client_procs, seed=nconn)
            entry["runs"][nconn] = run
            entry[f"rss_after_{nconn}_kb"] = read_status_kb(server.pid, "VmRSS")
            if run["errors"] or run["stuck_threads"]:
                progress(f"{name}: {run['errors']} errors, {run['stuck_threads']} stuck threads: {run['error_samples']}")
            if server.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {server.proc.returncode} during the load:\n{server.tail(15)}")
        t0 = time.monotonic()
        execute_once(server.port, SQL_INSERT, [1, "after"])
        entry["post_load_request_ms"] = (time.monotonic() - t0) * 1000
        entry["hwm_rss_kb"] = read_status_kb(server.pid, "VmHWM")
    except Exception as exc:  # noqa: BLE001 - one server failing must not stop the others
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"{name}: FAILED: {entry['failure']}")
    finally:
        if server is not None:
            entry["exit_code"] = server.stop()
            entry["log_notes"] = scan_log(server)
            progress(f"{name}: stopped (exit code {entry['exit_code']})")


def scan_log(server: Proc) -> list[str]:
    """Warnings, errors and non-JSON lines (tracebacks) in our server's log; nothing for others."""
    if server.name != "ours":
        return []
    lines = read_lines(server.log_path)
    notes = [line[:200] for line in log_problems(lines)]
    return [f"{len(lines)} log lines, {len(notes)} warning/error/non-JSON"] + notes[:8]


def ops_per_s(servers: dict[str, Any], name: str, nconn: int) -> float | None:
    run = servers.get(name, {}).get("runs", {}).get(nconn)
    return run["ops_per_s"] if run else None


def server_us_per_op(run: dict[str, Any]) -> float | None:
    """The server's CPU microseconds per operation: its share of a core over the window
    divided by the operations per second."""
    share, ops = run.get("server_cpu"), run.get("ops_per_s")
    return share / ops * 1e6 if share is not None and ops else None


def cpu_per_op_ratio(servers: dict[str, Any], nconn: int) -> float | None:
    """Our server's CPU per operation over Tarantool's, at `nconn` connections."""
    runs = [servers.get(name, {}).get("runs", {}).get(nconn) for name in ("ours", "tarantool")]
    if any(run is None for run in runs):
        return None
    return ratio(server_us_per_op(runs[0]), server_us_per_op(runs[1]))


def report_lines(servers: dict[str, Any], client_procs: int, loopback_rt_per_s: float | None) -> list[str]:
    """The SQL table, the RATIOS (between servers, and against the loopback limit) and MEMORY."""
    out = [f"SQL  {SQL_INSERT}  keys 0..{KEY_RANGE - 1}, {VALUE_BYTES}-char value, PyPI tarantool connector; "
           f"client: {client_procs} process(es) x threads",
           f"  {'server':<10} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>6} "
           f"{'srv CPU':>7} {'cli CPU':>7} {'srv us/op':>9}"]
    for nconn in CONNECTION_COUNTS:
        for name in SERVERS:
            entry = servers.get(name, {})
            run = entry.get("runs", {}).get(nconn)
            if run is None:
                why = entry.get("skipped") or entry.get("failure") or "not run"
                out.append(f"  {name:<10} {nconn:>5} {'-':>9}  ({why.splitlines()[0][:80]})")
                continue
            errors = str(run["errors"]) + (f"+{run['stuck_threads']}stuck" if run["stuck_threads"] else "")
            out.append(f"  {name:<10} {nconn:>5} {fmt_int(run['ops_per_s']):>9} {fmt_ms(run['p50_ns']):>8} "
                       f"{fmt_ms(run['p99_ns']):>8} {fmt_ms(run['max_ns']):>8} {errors:>6} "
                       f"{fmt_pct(run['server_cpu']):>7} {fmt_pct(run['client_cpu']):>7} "
                       f"{fmt_int(server_us_per_op(run)):>9}")
    out += ["  (CPU: share of one core over the measured window; 2 cores in all, client and server share them;"
            " srv us/op: the server's user + system CPU over the window / operations, stable where ops/s is not)",
            "", "RATIOS"]

    def ops(name: str, nconn: int) -> float | None:
        return ops_per_s(servers, name, nconn)

    for nconn in CONNECTION_COUNTS:
        out.append(f"  {nconn:>2} conn: ours/tarantool {fmt_ratio(ratio(ops('ours', nconn), ops('tarantool', nconn)))}   "
                   f"ours/noop {fmt_ratio(ratio(ops('ours', nconn), ops('noop', nconn)))}   "
                   f"tarantool/noop {fmt_ratio(ratio(ops('tarantool', nconn), ops('noop', nconn)))}   "
                   f"server CPU per op ours/tarantool {fmt_ratio(cpu_per_op_ratio(servers, nconn))}")
    out += ["  1 conn ops/s as a fraction of the loopback round-trip limit: " + "   ".join(
        f"{name} {fmt_ratio(ratio(ops(name, 1), loopback_rt_per_s))}" for name in SERVERS), ""]

    def mb(kb: int | None) -> str:
        return "-" if not kb else f"{kb / 1024:.1f}"

    out += ["MEMORY  VmRSS MB", f"  {'server':<10} {'idle':>7} {'peak@16':>8} {'after 1':>8} {'after 16':>9} {'VmHWM':>7}"]
    for name in ("ours", "tarantool"):
        entry = servers.get(name, {})
        run16 = entry.get("runs", {}).get(16)
        out.append(f"  {name:<10} {mb(entry.get('idle_rss_kb')):>7} {mb(run16['peak_rss_kb'] if run16 else None):>8} "
                   f"{mb(entry.get('rss_after_1_kb')):>8} {mb(entry.get('rss_after_16_kb')):>9} "
                   f"{mb(entry.get('hwm_rss_kb')):>7}")
    return out


def notes(servers: dict[str, Any]) -> list[str]:
    """What went wrong or looks odd: skipped or failed servers, errors, slow requests, our log."""
    found = []
    for name in SERVERS:
        entry = servers.get(name, {})
        if entry.get("skipped"):
            found.append(f"{name}: skipped: {entry['skipped']}")
        if entry.get("failure"):
            found.append(f"{name}: FAILED: {entry['failure']}")
        if entry.get("exit_code") not in (None, 0) and not entry.get("skipped"):
            found.append(f"{name}: exit code {entry['exit_code']} after SIGTERM")
        if entry.get("row_count_reply") not in (None, "1"):
            found.append(f"{name}: the sanity INSERT reported row count {entry['row_count_reply']}")
        for nconn, run in entry.get("runs", {}).items():
            if run["errors"] or run["stuck_threads"]:
                found.append(f"{name} {nconn} conn: {run['errors']} errors, {run['stuck_threads']} stuck threads: "
                             f"{run['error_samples']}")
        if entry.get("post_load_request_ms") is not None and entry["post_load_request_ms"] > 100:
            found.append(f"{name}: a request right after the load took {entry['post_load_request_ms']:.0f} ms")
        if name == "ours":
            found.extend(f"ours log: {line}" for line in entry.get("log_notes", []))
    return found
