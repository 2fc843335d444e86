"""The client side of every SQL figure: the PyPI `tarantool` connector (what users of
Tarantool use, so both servers are driven by the same code) and the write load of the
benchmarks, `nconn` threads each with its own connection, in one process or spread over
several.

A load starts all threads at one instant, runs a warm-up whose requests are not counted, then
`seconds` of measured requests; every thread records the latency of each request it started
after the warm-up. ops/s = measured requests / (last measured reply - end of warm-up). Every
loop is bounded by a count besides its deadline, and a thread gives up after
MAX_ERRORS_PER_THREAD failures.

What one measured request is defaults to one `sql` statement with a random key and the
thread's value on a connector connection; a load may instead pass its own `op` (several
statements, a transaction) and `open_conn` (another client), as long as the op is one blocking
call the thread can time."""

from __future__ import annotations

import array
import multiprocessing
import os
import random
import threading
import time
from typing import Any, Callable, TypeAlias

from bench.kit.procs import HOST
from bench.kit.report import percentile

SQL_CREATE = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)"
KEY_RANGE = 100_000
VALUE_BYTES = 100
CONNECTION_COUNTS = (1, 16)

MAX_OPS_PER_THREAD = 5_000_000  # a bound on every client loop besides its deadline
MAX_ERRORS_PER_THREAD = 50  # a client thread gives up after this many failed requests
CLIENT_CONNECT_TIMEOUT_S = 5.0
STALL_NS = 1_000_000_000  # a request slower than this, answered or failed, warm-up or not, is a stall

Op: TypeAlias = Callable[[Any, random.Random, str], Any]
"""One measured operation: (the thread's connection, its random source, its value) -> reply."""
OpenConn: TypeAlias = Callable[[int, float], Any]
"""(port, socket timeout in seconds) -> a connection with a `close()`."""


def connect(port: int, socket_timeout_s: float) -> Any:
    """A connector connection to 127.0.0.1:`port` (imported here: the connector is a test
    dependency, not the server's)."""
    import tarantool

    return tarantool.Connection(HOST, port, socket_timeout=socket_timeout_s, connection_timeout=CLIENT_CONNECT_TIMEOUT_S)


def close_quietly(conns: list[Any]) -> None:
    """Close connector connections after a load, whatever state the load left them in: a
    connection that fails to close has nothing more to tell the figures."""
    for conn in conns:
        try:
            conn.close()
        except Exception:  # noqa: BLE001
            pass


def first_value(response: Any) -> Any:
    """The first column of the first row of a connector response, or None."""
    rows = list(response)
    return rows[0][0] if rows and rows[0] else None


def sql_op(sql: str) -> Op:
    """The default operation: `sql` with [random key, the thread's value], through the connector."""
    def op(conn: Any, rnd: random.Random, value: str) -> Any:
        return conn.execute(sql, [rnd.randrange(KEY_RANGE), value])
    return op


def _client_thread(conn: Any, op: Op, seed: int, start_ns: int, warm_end_ns: int, end_ns: int,
                   out: dict[str, Any]) -> None:
    """Run `op` until end_ns; keep the latencies of operations started after warm-up."""
    rnd = random.Random(seed)
    value = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(VALUE_BYTES))
    latencies = array.array("q")
    errors = stalls = 0
    samples: list[str] = []
    last_done = 0
    delay = (start_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)
    for _ in range(MAX_OPS_PER_THREAD):
        t0 = time.monotonic_ns()
        if t0 >= end_ns:
            break
        try:
            op(conn, rnd, value)
        except Exception as exc:  # noqa: BLE001 - any failure is counted and reported
            errors += 1
            stalls += time.monotonic_ns() - t0 > STALL_NS
            if len(samples) < 3:
                samples.append(f"{type(exc).__name__}: {exc}")
            if errors >= MAX_ERRORS_PER_THREAD:
                samples.append(f"thread gave up after {errors} errors")
                break
            continue
        t1 = time.monotonic_ns()
        stalls += t1 - t0 > STALL_NS
        if t0 >= warm_end_ns:
            latencies.append(t1 - t0)
            last_done = t1
    out.update(latencies=latencies, errors=errors, stalls=stalls, samples=samples, last_done=last_done)


def run_client_group(
    port: int, nconn: int, sql: str, seed: int, warmup_s: float, seconds: float, socket_timeout_s: float,
    get_start_ns: Callable[[], int], on_ready: Callable[[], None] | None = None, *,
    op: Op | None = None, open_conn: OpenConn = connect,
) -> dict[str, Any]:
    """`nconn` threads in this process, each with its own connection (`open_conn`) running `op`
    (default: `sql_op(sql)`); merged results. `get_start_ns` is asked for the common start once
    every connection is open."""
    run_op = op if op is not None else sql_op(sql)
    conns = []
    try:
        for _ in range(nconn):
            conns.append(open_conn(port, socket_timeout_s))
        if on_ready is not None:
            on_ready()
        start_ns = get_start_ns()
        warm_end_ns = start_ns + int(warmup_s * 1e9)
        end_ns = warm_end_ns + int(seconds * 1e9)
        outs: list[dict[str, Any]] = [{} for _ in range(nconn)]
        threads = [
            threading.Thread(
                target=_client_thread, args=(conns[i], run_op, seed * 1000 + i, start_ns, warm_end_ns, end_ns, outs[i]),
                daemon=True,
            )
            for i in range(nconn)
        ]
        for thread in threads:
            thread.start()
        pause = (warm_end_ns - time.monotonic_ns()) / 1e9
        if pause > 0:
            time.sleep(pause)
        cpu_at_warm_end = time.process_time()
        join_deadline = time.monotonic() + warmup_s + seconds + socket_timeout_s + 30
        for thread in threads:
            thread.join(timeout=max(0.1, join_deadline - time.monotonic()))
        cpu_at_end = time.process_time()
        cpu_window_end = time.monotonic_ns()
        stuck = sum(1 for thread in threads if thread.is_alive())
    finally:
        close_quietly(conns)
    latencies = array.array("q")
    errors = stalls = 0
    samples: list[str] = []
    last_done = 0
    for out in outs:
        latencies.extend(out.get("latencies", array.array("q")))
        errors += out.get("errors", 0)
        stalls += out.get("stalls", 0)
        samples.extend(out.get("samples", []))
        last_done = max(last_done, out.get("last_done", 0))
    return {
        "latencies": latencies,
        "errors": errors,
        "stalls": stalls,
        "samples": samples[:5],
        "warm_end_ns": warm_end_ns,
        "last_done": last_done,
        "stuck_threads": stuck,
        "client_cpu_s": cpu_at_end - cpu_at_warm_end,
        "client_cpu_window_s": (cpu_window_end - warm_end_ns) / 1e9,
    }


def _client_proc_main(
    port: int, nconn: int, sql: str, seed: int, warmup_s: float, seconds: float, socket_timeout_s: float,
    ready: Any, go: Any, start_value: Any, results: Any,
) -> None:
    """A multiprocessing worker: connect, say ready, wait for the common start, run, report."""
    try:
        def get_start_ns() -> int:
            if not go.wait(timeout=120):
                raise RuntimeError("no start signal from the parent within 120 s")
            return start_value.value

        result = run_client_group(port, nconn, sql, seed, warmup_s, seconds, socket_timeout_s, get_start_ns,
                                  on_ready=lambda: ready.put(os.getpid()))
        result["latencies"] = result["latencies"].tobytes()
        results.put(result)
    except BaseException as exc:  # noqa: BLE001 - report to the parent instead of dying silently
        ready.put(-1)
        results.put({"fatal": f"{type(exc).__name__}: {exc}"})


def run_client_processes(
    port: int, nconn: int, procs: int, sql: str, seed: int, warmup_s: float, seconds: float,
    socket_timeout_s: float, on_start: Callable[[int], None],
) -> tuple[list[dict[str, Any]], float]:
    """`nconn` connections spread over `procs` client processes (so the client is not one GIL),
    started together; each process's results, and their client CPU seconds in all.
    `on_start` is told the common start instant before the processes are."""
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_value = ctx.Value("q", 0)
    shares = [nconn // procs + (1 if i < nconn % procs else 0) for i in range(procs)]
    workers = [
        ctx.Process(
            target=_client_proc_main,
            args=(port, share, sql, seed * 100 + i, warmup_s, seconds, socket_timeout_s, ready, go, start_value,
                  results),
            daemon=True,
        )
        for i, share in enumerate(shares)
    ]
    groups: list[dict[str, Any]] = []
    try:
        for worker in workers:
            worker.start()
        for _ in workers:
            pid = ready.get(timeout=60)
            if pid == -1:
                raise RuntimeError("a client process failed to connect: " + str(results.get(timeout=5)))
        start_ns = time.monotonic_ns() + 100_000_000
        start_value.value = start_ns
        on_start(start_ns)
        go.set()
        for _ in workers:
            result = results.get(timeout=warmup_s + seconds + socket_timeout_s + 60)
            if "fatal" in result:
                raise RuntimeError("a client process failed: " + result["fatal"])
            latencies = array.array("q")
            latencies.frombytes(result["latencies"])
            result["latencies"] = latencies
            groups.append(result)
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()  # by its pid; only processes this bench started
                worker.join(timeout=5)
    return groups, sum(g["client_cpu_s"] for g in groups)


def load_figures(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one load from its groups' results: measured requests, ops/s,
    p50/p99/max latency in ns, requests slower than STALL_NS (failed ones and the warm-up's
    included: a stall counts wherever it falls), errors with a few samples, threads still
    running at the end."""
    latencies = array.array("q")
    errors = stalls = 0
    samples: list[str] = []
    stuck = 0
    warm_end_ns = min(g["warm_end_ns"] for g in groups)
    last_done = max(g["last_done"] for g in groups)
    for group in groups:
        latencies.extend(group["latencies"])
        errors += group["errors"]
        stalls += group["stalls"]
        samples.extend(group["samples"])
        stuck += group["stuck_threads"]
    ordered = sorted(latencies)
    elapsed_s = (last_done - warm_end_ns) / 1e9 if last_done > warm_end_ns else None
    return {
        "ops": len(ordered),
        "ops_per_s": len(ordered) / elapsed_s if elapsed_s else None,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
        "max_ns": float(ordered[-1]) if ordered else float("nan"),
        "stalls": stalls,
        "errors": errors,
        "error_samples": samples[:5],
        "stuck_threads": stuck,
    }
