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
temporary directory is removed. Progress goes to stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import array
import base64
import datetime
import json
import os
import platform
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from replicaset.testing.processes import start_instance, stop_instance  # noqa: E402
from replicaset.iproto.client import Client  # noqa: E402

HOST = "127.0.0.1"
SQL_CREATE = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)"
SQL_INSERT = "INSERT OR REPLACE INTO kv VALUES (?, ?)"
SQL_MAX = "SELECT max(k) FROM kv"
KEY_RANGE = 100_000
VALUE_BYTES = 100
CONNECTION_COUNTS = (1, 16)
LAG_VALUE = "l" * VALUE_BYTES
LAG_BASE_PACED = 1_000_000_000  # lag ids live above the throughput keys, one range per run
LAG_BASE_FULL = 2_000_000_000
JOIN_VALUE_BYTES = 8192
JOIN_ROWS_PER_STATEMENT = 256  # 2 MiB per INSERT: under max_txn_bytes (8 MiB) and max_frame_bytes
MIB = 1024 * 1024

# Bounds on every loop, besides its deadline.
MAX_OPS_PER_THREAD = 5_000_000
MAX_ERRORS_PER_THREAD = 50
MAX_POLLS = 20_000_000
MAX_LAG_ROWS = 2_000_000
LAG_TAIL_TIMEOUT_S = 30.0  # how long the poller waits for the last id after the writer stops
CONVERGE_TIMEOUT_S = 120.0
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
CLIENT_SOCKET_TIMEOUT_S = 30.0
CLIENT_CONNECT_TIMEOUT_S = 5.0
RSS_POLL_INTERVAL_S = 0.02
TARANTOOL_MEMTX_BYTES = 512 * MIB

TARGET_RATIO = 1.0
TARGET_LAG_P99_MS = 1.0
TARGET_JOIN_MB_S = 200.0
TARGET_JOIN_RSS_MB = 256.0
TARANTOOL_QUOTED_JOIN = "Tarantool 2.6 joined a 412 MB snapshot at 24 MB/s on this machine (figure given in the brief)"


def log(message: str) -> None:
    print(f"[bench_rs {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ============================================================================ small helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def percentile(ordered: list[float] | array.array, fraction: float) -> float:
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))])


def read_status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def read_cpu_seconds(pid: int) -> float | None:
    """utime + stime of every thread of PID."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class CpuWindow:
    """CPU share of one core used by each pid between start() and stop()."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.t0 = time.monotonic()
        self.c0 = [read_cpu_seconds(pid) for pid in pids]
        self.shares: list[float | None] = []

    def stop(self) -> list[float | None]:
        elapsed = time.monotonic() - self.t0
        c1 = [read_cpu_seconds(pid) for pid in self.pids]
        self.shares = [(b - a) / elapsed if a is not None and b is not None and elapsed > 0 else None
                       for a, b in zip(self.c0, c1)]
        return self.shares


def fmt_cpu(shares: list[float | None] | None) -> str:
    if not shares:
        return "-"
    return "/".join("-" if v is None else f"{v * 100:.0f}" for v in shares) + "%"


def fmt_int(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:,.0f}"


def fmt_ms(value_ns: float | None) -> str:
    return "-" if value_ns is None or value_ns != value_ns else f"{value_ns / 1e6:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.2f}x"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a != a or b != b or b <= 0:
        return None
    return a / b


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("MET" if met else "MISSED")


def norm_vclock(raw: Any) -> dict[int, int]:
    """A vclock from either server as {id: lsn}, without component 0 and zero entries."""
    if isinstance(raw, list):
        items = [(i + 1, v) for i, v in enumerate(raw)]
    elif isinstance(raw, dict):
        items = [(int(k), v) for k, v in raw.items()]
    else:
        return {}
    return {k: int(v) for k, v in items if k != 0 and v}


def connect(port: int, socket_timeout: float = CLIENT_SOCKET_TIMEOUT_S) -> Any:
    import tarantool

    return tarantool.Connection(HOST, port, socket_timeout=socket_timeout, connection_timeout=CLIENT_CONNECT_TIMEOUT_S)


def first_value(response: Any) -> Any:
    rows = list(response)
    return rows[0][0] if rows and rows[0] else None


class Proc:
    """A process this script started (Tarantool, our joiner): Popen, log, stopped by pid."""

    def __init__(self, name: str, argv: list[str], log_path: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.started_wall = time.time()
        self.started_ns = time.monotonic_ns()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=str(cwd) if cwd else None)
        self.pid = self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def wait_for_log(self, needle: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if needle in self.log_text():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no {needle!r} in its log after {timeout_s:.0f} s:\n{self.tail()}")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.pid}) ignored SIGTERM: SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except ProcessLookupError:
                pass
        self._log.close()
        return self.proc.returncode


# ============================================================================ the two replica sets


class OurSet:
    """Three members of ours, started as `replicaset demo` does (bootstrap, join via the last)."""

    name = "ours"

    def __init__(self, work: Path) -> None:
        self.work = work / "ours"
        self.work.mkdir()
        self.config = self.work / "config.toml"
        self.config.write_text('wal_mode = "write"\nreplication_timeout = 0.2\nreplication_connect_timeout = 10\n')
        self.rs_uuid = str(uuid.uuid4())
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.logs: list[Path] = []

    def start(self) -> None:
        log1 = self.work / "m1.log"
        proc, port = start_instance(["bootstrap", "--uuid", self.rs_uuid, "--data-dir", str(self.work / "m1"),
                                     "--config", str(self.config)], log1)
        self.procs.append(proc)
        self.ports.append(port)
        self.logs.append(log1)
        for n in (2, 3):
            log_n = self.work / f"m{n}.log"
            proc, port = start_instance(["join", "--uuid", self.rs_uuid, "--peer", f"{HOST}:{self.ports[-1]}",
                                         "--data-dir", str(self.work / f"m{n}"), "--config", str(self.config)], log_n)
            self.procs.append(proc)
            self.ports.append(port)
            self.logs.append(log_n)
        # A member that sees a new member join may go back to `loading` until it has reached
        # the new quorum: wait until all three are running before the DDL, and say so.
        t0 = time.monotonic()
        seen: list[list[str]] = []
        while True:
            statuses = [self.status(port) for port in self.ports]
            if not seen or statuses != seen[-1]:
                seen.append(statuses)
            if all(s == "running" for s in statuses):
                break
            if time.monotonic() - t0 > START_TIMEOUT_S:
                raise RuntimeError(f"members not all running after {START_TIMEOUT_S:.0f} s: {seen}")
            time.sleep(0.01)
        self.startup_note = None
        if len(seen) > 1:
            self.startup_note = (f"after the third member joined, statuses went {' -> '.join(map(str, seen))} "
                                 f"over {time.monotonic() - t0:.2f} s before all were running (writes refused meanwhile)")
        with Client.connect(HOST, self.ports[0]) as client:
            client.execute(SQL_CREATE)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def info(self, port: int) -> dict[str, Any]:
        with Client.connect(HOST, port, timeout_s=CLIENT_SOCKET_TIMEOUT_S) as client:
            return client.eval("box.info")[0]

    def vclock(self, port: int) -> dict[int, int]:
        return norm_vclock(self.info(port).get("vclock"))

    def status(self, port: int) -> str:
        return str(self.info(port).get("status"))

    def stop(self) -> list[int | None]:
        codes = []
        for proc in reversed(self.procs):
            try:
                codes.append(stop_instance(proc, STOP_TIMEOUT_S))
            except Exception as exc:  # noqa: BLE001
                log(f"ours: stopping pid {proc.pid} failed: {exc}")
                codes.append(None)
        return list(reversed(codes))

    def log_notes(self) -> list[str]:
        """Warnings, errors and non-JSON lines in the members' logs."""
        notes = []
        for n, path in enumerate(self.logs, start=1):
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            bad = []
            reconnects: dict[str, int] = {}
            relays = 0
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    bad.append(line[:220])
                    continue
                if isinstance(event, dict) and event.get("level") not in ("info", "debug"):
                    bad.append(line[:220])
                if isinstance(event, dict) and event.get("event") == "upstream_disconnected":
                    reason = str(event.get("reason", "?"))
                    reason = "no message for ..." if reason.startswith("no message from") else reason
                    reconnects[reason] = reconnects.get(reason, 0) + 1
                if isinstance(event, dict) and event.get("event") == "relay_started":
                    relays += 1
            notes.append(f"m{n}: {len(lines)} log lines, {len(bad)} warning/error/non-JSON; {relays} relay_started; "
                         f"upstream_disconnected {sum(reconnects.values())}x {reconnects}")
            notes.extend(f"m{n}:   {line}" for line in bad[:6])
        return notes


TARANTOOL_MEMBER_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    replication = {{{uris}}},
    replication_connect_quorum = {quorum},
    replication_connect_timeout = 60,
    wal_mode = 'write',
    read_only = false,
    memtx_memory = {memtx},
    work_dir = '{work_dir}',
}}
-- Runs once per set, on the instance that bootstraps it (the smallest UUID, not always the first):
-- the others can only join once guest may replicate. They get the grant with the snapshot.
box.once('bench_grant', function()
    box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
end)
require('log').info('BENCH_READY')
"""


class TarantoolSet:
    """Three Tarantool 2.6 instances, master-master full mesh, started at once."""

    name = "tarantool"

    def __init__(self, work: Path, binary: str) -> None:
        self.work = work / "tarantool"
        self.work.mkdir()
        self.binary = binary
        self.members: list[Proc] = []
        self.ports: list[int] = []

    def start(self) -> None:
        self.ports = [free_port() for _ in range(3)]
        uris = ", ".join(f"'{HOST}:{p}'" for p in self.ports)
        for n, port in enumerate(self.ports, start=1):
            work_dir = self.work / f"t{n}"
            work_dir.mkdir()
            init = self.work / f"t{n}.lua"
            init.write_text(TARANTOOL_MEMBER_INIT.format(
                host=HOST, port=port, uris=uris, quorum=3, memtx=TARANTOOL_MEMTX_BYTES, work_dir=work_dir))
            self.members.append(Proc(f"tarantool t{n}", [self.binary, str(init)], self.work / f"t{n}.log", cwd=work_dir))
        for member in self.members:
            member.wait_for_log("BENCH_READY", START_TIMEOUT_S)
        conn = connect(self.ports[0])
        try:
            conn.execute(SQL_CREATE)
        finally:
            conn.close()
        # The table was made on t1: wait until it exists on every member.
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in self.ports:
            while True:
                try:
                    conn = connect(port)
                    try:
                        conn.execute("SELECT count(*) FROM kv")
                        break
                    finally:
                        conn.close()
                except Exception as exc:  # noqa: BLE001
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"kv did not reach tarantool on port {port}: {exc}") from exc
                    time.sleep(0.1)

    def pids(self) -> list[int]:
        return [m.pid for m in self.members]

    def _eval(self, port: int, expr: str) -> list[Any]:
        conn = connect(port)
        try:
            return list(conn.eval(expr))
        finally:
            conn.close()

    def vclock(self, port: int) -> dict[int, int]:
        return norm_vclock(self._eval(port, "return box.info.vclock")[0])

    def status(self, port: int) -> str:
        return str(self._eval(port, "return box.info.status")[0])

    def stop(self) -> list[int | None]:
        return [m.stop() for m in self.members]

    def log_notes(self) -> list[str]:
        notes = []
        for member in self.members:
            lines = member.log_text().splitlines()
            bad = [line[:220] for line in lines if " E> " in line or " W> " in line]
            notes.append(f"{member.name}: {len(lines)} log lines, {len(bad)} E>/W>")
            notes.extend(f"{member.name}:   {line}" for line in bad[:4])
        return notes


def wait_converged(rs: Any, timeout_s: float = CONVERGE_TIMEOUT_S) -> tuple[float | None, list[dict[int, int]]]:
    """Seconds until every member's vclock equals member 1's (None on timeout), and the vclocks."""
    t0 = time.monotonic()
    vclocks: list[dict[int, int]] = []
    while True:
        try:
            vclocks = [rs.vclock(port) for port in rs.ports]
            if all(v == vclocks[0] for v in vclocks):
                return time.monotonic() - t0, vclocks
        except Exception as exc:  # noqa: BLE001
            log(f"{rs.name}: box.info failed while waiting for convergence: {exc}")
        if time.monotonic() - t0 > timeout_s:
            return None, vclocks
        time.sleep(0.02)


def table_digest(port: int) -> tuple[int, int]:
    """(rows, xxh3 of every row in key order) of kv on one member, through the same connector."""
    import xxhash

    conn = connect(port, socket_timeout=120)
    try:
        rows = list(conn.execute("SELECT k, v FROM kv ORDER BY k"))
    finally:
        conn.close()
    digest = xxhash.xxh3_64()
    for k, v in rows:
        digest.update(f"{k}\x00{v}\x01".encode())
    return len(rows), digest.intdigest()


# ============================================================================ 1. write throughput


def _client_thread(conn: Any, seed: int, start_ns: int, warm_end_ns: int, end_ns: int, out: dict[str, Any]) -> None:
    rnd = random.Random(seed)
    value = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(VALUE_BYTES))
    latencies = array.array("q")
    errors = 0
    samples: list[str] = []
    last_done = 0
    delay = (start_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)
    execute = conn.execute
    for _ in range(MAX_OPS_PER_THREAD):
        t0 = time.monotonic_ns()
        if t0 >= end_ns:
            break
        try:
            execute(SQL_INSERT, [rnd.randrange(KEY_RANGE), value])
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors += 1
            if len(samples) < 3:
                samples.append(f"{type(exc).__name__}: {exc}")
            if errors >= MAX_ERRORS_PER_THREAD:
                samples.append(f"thread gave up after {errors} errors")
                break
            continue
        t1 = time.monotonic_ns()
        if t0 >= warm_end_ns:
            latencies.append(t1 - t0)
            last_done = t1
    out.update(latencies=latencies, errors=errors, samples=samples, last_done=last_done)


def run_load(port: int, nconn: int, warmup_s: float, seconds: float, seed: int) -> dict[str, Any]:
    conns = []
    outs: list[dict[str, Any]] = [{} for _ in range(nconn)]
    try:
        for _ in range(nconn):
            conns.append(connect(port))
        start_ns = time.monotonic_ns() + 50_000_000
        warm_end_ns = start_ns + int(warmup_s * 1e9)
        end_ns = warm_end_ns + int(seconds * 1e9)
        threads = [threading.Thread(target=_client_thread, args=(conns[i], seed * 1000 + i, start_ns, warm_end_ns,
                                                                 end_ns, outs[i]), daemon=True) for i in range(nconn)]
        for thread in threads:
            thread.start()
        join_deadline = time.monotonic() + warmup_s + seconds + CLIENT_SOCKET_TIMEOUT_S + 30
        for thread in threads:
            thread.join(timeout=max(0.1, join_deadline - time.monotonic()))
        stuck = sum(1 for t in threads if t.is_alive())
    finally:
        for conn in conns:
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
    latencies = array.array("q")
    errors = 0
    samples: list[str] = []
    last_done = 0
    for out in outs:
        latencies.extend(out.get("latencies", array.array("q")))
        errors += out.get("errors", 0)
        samples.extend(out.get("samples", []))
        last_done = max(last_done, out.get("last_done", 0))
    ordered = sorted(latencies)
    elapsed = (last_done - warm_end_ns) / 1e9 if last_done > warm_end_ns else None
    return {
        "ops": len(ordered),
        "ops_per_s": len(ordered) / elapsed if elapsed else None,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
        "max_ns": float(ordered[-1]) if ordered else float("nan"),
        "errors": errors,
        "samples": samples[:4],
        "stuck": stuck,
    }


# ============================================================================ 2. replication lag


def measure_lag(write_port: int, read_port: int, base: int, rate: float | None, warmup_s: float,
                seconds: float, poll_interval_s: float = 0.0) -> dict[str, Any]:
    """One writer thread on write_port (ids base+1, base+2, ...), one poller on read_port."""
    wconn = connect(write_port)
    pconn = connect(read_port)
    n_max = min(MAX_LAG_ROWS, int(rate * (warmup_s + seconds)) + 10) if rate else MAX_LAG_ROWS
    acks = array.array("q", bytes(8 * (n_max + 1)))
    seen: list[tuple[int, int, int]] = []  # (watermark id, poll sent ns, poll reply ns), increasing ids
    state: dict[str, Any] = {"last": 0, "writer_errors": [], "poll_errors": [], "polls": 0,
                             "poll_first_ns": 0, "poll_last_ns": 0}
    writer_done = threading.Event()
    poller_ready = threading.Event()
    start_box: list[int] = [0]

    def writer() -> None:
        try:
            poller_ready.wait(10)
            start = time.monotonic_ns() + 20_000_000
            start_box[0] = start
            end = start + int((warmup_s + seconds) * 1e9)
            execute = wconn.execute
            i = 0
            while i < n_max:
                if rate:
                    target = start + int(i * 1e9 / rate)
                    pause = (target - time.monotonic_ns()) / 1e9
                    if pause > 0:
                        time.sleep(pause)
                elif i == 0:
                    pause = (start - time.monotonic_ns()) / 1e9
                    if pause > 0:
                        time.sleep(pause)
                if time.monotonic_ns() >= end:
                    break
                i += 1
                try:
                    execute(SQL_INSERT, [base + i, LAG_VALUE])
                except Exception as exc:  # noqa: BLE001
                    state["writer_errors"].append(f"id {i}: {type(exc).__name__}: {exc}")
                    i -= 1
                    if len(state["writer_errors"]) >= MAX_ERRORS_PER_THREAD:
                        break
                    continue
                acks[i] = time.monotonic_ns()
            state["last"] = i
        finally:
            writer_done.set()

    def poller() -> None:
        execute = pconn.execute
        watermark = 0
        polls = 0
        hard_deadline = None
        first_ns = 0
        t1 = 0
        poller_ready.set()
        while polls < MAX_POLLS:
            t0 = time.monotonic_ns()
            try:
                value = first_value(execute(SQL_MAX))
            except Exception as exc:  # noqa: BLE001
                state["poll_errors"].append(f"{type(exc).__name__}: {exc}")
                if len(state["poll_errors"]) >= MAX_ERRORS_PER_THREAD:
                    break
                continue
            t1 = time.monotonic_ns()
            if poll_interval_s:
                time.sleep(poll_interval_s)
            if polls == 0:
                first_ns = t0
            polls += 1
            mark = (value - base) if isinstance(value, int) else 0
            if mark > watermark:
                watermark = mark
                seen.append((mark, t0, t1))
            if writer_done.is_set():
                if watermark >= state["last"]:
                    break
                if hard_deadline is None:
                    hard_deadline = t1 + int(LAG_TAIL_TIMEOUT_S * 1e9)
                elif t1 > hard_deadline:
                    break
        state.update(polls=polls, poll_first_ns=first_ns, poll_last_ns=t1, final_watermark=watermark)

    threads = [threading.Thread(target=poller, daemon=True), threading.Thread(target=writer, daemon=True)]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # two busy threads share the GIL: hand it over quickly
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=warmup_s + seconds + LAG_TAIL_TIMEOUT_S + 2 * CLIENT_SOCKET_TIMEOUT_S + 30)
        stuck = sum(1 for t in threads if t.is_alive())
    finally:
        sys.setswitchinterval(old_interval)
        for conn in (wconn, pconn):
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass

    last = state["last"]
    measure_from = start_box[0] + int(warmup_s * 1e9)
    upper: list[int] = []  # reply time of the first poll showing it - ack
    lower: list[int] = []  # send time of that poll - ack
    unseen = 0
    j = 0
    first_measured = None
    for i in range(1, last + 1):
        ack = acks[i]
        while j < len(seen) and seen[j][0] < i:
            j += 1
        if ack < measure_from:
            continue
        if first_measured is None:
            first_measured = ack
        if j >= len(seen):
            unseen += 1
            continue
        upper.append(seen[j][2] - ack)
        lower.append(seen[j][1] - ack)
    tenth = max(1, len(upper) // 10)
    trend = (percentile(sorted(upper[:tenth]), 0.5), percentile(sorted(upper[-tenth:]), 0.5))
    upper.sort()
    lower.sort()
    measured = len(upper) + unseen
    acked_span = (acks[last] - first_measured) / 1e9 if last and first_measured and acks[last] > first_measured else None
    polls = state["polls"]
    poll_span = state["poll_last_ns"] - state["poll_first_ns"]
    return {
        "rate": rate,
        "rows": measured,
        "write_rate": measured / acked_span if acked_span else None,
        "unseen": unseen,
        "p50_ns": percentile(upper, 0.50),
        "p99_ns": percentile(upper, 0.99),
        "max_ns": float(upper[-1]) if upper else float("nan"),
        "p50_lower_ns": percentile(lower, 0.50),
        "p99_lower_ns": percentile(lower, 0.99),
        "negative": sum(1 for v in upper if v < 0),
        "p50_first_tenth_ns": trend[0],
        "p50_last_tenth_ns": trend[1],
        "polls": polls,
        "poll_period_ns": poll_span / polls if polls else float("nan"),
        "writer_errors": state["writer_errors"][:3],
        "poll_errors": state["poll_errors"][:3],
        "stuck": stuck,
    }


# ============================================================================ steps 1 and 2 per set


def bench_set(rs: Any, args: argparse.Namespace, warmup_s: float, report: dict[str, Any]) -> None:
    entry: dict[str, Any] = {"loads": {}, "converge": {}, "lag": {}, "notes": []}
    report["sets"][rs.name] = entry
    entry["loadavg_start"] = load_average()
    try:
        log(f"{rs.name}: starting three members")
        rs.start()
        if getattr(rs, "startup_note", None):
            entry["notes"].append(rs.startup_note)
        took, vclocks = wait_converged(rs)
        entry["ports"] = list(rs.ports)
        entry["statuses"] = [rs.status(p) for p in rs.ports]
        log(f"{rs.name}: up on ports {rs.ports}, status {entry['statuses']}, vclocks {vclocks}")
        for nconn in CONNECTION_COUNTS:
            log(f"{rs.name}: {nconn} connection(s) on member 1, {warmup_s:g} s warm-up + {args.seconds:g} s")
            cpu = CpuWindow(rs.pids())
            run = run_load(rs.ports[0], nconn, warmup_s, args.seconds, seed=nconn)
            run["cpu"] = cpu.stop()
            entry["loads"][nconn] = run
            if run["errors"] or run["stuck"]:
                entry["notes"].append(f"{nconn} conn: {run['errors']} errors, {run['stuck']} stuck: {run['samples']}")
            took, vclocks = wait_converged(rs)
            entry["converge"][nconn] = took
            if took is None:
                entry["notes"].append(f"after {nconn} conn load: vclocks did not converge in {CONVERGE_TIMEOUT_S:.0f} s: {vclocks}")
            log(f"{rs.name}: {fmt_int(run['ops_per_s'])} ops/s; members converged after "
                f"{'-' if took is None else f'{took:.2f}'} s")
        for label, base, rate in (("paced", LAG_BASE_PACED, args.lag_rate), ("full", LAG_BASE_FULL, None)):
            log(f"{rs.name}: lag, writer on member 1 {'at %g/s' % rate if rate else 'unpaced'}, poller on member 2")
            cpu = CpuWindow(rs.pids())
            lag = measure_lag(rs.ports[0], rs.ports[1], base, rate, min(0.5, warmup_s), args.seconds,
                              args.poll_interval_ms / 1000)
            lag["cpu"] = cpu.stop()
            entry["lag"][label] = lag
            if lag["writer_errors"] or lag["poll_errors"] or lag["unseen"] or lag["stuck"]:
                entry["notes"].append(f"lag {label}: {lag['unseen']} ids never seen on member 2, writer errors "
                                      f"{lag['writer_errors']}, poll errors {lag['poll_errors']}, stuck {lag['stuck']}")
            took, vclocks = wait_converged(rs)
            if took is None:
                entry["notes"].append(f"after lag {label}: vclocks did not converge: {vclocks}")
            log(f"{rs.name}: lag {label}: p50 {fmt_ms(lag['p50_ns'])} ms p99 {fmt_ms(lag['p99_ns'])} ms, "
                f"poll period {fmt_ms(lag['poll_period_ns'])} ms")
        took, vclocks = wait_converged(rs)
        entry["final_vclocks"] = vclocks
        entry["final_converged"] = took is not None
        digests = [table_digest(p) for p in rs.ports]
        entry["digests"] = digests
        if len(set(digests)) != 1:
            entry["notes"].append(f"DIVERGENCE: kv differs between members: {digests}")
        entry["statuses_end"] = [rs.status(p) for p in rs.ports]
    except Exception as exc:  # noqa: BLE001 - one set failing must not stop the rest
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        log(f"{rs.name}: FAILED: {entry['failure']}")
    finally:
        entry["exit_codes"] = rs.stop()
        entry["log_notes"] = rs.log_notes()
        entry["loadavg_end"] = load_average()
        log(f"{rs.name}: stopped, exit codes {entry['exit_codes']}")


# ============================================================================ 3. initial join


def random_text(nbytes: int) -> str:
    return base64.b64encode(os.urandom(nbytes * 3 // 4)).decode()[:nbytes]


class RssWatch:
    """Polls VmHWM / VmRSS of one pid every RSS_POLL_INTERVAL_S in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.hwm_kb = 0
        self.rss_peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(RSS_POLL_INTERVAL_S)

    def sample(self) -> None:
        hwm = read_status_kb(self.pid, "VmHWM")
        rss = read_status_kb(self.pid, "VmRSS")
        if hwm:
            self.hwm_kb = max(self.hwm_kb, hwm)
        if rss:
            self.rss_peak_kb = max(self.rss_peak_kb, rss)

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        self._thread.join(timeout=5)


def log_events(path: Path) -> dict[str, dict[str, Any]]:
    """The first JSON log event of each name in one of our logs."""
    events: dict[str, dict[str, Any]] = {}
    try:
        for line in path.read_text(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "event" in event:
                events.setdefault(event["event"], event)
    except OSError:
        pass
    return events


def iso_to_epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def bench_join_ours(work: Path, join_mb: int, report: dict[str, Any]) -> None:
    entry: dict[str, Any] = {"notes": []}
    report["join"]["ours"] = entry
    root = work / "join_ours"
    root.mkdir()
    config = root / "config.toml"
    config.write_text('wal_mode = "write"\nreplication_timeout = 0.2\nreplication_connect_timeout = 10\n')
    rs_uuid = str(uuid.uuid4())
    member: subprocess.Popen[bytes] | None = None
    joiner: Proc | None = None
    watch: RssWatch | None = None
    try:
        log("join (ours): starting a fresh one-member set")
        member, port = start_instance(["bootstrap", "--uuid", rs_uuid, "--data-dir", str(root / "m1"),
                                       "--config", str(config)], root / "m1.log")
        rows_total = join_mb * MIB // JOIN_VALUE_BYTES
        statement = "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * JOIN_ROWS_PER_STATEMENT)
        t0 = time.monotonic()
        with Client.connect(HOST, port, timeout_s=300) as client:
            client.execute(SQL_CREATE)
            next_id = 1
            step = max(1, rows_total // JOIN_ROWS_PER_STATEMENT // 10)
            for n_stmt in range((rows_total + JOIN_ROWS_PER_STATEMENT - 1) // JOIN_ROWS_PER_STATEMENT):
                count = min(JOIN_ROWS_PER_STATEMENT, rows_total - next_id + 1)
                sql = statement if count == JOIN_ROWS_PER_STATEMENT else \
                    "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * count)
                binds: list[Any] = []
                for k in range(next_id, next_id + count):
                    binds += [k, random_text(JOIN_VALUE_BYTES)]
                client.execute(sql, binds)
                next_id += count
                if n_stmt % step == 0:
                    log(f"join (ours): filled {(next_id - 1) * JOIN_VALUE_BYTES / MIB:.0f} / {join_mb} MB")
            entry["fill_s"] = time.monotonic() - t0
            entry["rows"] = next_id - 1
            log(f"join (ours): filled {entry['rows']} rows in {entry['fill_s']:.1f} s; box.snapshot()")
            t1 = time.monotonic()
            client.eval("box.snapshot()")
            entry["snapshot_s"] = time.monotonic() - t1
            entry["member_vclock_before"] = norm_vclock(client.eval("box.info")[0].get("vclock"))
        db = root / "m1" / "db.sqlite"
        entry["db_bytes"] = db.stat().st_size if db.exists() else None
        snaps = sorted((root / "m1" / "snap").glob("*.snap"))
        entry["snap_bytes"] = snaps[-1].stat().st_size if snaps else None
        entry["member_hwm_before_kb"] = read_status_kb(member.pid, "VmHWM")

        jport = free_port()
        argv = [sys.executable, "-m", "replicaset.cli", "join", "--uuid", rs_uuid, "--peer", f"{HOST}:{port}",
                "--data-dir", str(root / "m2"), "--config", str(config), "--listen", f"{HOST}:{jport}"]
        log(f"join (ours): starting the joiner ({' '.join(argv[2:4])} ...)")
        timeout_s = max(120.0, join_mb / 5.0)
        joiner = Proc("ours joiner", argv, root / "m2.log")
        watch = RssWatch(joiner.pid)
        answered_ns = None
        done_ns = None
        last_err = ""
        member_vclock: dict[int, int] = {}
        joiner_vclock: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if joiner.proc.poll() is not None:
                raise RuntimeError(f"the joiner exited with {joiner.proc.returncode}:\n{joiner.tail()}")
            try:
                with Client.connect(HOST, jport, timeout_s=2.0) as jc:
                    info = jc.eval("box.info")[0]
                if answered_ns is None:
                    answered_ns = time.monotonic_ns()
                joiner_vclock = norm_vclock(info.get("vclock"))
                with Client.connect(HOST, port, timeout_s=10.0) as mc:
                    member_vclock = norm_vclock(mc.eval("box.info")[0].get("vclock"))
                if joiner_vclock == member_vclock:
                    done_ns = time.monotonic_ns()
                    entry["joiner_status"] = info.get("status")
                    break
            except OSError as exc:
                last_err = str(exc)
            except Exception as exc:  # noqa: BLE001 - an error reply while it starts
                last_err = f"{type(exc).__name__}: {exc}"
            time.sleep(RSS_POLL_INTERVAL_S)
        watch.stop()
        entry["joiner_hwm_kb"] = watch.hwm_kb
        entry["joiner_rss_peak_kb"] = watch.rss_peak_kb
        entry["member_hwm_after_kb"] = read_status_kb(member.pid, "VmHWM")
        if done_ns is None:
            raise RuntimeError(f"the joiner did not reach the member's vclock within {timeout_s:.0f} s "
                               f"(joiner {joiner_vclock}, member {member_vclock}, last error {last_err!r}):\n{joiner.tail()}")
        entry["seconds"] = (done_ns - joiner.started_ns) / 1e9
        entry["answered_s"] = (answered_ns - joiner.started_ns) / 1e9 if answered_ns else None
        entry["vclock"] = member_vclock
        events = log_events(joiner.log_path)
        member_events = log_events(root / "m1.log")
        joined = events.get("joined", {})
        entry["join_bytes"] = joined.get("bytes")
        serving = iso_to_epoch(member_events.get("join_serving", {}).get("timestamp"))
        joined_at = iso_to_epoch(joined.get("timestamp"))
        entry["checkpoint_ready_s"] = serving - joiner.started_wall if serving else None
        entry["file_received_s"] = joined_at - joiner.started_wall if joined_at else None
        size = entry["join_bytes"] or entry["db_bytes"]
        entry["size_bytes"] = size
        entry["mb_per_s"] = size / MIB / entry["seconds"] if size else None
        counts = []
        for p in (port, jport):
            with Client.connect(HOST, p, timeout_s=120) as c:
                counts.append(c.execute("SELECT count(*), sum(length(v)) FROM kv").rows[0])
        entry["counts"] = counts
        if counts[0] != counts[1]:
            entry["notes"].append(f"DIVERGENCE after join: member {counts[0]} vs joiner {counts[1]} (rows, bytes)")
        log(f"join (ours): {fmt_int(size)} B in {entry['seconds']:.2f} s = {entry['mb_per_s']:.1f} MB/s, "
            f"joiner VmHWM {watch.hwm_kb / 1024:.1f} MB")
    except Exception as exc:  # noqa: BLE001
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        log(f"join (ours): FAILED: {entry['failure']}")
    finally:
        if watch is not None:
            watch.stop()
        codes = []
        if joiner is not None:
            codes.append(joiner.stop())
        if member is not None:
            codes.append(stop_instance(member, STOP_TIMEOUT_S))
        entry["exit_codes"] = codes
        notes = []
        for path in (root / "m1.log", root / "m2.log"):
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    notes.append(f"{path.name}: {line[:200]}")
                    continue
                if isinstance(event, dict) and event.get("level") not in ("info", "debug"):
                    notes.append(f"{path.name}: {line[:200]}")
        entry["log_notes"] = notes[:8]
        shutil.rmtree(root, ignore_errors=True)


TARANTOOL_MASTER_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    wal_mode = 'write',
    memtx_memory = {memtx},
    work_dir = '{work_dir}',
}}
box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
box.execute([[{create}]])
require('log').info('BENCH_READY')
"""

TARANTOOL_REPLICA_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    replication = {{'{master}'}},
    wal_mode = 'write',
    read_only = false,
    memtx_memory = {memtx},
    work_dir = '{work_dir}',
}}
require('log').info('BENCH_READY')
"""

TARANTOOL_FILL = """
local first, count, size = ...
local digest = require('digest')
local space = box.space.KV
box.begin()
for i = first, first + count - 1 do
    space:replace{i, digest.base64_encode(digest.urandom(size * 3 / 4), {nowrap = true}):sub(1, size)}
    if (i - first) % 128 == 127 then box.commit() box.begin() end
end
box.commit()
return space:len()
"""


def bench_join_tarantool(work: Path, binary: str, join_mb: int, report: dict[str, Any]) -> None:
    entry: dict[str, Any] = {"notes": []}
    report["join"]["tarantool"] = entry
    root = work / "join_tarantool"
    root.mkdir()
    memtx = max(TARANTOOL_MEMTX_BYTES, int(join_mb * MIB * 1.6) + 256 * MIB)
    master: Proc | None = None
    replica: Proc | None = None
    watch: RssWatch | None = None
    try:
        port = free_port()
        (root / "master").mkdir()
        init = root / "master.lua"
        init.write_text(TARANTOOL_MASTER_INIT.format(host=HOST, port=port, memtx=memtx, work_dir=root / "master",
                                                     create=SQL_CREATE))
        log("join (tarantool): starting a master")
        master = Proc("tarantool master", [binary, str(init)], root / "master.log", cwd=root / "master")
        master.wait_for_log("BENCH_READY", START_TIMEOUT_S)
        rows_total = join_mb * MIB // JOIN_VALUE_BYTES
        t0 = time.monotonic()
        conn = connect(port, socket_timeout=600)
        try:
            chunk = 4096
            done = 0
            while done < rows_total:
                count = min(chunk, rows_total - done)
                conn.eval(TARANTOOL_FILL, done + 1, count, JOIN_VALUE_BYTES)
                done += count
                if (done // chunk) % 10 == 0 or done == rows_total:
                    log(f"join (tarantool): filled {done * JOIN_VALUE_BYTES / MIB:.0f} / {join_mb} MB")
            entry["fill_s"] = time.monotonic() - t0
            entry["rows"] = done
            t1 = time.monotonic()
            conn.eval("box.snapshot()")
            entry["snapshot_s"] = time.monotonic() - t1
        finally:
            conn.close()
        snaps = sorted((root / "master").glob("*.snap"))
        entry["size_bytes"] = snaps[-1].stat().st_size if snaps else None
        entry["master_hwm_before_kb"] = read_status_kb(master.pid, "VmHWM")
        rport = free_port()
        (root / "replica").mkdir()
        rinit = root / "replica.lua"
        rinit.write_text(TARANTOOL_REPLICA_INIT.format(host=HOST, port=rport, master=f"{HOST}:{port}", memtx=memtx,
                                                       work_dir=root / "replica"))
        timeout_s = max(180.0, join_mb / 2.0)
        log(f"join (tarantool): starting the replica ({fmt_int(entry['size_bytes'])} B snapshot)")
        replica = Proc("tarantool replica", [binary, str(rinit)], root / "replica.log", cwd=root / "replica")
        watch = RssWatch(replica.pid)
        done_ns = None
        answered_ns = None
        last_err = ""
        deadline = time.monotonic() + timeout_s
        mv: dict[int, int] = {}
        rv: dict[int, int] = {}
        while time.monotonic() < deadline:
            if replica.proc.poll() is not None:
                raise RuntimeError(f"the replica exited with {replica.proc.returncode}:\n{replica.tail()}")
            try:
                rc = connect(rport, socket_timeout=5)
                try:
                    status, raw = list(rc.eval("return box.info.status, box.info.vclock"))[:2]
                finally:
                    rc.close()
                if answered_ns is None:
                    answered_ns = time.monotonic_ns()
                mc = connect(port, socket_timeout=10)
                try:
                    mv = norm_vclock(list(mc.eval("return box.info.vclock"))[0])
                finally:
                    mc.close()
                rv = norm_vclock(raw)
                if status == "running" and rv == mv:
                    done_ns = time.monotonic_ns()
                    break
            except Exception as exc:  # noqa: BLE001 - not listening yet, or not granted yet
                last_err = f"{type(exc).__name__}: {exc}"
            time.sleep(RSS_POLL_INTERVAL_S)
        watch.stop()
        entry["joiner_hwm_kb"] = watch.hwm_kb
        entry["joiner_rss_peak_kb"] = watch.rss_peak_kb
        if done_ns is None:
            raise RuntimeError(f"the replica did not reach the master's vclock within {timeout_s:.0f} s "
                               f"(replica {rv}, master {mv}, last error {last_err!r}):\n{replica.tail()}")
        entry["seconds"] = (done_ns - replica.started_ns) / 1e9
        entry["answered_s"] = (answered_ns - replica.started_ns) / 1e9 if answered_ns else None
        entry["mb_per_s"] = entry["size_bytes"] / MIB / entry["seconds"] if entry["size_bytes"] else None
        entry["vclock"] = mv
        log(f"join (tarantool): {fmt_int(entry['size_bytes'])} B in {entry['seconds']:.2f} s = "
            f"{entry['mb_per_s']:.1f} MB/s, replica VmHWM {watch.hwm_kb / 1024:.1f} MB")
    except Exception as exc:  # noqa: BLE001
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        log(f"join (tarantool): FAILED: {entry['failure']}")
    finally:
        if watch is not None:
            watch.stop()
        codes = []
        for proc in (replica, master):
            if proc is not None:
                codes.append(proc.stop())
        entry["exit_codes"] = codes
        shutil.rmtree(root, ignore_errors=True)


# ============================================================================ report


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out: list[str] = []
    p = out.append
    p(f"bench_replicaset  {report['date']}  host {report['host']}  cpus {report['cpus']}  python {report['python']}")
    p(f"command: {report['command']}   (cwd {os.getcwd()}, repo at {report['commit']})")
    p(f"tarantool: {report['tarantool_version']}; measure {args.seconds:g} s after {report['warmup_s']:g} s warm-up; "
      f"load average at start {report['loadavg_start']}, at end {report['loadavg_end']}")
    p("three members each: ours wal_mode=write replication_timeout=0.2; tarantool wal_mode='write', full mesh, "
      "replication_connect_quorum=3; all on this machine's 2 cores with the client")
    p("")
    sets = report["sets"]

    p(f"1. WRITES  {SQL_INSERT}  on member 1, keys 0..{KEY_RANGE - 1}, {VALUE_BYTES}-char value, PyPI tarantool "
      "connector, one thread per connection")
    p(f"  {'set':<10} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>6} {'converged after':>16} "
      f"{'CPU m1/m2/m3':>13}")
    for nconn in CONNECTION_COUNTS:
        for name in ("ours", "tarantool"):
            entry = sets.get(name, {})
            run = entry.get("loads", {}).get(nconn)
            if run is None:
                why = entry.get("skipped") or entry.get("failure") or "not run"
                p(f"  {name:<10} {nconn:>5} {'-':>9}  ({why.splitlines()[0][:100]})")
                continue
            conv = entry.get("converge", {}).get(nconn)
            conv_s = "NO (timeout)" if conv is None else f"{conv:.2f} s"
            errors = str(run["errors"]) + (f"+{run['stuck']}stuck" if run["stuck"] else "")
            p(f"  {name:<10} {nconn:>5} {fmt_int(run['ops_per_s']):>9} {fmt_ms(run['p50_ns']):>8} "
              f"{fmt_ms(run['p99_ns']):>8} {fmt_ms(run['max_ns']):>8} {errors:>6} {conv_s:>16} {fmt_cpu(run.get('cpu')):>13}")
    p("  (converged after: from the end of the load until members 2 and 3 had member 1's vclock; CPU: share of one "
      "core per member over the load incl. warm-up)")

    def ops(name: str, nconn: int) -> float | None:
        run = sets.get(name, {}).get("loads", {}).get(nconn)
        return run["ops_per_s"] if run else None

    p("  load average (1/5/15 min) around each set: " + "; ".join(
        f"{name} {sets[name].get('loadavg_start', '?')} -> {sets[name].get('loadavg_end', '?')}"
        for name in ("ours", "tarantool") if name in sets))
    p("  ratio ours/tarantool: " + "   ".join(
        f"{n} conn {fmt_ratio(ratio(ops('ours', n), ops('tarantool', n)))}" for n in CONNECTION_COUNTS))
    p("")

    p("2. REPLICATION LAG  writer thread on member 1 (increasing ids), poller thread on member 2 running "
      f"{SQL_MAX!r} " + (f"with a {args.poll_interval_ms:g} ms sleep after each poll" if args.poll_interval_ms
                        else "in a tight loop"))
    p("   lag(i) = reply time of the first poll showing max(k) >= i  -  ack time of i  (an upper bound; "
      "'from poll send' is the lower bound)")
    p(f"  {'set':<10} {'writer':<9} {'rows':>7} {'rows/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
      f"{'p50/p99 from send':>18} {'poll period':>11} {'unseen':>6} {'CPU m1/m2/m3':>13}")
    for label in ("paced", "full"):
        for name in ("ours", "tarantool"):
            lag = sets.get(name, {}).get("lag", {}).get(label)
            what = f"{args.lag_rate:g}/s" if label == "paced" else "unpaced"
            if lag is None:
                p(f"  {name:<10} {what:<9} {'-':>7}")
                continue
            p(f"  {name:<10} {what:<9} {lag['rows']:>7} {fmt_int(lag['write_rate']):>8} {fmt_ms(lag['p50_ns']):>8} "
              f"{fmt_ms(lag['p99_ns']):>8} {fmt_ms(lag['max_ns']):>8} "
              f"{fmt_ms(lag['p50_lower_ns']) + '/' + fmt_ms(lag['p99_lower_ns']):>18} "
              f"{fmt_ms(lag['poll_period_ns']) + ' ms':>11} {lag['unseen']:>6} {fmt_cpu(lag.get('cpu')):>13}")
    p("  (poll period = mean time per poll over the run: the resolution of these figures; "
      "negative lags mean the row was visible on member 2 before the writer thread recorded its ack)")
    if args.poll_interval_ms:
        p(f"  (the poller slept {args.poll_interval_ms:g} ms after each poll: --poll-interval-ms; the period includes it)")
    for name in ("ours", "tarantool"):
        for label in ("paced", "full"):
            lag = sets.get(name, {}).get("lag", {}).get(label)
            if lag:
                p(f"  {name:<9} {label:<5}: median lag of the first / last tenth of the ids "
                  f"{fmt_ms(lag['p50_first_tenth_ns'])} / {fmt_ms(lag['p50_last_tenth_ns'])} ms (growing = member 2 "
                  f"falls behind); {lag['negative']} of {lag['rows']} lags negative; {lag['polls']:,} polls")
    p("")

    p(f"3. INITIAL JOIN  {args.join_mb} MB of {JOIN_VALUE_BYTES}-char random text rows, box.snapshot(), then a new "
      "member joins; timed from process start until it answers and its vclock equals the member's")
    for name in ("ours", "tarantool"):
        j = report["join"].get(name)
        if j is None:
            continue
        if "failure" in j and "seconds" not in j:
            p(f"  {name}: FAILED: {j['failure'].splitlines()[0][:200]}")
            for line in j["failure"].splitlines()[1:8]:
                p(f"      {line[:200]}")
            continue
        if name == "ours":
            p(f"  ours       fill {j.get('rows', 0):,} rows in {j.get('fill_s', 0):.1f} s, snapshot {j.get('snapshot_s', 0):.1f} s; "
              f"db file {fmt_int(j.get('db_bytes'))} B, snap {fmt_int(j.get('snap_bytes'))} B, "
              f"joiner received {fmt_int(j.get('join_bytes'))} B")
            steps = []
            if j.get("checkpoint_ready_s") is not None:
                steps.append(f"member's checkpoint ready +{j['checkpoint_ready_s']:.2f} s")
            if j.get("file_received_s") is not None:
                steps.append(f"file received +{j['file_received_s']:.2f} s")
            if j.get("answered_s") is not None:
                steps.append(f"answers +{j['answered_s']:.2f} s")
            p(f"             {j['seconds']:.2f} s = {j['mb_per_s']:.1f} MB/s of database file "
              f"({j['rows'] * JOIN_VALUE_BYTES / MIB / j['seconds']:.1f} MB/s of row data)")
            p(f"             ({'; '.join(steps)}; vclock equal +{j['seconds']:.2f} s, all from process start)")
            p(f"             joiner VmHWM {j['joiner_hwm_kb'] / 1024:.1f} MB (peak VmRSS seen {j['joiner_rss_peak_kb'] / 1024:.1f} MB); "
              f"member VmHWM {fmt_int((j.get('member_hwm_before_kb') or 0) / 1024)} MB before the join, "
              f"{fmt_int((j.get('member_hwm_after_kb') or 0) / 1024)} MB after; rows/bytes member vs joiner {j.get('counts')}")
        else:
            p(f"  tarantool  fill {j.get('rows', 0):,} rows in {j.get('fill_s', 0):.1f} s, snapshot {j.get('snapshot_s', 0):.1f} s; "
              f".snap {fmt_int(j.get('size_bytes'))} B")
            p(f"             {j['seconds']:.2f} s = {j['mb_per_s']:.1f} MB/s of .snap file "
              f"({j['rows'] * JOIN_VALUE_BYTES / MIB / j['seconds']:.1f} MB/s of row data; the .snap is zstd-compressed); "
              f"answers +{j['answered_s']:.2f} s; replica VmHWM {j['joiner_hwm_kb'] / 1024:.1f} MB")
    p(f"  reference: {TARANTOOL_QUOTED_JOIN}" + ("" if "tarantool" in report["join"] else "; not measured in this run"))
    p("")

    p("4. TARGETS")
    targets = []
    for nconn in CONNECTION_COUNTS:
        value = ratio(ops("ours", nconn), ops("tarantool", nconn))
        targets.append((f"writes ours/tarantool >= {TARGET_RATIO:.1f}x, {nconn} conn", fmt_ratio(value),
                        None if value is None else value >= TARGET_RATIO))
    lag = sets.get("ours", {}).get("lag", {}).get("paced")
    p99 = lag["p99_ns"] / 1e6 if lag and lag["rows"] and lag["p99_ns"] == lag["p99_ns"] else None
    targets.append((f"lag p99 < {TARGET_LAG_P99_MS:g} ms at {args.lag_rate:g}/s", "-" if p99 is None else f"{p99:.3f} ms",
                    None if p99 is None else p99 < TARGET_LAG_P99_MS))
    j = report["join"].get("ours", {})
    mbs = j.get("mb_per_s") if "seconds" in j else None
    targets.append((f"join >= {TARGET_JOIN_MB_S:g} MB/s ({args.join_mb} MB)", "-" if mbs is None else f"{mbs:.1f} MB/s",
                    None if mbs is None else mbs >= TARGET_JOIN_MB_S))
    hwm = j.get("joiner_hwm_kb") if "seconds" in j else None
    hwm_mb = hwm / 1024 if hwm else None
    targets.append((f"joiner peak RSS < {TARGET_JOIN_RSS_MB:g} MB", "-" if hwm_mb is None else f"{hwm_mb:.1f} MB",
                    None if hwm_mb is None else hwm_mb < TARGET_JOIN_RSS_MB))
    for label, value, met in targets:
        p(f"  {label:<40} {value:>11}  {verdict(met)}")
    p("")

    notes = []
    for name in ("ours", "tarantool"):
        entry = sets.get(name, {})
        if entry.get("skipped"):
            notes.append(f"{name}: skipped: {entry['skipped']}")
        if entry.get("failure"):
            notes.append(f"{name}: FAILED: {entry['failure']}")
        for note in entry.get("notes", []):
            notes.append(f"{name}: {note}")
        if "digests" in entry:
            same = len(set(entry["digests"])) == 1
            notes.append(f"{name}: at the end vclocks {'agree' if entry.get('final_converged') else 'DISAGREE'} "
                         f"{entry.get('final_vclocks', [None])[0]}; kv rows/digest {'agree' if same else 'DIFFER'} "
                         f"{entry['digests'][0] if same else entry['digests']}; status {entry.get('statuses_end')}")
        if entry.get("exit_codes") and any(c not in (0, None) for c in entry["exit_codes"]):
            notes.append(f"{name}: exit codes after SIGTERM {entry['exit_codes']}")
        for line in entry.get("log_notes", []):
            notes.append(f"{name} log: {line}")
    for name, j in report["join"].items():
        for note in j.get("notes", []):
            notes.append(f"join {name}: {note}")
        if j.get("exit_codes") and any(c not in (0, None) for c in j["exit_codes"]):
            notes.append(f"join {name}: exit codes after SIGTERM {j['exit_codes']}")
        for line in j.get("log_notes", []):
            notes.append(f"join {name} log: {line}")
    if notes:
        p("NOTES")
        for note in notes:
            p(f"  {note}")
    print("\n".join(out), flush=True)


# ============================================================================ main


def load_average() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def git_commit() -> str:
    """Read-only: `git rev-parse` and `git status --porcelain`."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + (" +uncommitted changes" if dirty else "")


def find_tarantool(explicit: str | None) -> str | None:
    for candidate in (explicit, "/usr/bin/tarantool", shutil.which("tarantool")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per figure (default 5; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="2 s per figure and a 64 MB join")
    parser.add_argument("--join-mb", type=int, default=None, help="MB to fill before the join (default 1024; 64 with --quick)")
    parser.add_argument("--lag-rate", type=float, default=500.0, help="paced writer rate for the lag figure (default 500/s)")
    parser.add_argument("--poll-interval-ms", type=float, default=0.0,
                        help="sleep between the lag poller's queries (default 0: a tight loop, as specified)")
    parser.add_argument("--no-tarantool-join", action="store_true", help="skip Tarantool's join (quote the known figure)")
    parser.add_argument("--tmp-dir", type=Path, default=None, help="where the temporary data directories go")
    parser.add_argument("--tarantool", default=None, help="Tarantool binary (default /usr/bin/tarantool or PATH)")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 5.0
    if args.join_mb is None:
        args.join_mb = 64 if args.quick else 1024
    if not 0.5 <= args.seconds <= 600:
        parser.error("--seconds must be between 0.5 and 600")
    if not 1 <= args.join_mb <= 16384:
        parser.error("--join-mb must be between 1 and 16384")
    if not 0 <= args.poll_interval_ms <= 1000:
        parser.error("--poll-interval-ms must be between 0 and 1000")
    if not 1 <= args.lag_rate <= 100_000:
        parser.error("--lag-rate must be between 1 and 100000")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    warmup_s = 0.5 if args.quick else 1.0
    binary = find_tarantool(args.tarantool)
    version = "not installed (apt-get install -y tarantool)"
    if binary:
        try:
            version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
        except (OSError, subprocess.TimeoutExpired, IndexError):
            version = binary
    work = Path(tempfile.mkdtemp(prefix="bench_replicaset_", dir=args.tmp_dir))
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "commit": git_commit(),
        "tarantool_version": version,
        "warmup_s": warmup_s,
        "loadavg_start": load_average(),
        "sets": {},
        "join": {},
    }
    try:
        bench_set(OurSet(work), args, warmup_s, report)
        if binary:
            bench_set(TarantoolSet(work, binary), args, warmup_s, report)
        else:
            report["sets"]["tarantool"] = {"skipped": "tarantool is not installed (apt-get install -y tarantool)"}
        bench_join_ours(work, args.join_mb, report)
        if binary and not args.no_tarantool_join:
            bench_join_tarantool(work, binary, args.join_mb, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = load_average()
    print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
