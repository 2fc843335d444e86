"""Quorum writes on a three-member set (`bench.kit.sets`): ours at a default write consistency
of ONE or QUORUM, or Tarantool 2.6 with synchronous replication (`replication_synchro_quorum
= 2`, `kv` is_sync). On member 1, with 1 and 16 connections (one thread each):

- single-row commits: `INSERT OR REPLACE INTO kv VALUES (?, ?)`, one request each, through the
  PyPI `tarantool` connector for both servers;
- 10-statement transactions: ten such statements with random keys in one transaction. The
  connector (1.3) has no streams, so ours is driven by `replicaset.iproto.client` with an
  iproto stream (BEGIN, 10 EXECUTE, COMMIT: 12 round trips). Tarantool 2.6 has no iproto
  streams at all (they came in 2.10): it runs a Lua function doing box.begin(), ten
  box.execute(), box.commit(), called through the connector (1 round trip).

For each load: ops/s, p50/p99/max, errors, stalls (requests slower than 1 s, failed ones and
the warm-up's included), and the members' CPU seconds over the measured window per operation. After the
loads: how long the members took to reach member 1's vclock, and the rows of `kv` that are not
the same on all three (divergent rows)."""

from __future__ import annotations

import random
import time
from typing import Any

from bench.kit.client import CONNECTION_COUNTS, KEY_RANGE, VALUE_BYTES, Op, OpenConn, connect, load_figures, run_client_group
from bench.kit.procfs import CpuMarks
from bench.kit.procs import HOST
from bench.kit.report import fmt_int, fmt_ms, progress
from bench.kit.sets import (CLIENT_SOCKET_TIMEOUT_S, CONVERGE_TIMEOUT_S, Members, ReplicaSet, divergent_keys, table_rows,
                            wait_converged)
from replicaset.iproto.client import Client
from replicaset.iproto.constants import RequestType

SQL_INSERT = "INSERT OR REPLACE INTO kv VALUES (?, ?)"
TXN_STATEMENTS = 10
STREAM_ID = 1  # one transaction at a time per connection: one stream is enough
KINDS = ("single", "txn")
ROUND_TRIPS = {("ours", "single"): 1, ("ours", "txn"): TXN_STATEMENTS + 2, ("tarantool", "single"): 1,
               ("tarantool", "txn"): 1}
DIVERGENT_SAMPLES_MAX = 5
FLOOR_NOTE = ("bench.scenarios.noop_quorum, three trio processes that send a QUORUM commit's messages and write its "
              "records with our codec and do nothing else, with group fsyncs on threads as ours, and without fsyncs")

TARANTOOL_TXN_LUA = """
function bench_txn(keys, value)
    box.begin()
    local ok, err = pcall(function()
        for _, k in ipairs(keys) do
            box.execute([[INSERT OR REPLACE INTO kv VALUES (?, ?)]], {k, value})
        end
    end)
    if not ok then
        box.rollback()
        error(err)
    end
    box.commit()
end
"""


def open_our_client(port: int, socket_timeout_s: float) -> Client:
    return Client.connect(HOST, port, timeout_s=socket_timeout_s)


def our_txn(conn: Client, rnd: random.Random, value: str) -> None:
    """BEGIN, ten statements, COMMIT on one stream; at the members' default consistency. A failed
    statement rolls the stream back so the next transaction starts clean."""
    conn.call(RequestType.BEGIN, {}, stream_id=STREAM_ID)
    try:
        for _ in range(TXN_STATEMENTS):
            conn.execute(SQL_INSERT, [rnd.randrange(KEY_RANGE), value], stream_id=STREAM_ID)
    except Exception:
        try:
            conn.call(RequestType.ROLLBACK, {}, stream_id=STREAM_ID)
        except Exception:  # noqa: BLE001 - the statement's error is the one to report
            pass
        raise
    conn.call(RequestType.COMMIT, {}, stream_id=STREAM_ID)


def tarantool_txn(conn: Any, rnd: random.Random, value: str) -> None:
    """One CALL of `bench_txn` (installed on member 1 by `run`) with ten random keys."""
    conn.call("bench_txn", [rnd.randrange(KEY_RANGE) for _ in range(TXN_STATEMENTS)], value)


def server_of(rs: Members) -> str:
    """'ours' or 'tarantool': which client and transaction a set takes."""
    return "tarantool" if rs.name.startswith("tarantool") else "ours"


def run_load(rs: Members, kind: str, nconn: int, warmup_s: float, seconds: float, seed: int) -> dict[str, Any]:
    """One load on member 1, with the members' CPU seconds over the measured window."""
    server = server_of(rs)
    op: Op | None = None
    open_conn: OpenConn = connect
    if kind == "txn":
        op = tarantool_txn if server == "tarantool" else our_txn
        open_conn = connect if server == "tarantool" else open_our_client
    cpu = CpuMarks(rs.pids(), warmup_s, seconds)

    def get_start_ns() -> int:
        start_ns = time.monotonic_ns() + 50_000_000
        cpu.schedule(start_ns)
        return start_ns

    try:
        result = run_client_group(rs.ports[0], nconn, SQL_INSERT, seed, warmup_s, seconds, CLIENT_SOCKET_TIMEOUT_S,
                                  get_start_ns, op=op, open_conn=open_conn)
    finally:
        cpu_s = cpu.used_s(warmup_s + seconds + CLIENT_SOCKET_TIMEOUT_S + 60)
    load = load_figures([result])
    load["cpu_s"] = cpu_s
    load["round_trips"] = ROUND_TRIPS[(server, kind)]
    return load


def run(rs: ReplicaSet, seconds: float, warmup_s: float, entry: dict[str, Any]) -> None:
    """Every (kind, connection count) on member 1 of a started set, then convergence and the
    divergent rows; `entry` gets `loads[kind][nconn]`, `converge_s`, `divergent` and notes."""
    if server_of(rs) == "tarantool":
        conn = connect(rs.ports[0], CLIENT_SOCKET_TIMEOUT_S)
        try:
            conn.eval(TARANTOOL_TXN_LUA)
        finally:
            conn.close()
    entry.setdefault("loads", {})
    for kind in KINDS:
        for nconn in CONNECTION_COUNTS:
            progress(f"{rs.name}: {kind} {nconn} connection(s) on member 1, {warmup_s:g} s warm-up + {seconds:g} s")
            load = run_load(rs, kind, nconn, warmup_s, seconds, seed=nconn + (100 if kind == "txn" else 0))
            entry["loads"].setdefault(kind, {})[nconn] = load
            if load["errors"] or load["stuck_threads"] or load["stalls"]:
                entry["notes"].append(f"{kind} {nconn} conn: {load['errors']} errors, {load['stalls']} stalls > 1 s, "
                                      f"{load['stuck_threads']} stuck: {load['error_samples'][:3]}")
            progress(f"{rs.name}: {fmt_int(load['ops_per_s'])} ops/s, p50 {fmt_ms(load['p50_ns'])} ms, "
                     f"{load['errors']} errors, {load['stalls']} stalls")
    took, vclocks = wait_converged(rs)
    entry["converge_s"] = took
    entry["final_vclocks"] = vclocks
    if took is None:
        entry["notes"].append(f"vclocks did not converge in {CONVERGE_TIMEOUT_S:.0f} s: {vclocks}")
    tables = [table_rows(port) for port in rs.ports]
    keys = divergent_keys(tables)
    entry["rows"] = [len(t) for t in tables]
    entry["divergent"] = len(keys)
    if keys:
        entry["notes"].append(f"DIVERGENT rows: {len(keys)}, e.g. " + "; ".join(
            f"k={k}: {[str(t.get(k, '<missing>'))[:12] for t in tables]}" for k in keys[:DIVERGENT_SAMPLES_MAX]))


def cpu_us_per_op(load: dict[str, Any]) -> tuple[float | None, float | None]:
    """(all members, member 1) CPU microseconds per measured operation."""
    ops = load.get("ops")
    cpu = load.get("cpu_s") or []
    if not ops or not cpu or any(c is None for c in cpu):
        return None, None
    return sum(cpu) / ops * 1e6, cpu[0] / ops * 1e6


def load_of(sets: dict[str, Any], name: str, kind: str, nconn: int) -> dict[str, Any] | None:
    return sets.get(name, {}).get("loads", {}).get(kind, {}).get(nconn)


def ops_per_s(sets: dict[str, Any], name: str, kind: str, nconn: int) -> float | None:
    load = load_of(sets, name, kind, nconn)
    return load["ops_per_s"] if load else None


def table_lines(sets: dict[str, Any], names: tuple[str, ...], kind: str) -> list[str]:
    """One row per (connection count, set) for one kind of operation."""
    out = [f"  {'set':<16} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>9} {'errors':>6} "
           f"{'stalls':>6} {'RTs/op':>6} {'CPU us/op all':>13} {'m1':>6}"]
    for nconn in CONNECTION_COUNTS:
        for name in names:
            entry = sets.get(name, {})
            load = load_of(sets, name, kind, nconn)
            if load is None:
                why = entry.get("skipped") or entry.get("failure") or "not run"
                out.append(f"  {name:<16} {nconn:>5} {'-':>9}  ({why.splitlines()[0][:100]})")
                continue
            errors = str(load["errors"]) + (f"+{load['stuck_threads']}stuck" if load["stuck_threads"] else "")
            all_us, m1_us = cpu_us_per_op(load)
            out.append(f"  {name:<16} {nconn:>5} {fmt_int(load['ops_per_s']):>9} {fmt_ms(load['p50_ns']):>8} "
                       f"{fmt_ms(load['p99_ns']):>8} {fmt_ms(load['max_ns']):>9} {errors:>6} {load['stalls']:>6} "
                       f"{load['round_trips']:>6} {fmt_int(all_us):>13} {fmt_int(m1_us):>6}")
    return out


def report_lines(sets: dict[str, Any], names: tuple[str, ...], floors: tuple[str, ...], marmot_reference: str) -> list[str]:
    """Sections 2 and 3: single-row commits (the sets', then the floors'), then 10-statement
    transactions (the sets' only: a floor has no streams)."""
    out = [f"2. SINGLE-ROW COMMITS  {SQL_INSERT}  on member 1, keys 0..{KEY_RANGE - 1}, {VALUE_BYTES}-char value, "
           "PyPI tarantool connector, one thread per connection"]
    out += table_lines(sets, names + floors, "single")
    out += ["  (stalls: requests slower than 1 s, failed ones and the warm-up's included; RTs/op: client round trips per "
            "operation; CPU: the three members' CPU seconds over the measured window / measured operations)"]
    if floors:
        out.append(f"  ({', '.join(floors)}: {FLOOR_NOTE})")
    out += ["",
            f"3. {TXN_STATEMENTS}-STATEMENT TRANSACTIONS  {TXN_STATEMENTS} x {SQL_INSERT} with random keys in one "
            "transaction; ops = transactions",
            "  ours: replicaset.iproto.client, stream BEGIN / 10 EXECUTE / COMMIT (the connector has no streams); "
            "tarantool: CALL of a Lua box.begin/10 box.execute/box.commit function (2.6 has no iproto streams)"]
    out += table_lines(sets, names, "txn")
    for name in names:
        load = load_of(sets, name, "txn", 16)
        if load and load["ops_per_s"]:
            out.append(f"  {name} at 16 conns: {fmt_int(load['ops_per_s'] * TXN_STATEMENTS)} statements/s")
    out.append(f"  reference: {marmot_reference}")
    return out

