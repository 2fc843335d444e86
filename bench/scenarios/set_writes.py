"""Replica-set write throughput: `INSERT OR REPLACE INTO kv VALUES (?, ?)` with 1 and 16
connections (one thread each, PyPI `tarantool` connector) against member 1 of a three-member
set, ours or Tarantool's (`bench.kit.sets`); after each load, how long members 2 and 3 took
to reach member 1's vclock; CPU share of each member over the load, warm-up included."""

from __future__ import annotations

import time
from typing import Any

from bench.kit.client import CONNECTION_COUNTS, KEY_RANGE, VALUE_BYTES, load_figures, run_client_group
from bench.kit.procfs import CpuWindow
from bench.kit.report import fmt_cpu, fmt_int, fmt_ms, fmt_ratio, progress, ratio
from bench.kit.sets import CLIENT_SOCKET_TIMEOUT_S, CONVERGE_TIMEOUT_S, ReplicaSet, wait_converged

SQL_INSERT = "INSERT OR REPLACE INTO kv VALUES (?, ?)"
SETS = ("ours", "tarantool")


def run_load(port: int, nconn: int, warmup_s: float, seconds: float, seed: int) -> dict[str, Any]:
    """One load of `nconn` connections on `port`, starting 50 ms after they are all open."""
    result = run_client_group(port, nconn, SQL_INSERT, seed, warmup_s, seconds, CLIENT_SOCKET_TIMEOUT_S,
                              lambda: time.monotonic_ns() + 50_000_000)
    return load_figures([result])


def run(rs: ReplicaSet, seconds: float, warmup_s: float, entry: dict[str, Any]) -> None:
    """Each connection count on member 1 of a started set, then wait for the others to converge;
    the set's `entry` gets `loads`, `converge` and notes of anything that went wrong."""
    for nconn in CONNECTION_COUNTS:
        progress(f"{rs.name}: {nconn} connection(s) on member 1, {warmup_s:g} s warm-up + {seconds:g} s")
        cpu = CpuWindow(rs.pids())
        load = run_load(rs.ports[0], nconn, warmup_s, seconds, seed=nconn)
        load["cpu"] = cpu.stop()
        entry["loads"][nconn] = load
        if load["errors"] or load["stuck_threads"]:
            entry["notes"].append(f"{nconn} conn: {load['errors']} errors, {load['stuck_threads']} stuck: "
                                  f"{load['error_samples'][:4]}")
        took, vclocks = wait_converged(rs)
        entry["converge"][nconn] = took
        if took is None:
            entry["notes"].append(f"after {nconn} conn load: vclocks did not converge in {CONVERGE_TIMEOUT_S:.0f} s: {vclocks}")
        progress(f"{rs.name}: {fmt_int(load['ops_per_s'])} ops/s; members converged after "
                 f"{'-' if took is None else f'{took:.2f}'} s")


def ops_per_s(sets: dict[str, Any], name: str, nconn: int) -> float | None:
    load = sets.get(name, {}).get("loads", {}).get(nconn)
    return load["ops_per_s"] if load else None


def report_lines(sets: dict[str, Any]) -> list[str]:
    """Section 1: the table, the load average around each set, the ratio ours/Tarantool."""
    out = [f"1. WRITES  {SQL_INSERT}  on member 1, keys 0..{KEY_RANGE - 1}, {VALUE_BYTES}-char value, PyPI tarantool "
           "connector, one thread per connection",
           f"  {'set':<10} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>6} "
           f"{'converged after':>16} {'CPU m1/m2/m3':>13}"]
    for nconn in CONNECTION_COUNTS:
        for name in SETS:
            entry = sets.get(name, {})
            load = entry.get("loads", {}).get(nconn)
            if load is None:
                why = entry.get("skipped") or entry.get("failure") or "not run"
                out.append(f"  {name:<10} {nconn:>5} {'-':>9}  ({why.splitlines()[0][:100]})")
                continue
            conv = entry.get("converge", {}).get(nconn)
            conv_s = "NO (timeout)" if conv is None else f"{conv:.2f} s"
            errors = str(load["errors"]) + (f"+{load['stuck_threads']}stuck" if load["stuck_threads"] else "")
            out.append(f"  {name:<10} {nconn:>5} {fmt_int(load['ops_per_s']):>9} {fmt_ms(load['p50_ns']):>8} "
                       f"{fmt_ms(load['p99_ns']):>8} {fmt_ms(load['max_ns']):>8} {errors:>6} {conv_s:>16} "
                       f"{fmt_cpu(load.get('cpu')):>13}")
    out.append("  (converged after: from the end of the load until members 2 and 3 had member 1's vclock; CPU: share "
               "of one core per member over the load incl. warm-up)")
    out.append("  load average (1/5/15 min) around each set: " + "; ".join(
        f"{name} {sets[name].get('loadavg_start', '?')} -> {sets[name].get('loadavg_end', '?')}"
        for name in SETS if name in sets))
    out.append("  ratio ours/tarantool: " + "   ".join(
        f"{n} conn {fmt_ratio(ratio(ops_per_s(sets, 'ours', n), ops_per_s(sets, 'tarantool', n)))}"
        for n in CONNECTION_COUNTS))
    return out
