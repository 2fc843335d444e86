#!/usr/bin/env python3
"""Single-instance benchmark: WAL appends, SQL writes over iproto, memory; next to Tarantool 2.6.

    /work/main/.venv/bin/python bench/bench_single.py [--seconds N] [--quick] [--client-procs K]

What it measures, in this order, each for `--seconds` after a short warm-up:

1. The disk's group-commit limit: N x (os.write of a 4 KiB block + os.fsync) => fsyncs/s.
2. `wal.Wal.append` rows/s per wal_mode (write, fsync) at 1, 16 and 256 records per append,
   each as a fraction of that limit (fsyncs/s x group size).
3. The loopback round-trip limit: a trivial blocking-socket ping-pong with a separate process.
4. `INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)` through the PyPI `tarantool` connector with 1
   and 16 connections against (a) our server, (b) Tarantool 2.6 (wal_mode='write'), (c) a
   do-nothing trio iproto server in its own process (the ceiling of our stack). ops/s, p50/p99,
   server and client CPU, RSS idle and peak.
5. Targets: MET / MISSED.

Every server is started by this script on 127.0.0.1 (a free port), one at a time, and stopped by
pid in a `finally`; every temporary directory is removed. The script's own helper modes
(`--noop-server PORT`, `--echo-server PORT`) are what it starts for (c) and for step 3.
"""

from __future__ import annotations

import argparse
import array
import datetime
import functools
import json
import multiprocessing
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
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

HOST = "127.0.0.1"
SQL_INSERT = "INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)"
SQL_CREATE = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)"
KEY_RANGE = 100_000
VALUE_BYTES = 100
CONNECTION_COUNTS = (1, 16)
WAL_GROUP_SIZES = (1, 16, 256)
WAL_PAYLOAD_BYTES = 100
FSYNC_BLOCK_BYTES = 4096
FSYNC_FILE_MAX_BYTES = 64 * 1024 * 1024  # start a new file past this, as the WAL rolls segments

MAX_OPS_PER_THREAD = 5_000_000  # a bound on every client loop besides its deadline
MAX_ERRORS_PER_THREAD = 50  # a client thread gives up after this many failed requests
MAX_WAL_APPENDS = 10_000_000
MAX_FSYNCS = 1_000_000
MAX_PINGS = 10_000_000
SERVER_START_TIMEOUT_S = 30.0
SERVER_STOP_TIMEOUT_S = 15.0
CLIENT_SOCKET_TIMEOUT_S = 10.0
CLIENT_CONNECT_TIMEOUT_S = 5.0
RSS_SAMPLE_INTERVAL_S = 0.1
MEMTX_MEMORY_BYTES = 256 * 1024 * 1024
TARANTOOL_INSTALL_HINT = "apt-get install -y tarantool"

# Targets printed next to the figures.
TARGET_RATIO_VS_TARANTOOL = 1.0
TARGET_P99_1CONN_MS = 1.0
TARGET_IDLE_RSS_MB = 80.0

MIB = 1024 * 1024


def log(message: str) -> None:
    """Progress on stderr, so stdout holds only the report."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ============================================================================ small helpers


def percentile(sorted_values: list[int] | array.array, fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return float(sorted_values[index])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def read_status_kb(pid: int, field: str) -> int | None:
    """A `VmRSS`-style field of /proc/PID/status in kB, or None when the process is gone."""
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
    """utime + stime of every thread of PID, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def fmt_int(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:,.0f}"


def fmt_ms(value_ns: float | None) -> str:
    return "-" if value_ns is None or value_ns != value_ns else f"{value_ns / 1e6:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.2f}x"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value * 100:.0f}%"


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b != b or a != a or b <= 0:
        return None
    return a / b


# ============================================================================ 1. disk fsync limit


def measure_fsync_limit(directory: Path, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Time (write 4 KiB + fsync) on an O_APPEND file in `directory` => fsyncs/s."""
    block = os.urandom(FSYNC_BLOCK_BYTES)
    path = directory / "fsync_probe.bin"
    latencies = array.array("q")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    size = 0
    try:
        start = time.monotonic_ns()
        measure_from = start + int(warmup_s * 1e9)
        deadline = measure_from + int(seconds * 1e9)
        count = 0
        first = last = None
        for _ in range(MAX_FSYNCS):
            now = time.monotonic_ns()
            if now >= deadline:
                break
            if size >= FSYNC_FILE_MAX_BYTES:
                os.close(fd)
                os.unlink(path)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
                size = 0
            t0 = time.monotonic_ns()
            os.write(fd, block)
            os.fsync(fd)
            t1 = time.monotonic_ns()
            size += len(block)
            if t0 >= measure_from:
                if first is None:
                    first = t0
                last = t1
                count += 1
                latencies.append(t1 - t0)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    elapsed_s = (last - first) / 1e9 if first is not None and last is not None and last > first else None
    ordered = sorted(latencies)
    return {
        "fsyncs_per_s": count / elapsed_s if elapsed_s else None,
        "count": count,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
        "max_ns": float(ordered[-1]) if ordered else float("nan"),
    }


# ============================================================================ 2. WAL appends


def wal_payload() -> bytes:
    """A ~100-byte msgpack document shaped like a replicated row."""
    import msgpack

    base = {"op": "replace", "table": "kv", "row": [12345, ""]}
    filler = WAL_PAYLOAD_BYTES - len(msgpack.packb(base))
    base["row"][1] = "v" * max(0, filler - 1)
    payload = msgpack.packb(base)
    # A str header grows by a byte past 31 chars; trim to land on the target.
    while len(payload) > WAL_PAYLOAD_BYTES and base["row"][1]:
        base["row"][1] = base["row"][1][:-1]
        payload = msgpack.packb(base)
    return payload


def measure_wal(directory: Path, mode: str, group: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    from wal import Record, RecordType, Wal, WalMode

    payload = wal_payload()
    wal_dir = Path(tempfile.mkdtemp(prefix=f"wal_{mode}_{group}_", dir=directory))
    try:
        wal = Wal.open(wal_dir, mode=WalMode(mode))
        try:
            lsn = 0
            start = time.monotonic_ns()
            measure_from = start + int(warmup_s * 1e9)
            deadline = measure_from + int(seconds * 1e9)
            rows = appends = 0
            first = last = None
            for _ in range(MAX_WAL_APPENDS):
                t0 = time.monotonic_ns()
                if t0 >= deadline:
                    break
                batch = [
                    Record(type=RecordType.DML, origin=1, lsn=n, txn_id=n, payload=payload)
                    for n in range(lsn + 1, lsn + group + 1)
                ]
                wal.append(batch)
                lsn += group
                t1 = time.monotonic_ns()
                if t0 >= measure_from:
                    if first is None:
                        first = t0
                    last = t1
                    rows += group
                    appends += 1
            segments = len(wal.segments())
        finally:
            wal.close()
    finally:
        shutil.rmtree(wal_dir, ignore_errors=True)
    elapsed_s = (last - first) / 1e9 if first is not None and last is not None and last > first else None
    return {
        "mode": mode,
        "group": group,
        "rows_per_s": rows / elapsed_s if elapsed_s else None,
        "appends_per_s": appends / elapsed_s if elapsed_s else None,
        "segments": segments,
        "payload_bytes": len(payload),
    }


# ============================================================================ 3. loopback limit


def echo_server_main(port: int) -> int:
    """Helper mode: a blocking echo server, one thread per connection; exits with its parent."""
    parent = os.getppid()
    listener = socket.create_server((HOST, port))
    listener.settimeout(0.5)
    print(json.dumps({"event": "listening", "port": listener.getsockname()[1]}), flush=True)

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.settimeout(60.0)
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    conn.sendall(data)
            except OSError:
                return

    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    return 0


def measure_loopback(port: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    message = b"x" * 32
    latencies = array.array("q")
    with socket.create_connection((HOST, port), timeout=CLIENT_SOCKET_TIMEOUT_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = time.monotonic_ns()
        measure_from = start + int(warmup_s * 1e9)
        deadline = measure_from + int(seconds * 1e9)
        first = last = None
        for _ in range(MAX_PINGS):
            t0 = time.monotonic_ns()
            if t0 >= deadline:
                break
            sock.sendall(message)
            got = 0
            while got < len(message):
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError("echo server closed the connection")
                got += len(chunk)
            t1 = time.monotonic_ns()
            if t0 >= measure_from:
                if first is None:
                    first = t0
                last = t1
                latencies.append(t1 - t0)
    elapsed_s = (last - first) / 1e9 if first is not None and last is not None and last > first else None
    ordered = sorted(latencies)
    return {
        "rt_per_s": len(latencies) / elapsed_s if elapsed_s else None,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
    }


# ============================================================================ (c) the no-op server


def noop_server_main(port: int) -> int:
    """Helper mode: a do-nothing trio iproto server built from our codec; exits on SIGTERM."""
    import trio

    from replicaset import __version__
    from replicaset.iproto.codec import FrameDecoder, encode_error, encode_greeting, encode_ok
    from replicaset.iproto.constants import ErrorCode, Feature, Key, RequestType, SqlInfoKey
    from replicaset.iproto.errors import RemoteProtocolError

    schema_version = 1
    instance_uuid = "00000000-0000-4000-8000-00000000b0b0"
    execute_body = {int(Key.SQL_INFO): {int(SqlInfoKey.ROW_COUNT): 1}}
    empty_data = {int(Key.DATA): []}
    id_body = {
        int(Key.VERSION): 3,
        int(Key.FEATURES): [int(Feature.STREAMS), int(Feature.TRANSACTIONS), int(Feature.ERROR_EXTENSION)],
    }
    execute, select, ping, auth, ident = (
        int(RequestType.EXECUTE), int(RequestType.SELECT), int(RequestType.PING),
        int(RequestType.AUTH), int(RequestType.ID),
    )

    def answer(frame: Any) -> bytes:
        kind = frame.request_type
        if kind == execute:
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=execute_body)
        if kind == select:  # the connector's _vspace / _vindex schema reads
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=empty_data)
        if kind in (ping, auth):
            return encode_ok(sync=frame.sync, schema_version=schema_version)
        if kind == ident:
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=id_body)
        return encode_error(
            sync=frame.sync, schema_version=schema_version,
            code=ErrorCode.UNKNOWN_REQUEST_TYPE, message=f"Unknown request type {kind}",
        )

    async def serve(stream: trio.SocketStream) -> None:
        # Same greeting version as our server, so the connector takes the same path.
        greeting = encode_greeting(version=__version__, instance_uuid=instance_uuid, salt=os.urandom(32))
        decoder = FrameDecoder(16 * MIB)
        try:
            await stream.send_all(greeting)
            while True:
                data = await stream.receive_some(64 * 1024)
                if not data:
                    return
                decoder.feed(data)
                replies = []
                while True:
                    try:
                        frame = decoder.next_frame()
                    except RemoteProtocolError as exc:
                        if exc.fatal:
                            return
                        replies.append(encode_error(sync=exc.sync or 0, schema_version=schema_version, code=exc.code, message=exc.message))
                        continue
                    if frame is None:
                        break
                    replies.append(answer(frame))
                if replies:
                    await stream.send_all(b"".join(replies))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await trio.aclose_forcefully(stream)

    async def main() -> None:
        parent = os.getppid()
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(functools.partial(trio.serve_tcp, serve, port, host=HOST))
            bound = listeners[0].socket.getsockname()[1]
            print(json.dumps({"event": "listening", "port": bound}), flush=True)

            async def watch_parent() -> None:
                while os.getppid() == parent:
                    await trio.sleep(1.0)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_parent)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

    trio.run(main)
    return 0


# ============================================================================ server processes


class ServerProcess:
    """One server this script started: its Popen, log file, pid; stopped by pid."""

    def __init__(self, name: str, argv: list[str], log_path: Path, cwd: Path | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log_file = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
            cwd=str(cwd) if cwd else None,
        )
        self.pid = self.proc.pid
        self.port: int | None = None
        self.exit_code: int | None = None

    def wait_for_line(self, predicate: Callable[[str], Any], timeout_s: float) -> Any:
        """Poll the log until a line makes `predicate` return something truthy."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                found = predicate(line)
                if found:
                    return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode} before it was ready:\n{self.log_tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} was not ready after {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> int | None:
        """SIGTERM the pid, wait, SIGKILL the same pid only if it did not exit."""
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
                self.proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log(f"{self.name} (pid {self.pid}) ignored SIGTERM for {SERVER_STOP_TIMEOUT_S:.0f} s: SIGKILL")
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
            except ProcessLookupError:
                pass
        self.exit_code = self.proc.returncode
        self._log_file.close()
        return self.exit_code


def _json_listening(line: str) -> int | None:
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("event") == "listening":
        if "port" in event:
            return int(event["port"])
        listen = str(event.get("listen", ""))
        _, _, port = listen.rpartition(":")
        return int(port) if port.isdigit() else None
    return None


def start_ours(work: Path) -> ServerProcess:
    data_dir = work / "ours_data"
    config = work / "ours.toml"
    config.write_text('wal_mode = "write"\n')
    argv = [
        sys.executable, "-m", "replicaset.cli", "bootstrap",
        "--data-dir", str(data_dir), "--listen", f"{HOST}:0", "--config", str(config),
    ]
    server = ServerProcess("ours", argv, work / "ours.log", cwd=REPO)
    server.port = server.wait_for_line(_json_listening, SERVER_START_TIMEOUT_S)
    return server


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


def find_tarantool() -> str | None:
    for candidate in ("/usr/bin/tarantool", shutil.which("tarantool")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def start_tarantool(work: Path, binary: str) -> ServerProcess:
    work_dir = work / "tarantool_data"
    work_dir.mkdir()
    port = free_port()
    init = work / "tarantool_init.lua"
    init.write_text(TARANTOOL_INIT.format(host=HOST, port=port, memtx_memory=MEMTX_MEMORY_BYTES, work_dir=work_dir))
    server = ServerProcess("tarantool", [binary, str(init)], work / "tarantool.log", cwd=work_dir)
    server.wait_for_line(lambda line: "BENCH_READY" in line, SERVER_START_TIMEOUT_S)
    server.port = port
    return server


def start_noop(work: Path) -> ServerProcess:
    argv = [sys.executable, str(Path(__file__).resolve()), "--noop-server", "0"]
    server = ServerProcess("noop", argv, work / "noop.log", cwd=REPO)
    server.port = server.wait_for_line(_json_listening, SERVER_START_TIMEOUT_S)
    return server


def start_echo(work: Path) -> ServerProcess:
    argv = [sys.executable, str(Path(__file__).resolve()), "--echo-server", "0"]
    server = ServerProcess("echo", argv, work / "echo.log", cwd=REPO)
    server.port = server.wait_for_line(_json_listening, SERVER_START_TIMEOUT_S)
    return server


# ============================================================================ 4. SQL load


def connect(port: int) -> Any:
    import tarantool

    return tarantool.Connection(
        HOST, port, socket_timeout=CLIENT_SOCKET_TIMEOUT_S, connection_timeout=CLIENT_CONNECT_TIMEOUT_S
    )


def _client_thread(conn: Any, seed: int, start_ns: int, warm_end_ns: int, end_ns: int, out: dict[str, Any]) -> None:
    """Run INSERT OR REPLACE until end_ns; keep the latencies of requests started after warm-up."""
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
        key = rnd.randrange(KEY_RANGE)
        try:
            execute(SQL_INSERT, [key, value])
        except Exception as exc:  # noqa: BLE001 - any failure is counted and reported
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


def run_client_group(
    port: int, nconn: int, seed: int, warmup_s: float, seconds: float,
    get_start_ns: Callable[[], int], on_ready: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """`nconn` threads in this process, each with its own connection; merged results."""
    conns = []
    try:
        for _ in range(nconn):
            conns.append(connect(port))
        if on_ready is not None:
            on_ready()
        start_ns = get_start_ns()
        warm_end_ns = start_ns + int(warmup_s * 1e9)
        end_ns = warm_end_ns + int(seconds * 1e9)
        outs: list[dict[str, Any]] = [{} for _ in range(nconn)]
        threads = [
            threading.Thread(
                target=_client_thread, args=(conns[i], seed * 1000 + i, start_ns, warm_end_ns, end_ns, outs[i]),
                daemon=True,
            )
            for i in range(nconn)
        ]
        for thread in threads:
            thread.start()
        cpu_at_warm_end = cpu_at_end = None
        pause = (warm_end_ns - time.monotonic_ns()) / 1e9
        if pause > 0:
            time.sleep(pause)
        cpu_at_warm_end = time.process_time()
        join_deadline = time.monotonic() + warmup_s + seconds + CLIENT_SOCKET_TIMEOUT_S + 30
        for thread in threads:
            thread.join(timeout=max(0.1, join_deadline - time.monotonic()))
        cpu_at_end = time.process_time()
        cpu_window_end = time.monotonic_ns()
        stuck = sum(1 for thread in threads if thread.is_alive())
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
    return {
        "latencies": latencies,
        "errors": errors,
        "samples": samples[:5],
        "warm_end_ns": warm_end_ns,
        "last_done": last_done,
        "stuck_threads": stuck,
        "client_cpu_s": cpu_at_end - cpu_at_warm_end,
        "client_cpu_window_s": (cpu_window_end - warm_end_ns) / 1e9,
    }


def _client_proc_main(
    port: int, nconn: int, seed: int, warmup_s: float, seconds: float,
    ready: Any, go: Any, start_value: Any, results: Any,
) -> None:
    """A multiprocessing worker: connect, say ready, wait for the common start, run, report."""
    try:
        def get_start_ns() -> int:
            if not go.wait(timeout=120):
                raise RuntimeError("no start signal from the parent within 120 s")
            return start_value.value

        result = run_client_group(port, nconn, seed, warmup_s, seconds, get_start_ns, on_ready=lambda: ready.put(os.getpid()))
        result["latencies"] = result["latencies"].tobytes()
        results.put(result)
    except BaseException as exc:  # noqa: BLE001 - report to the parent instead of dying silently
        ready.put(-1)
        results.put({"fatal": f"{type(exc).__name__}: {exc}"})


class Monitor:
    """Samples a server's VmRSS while a load runs, and its CPU time over the measured window."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.cpu_marks: dict[str, float | None] = {}

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            kb = read_status_kb(self.pid, "VmRSS")
            if kb is not None:
                self.peak_kb = max(self.peak_kb, kb)
            self._stop.wait(RSS_SAMPLE_INTERVAL_S)

    def mark_cpu(self, name: str) -> None:
        self.cpu_marks[name] = read_cpu_seconds(self.pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        kb = read_status_kb(self.pid, "VmRSS")
        if kb is not None:
            self.peak_kb = max(self.peak_kb, kb)


def run_load(server: ServerProcess, nconn: int, warmup_s: float, seconds: float, client_procs: int, seed: int) -> dict[str, Any]:
    assert server.port is not None
    monitor = Monitor(server.pid)
    timers: list[threading.Timer] = []

    def schedule_cpu_marks(start_ns: int) -> None:
        warm_end = start_ns + int(warmup_s * 1e9)
        end = warm_end + int(seconds * 1e9)
        for name, at in (("warm_end", warm_end), ("end", end)):
            timer = threading.Timer(max(0.0, (at - time.monotonic_ns()) / 1e9), monitor.mark_cpu, args=(name,))
            timer.daemon = True
            timers.append(timer)
            timer.start()

    procs = max(1, min(client_procs, nconn))
    monitor.start()
    try:
        if procs == 1:
            def get_start_ns() -> int:
                start_ns = time.monotonic_ns() + 50_000_000
                schedule_cpu_marks(start_ns)
                return start_ns

            result = run_client_group(server.port, nconn, seed, warmup_s, seconds, get_start_ns)
            client_cpu_s = result["client_cpu_s"]
            groups = [result]
        else:
            groups, client_cpu_s = _run_multiprocess(server.port, nconn, procs, seed, warmup_s, seconds, schedule_cpu_marks)
    finally:
        for timer in timers:
            timer.join(timeout=warmup_s + seconds + 60)
        monitor.stop()

    latencies = array.array("q")
    errors = 0
    samples: list[str] = []
    stuck = 0
    warm_end_ns = min(g["warm_end_ns"] for g in groups)
    last_done = max(g["last_done"] for g in groups)
    for group in groups:
        latencies.extend(group["latencies"])
        errors += group["errors"]
        samples.extend(group["samples"])
        stuck += group["stuck_threads"]
    ordered = sorted(latencies)
    elapsed_s = (last_done - warm_end_ns) / 1e9 if last_done > warm_end_ns else None
    cpu0, cpu1 = monitor.cpu_marks.get("warm_end"), monitor.cpu_marks.get("end")
    server_cpu = (cpu1 - cpu0) / seconds if cpu0 is not None and cpu1 is not None else None
    return {
        "server": server.name,
        "conns": nconn,
        "client_procs": procs,
        "ops": len(ordered),
        "ops_per_s": len(ordered) / elapsed_s if elapsed_s else None,
        "p50_ns": percentile(ordered, 0.50),
        "p99_ns": percentile(ordered, 0.99),
        "max_ns": float(ordered[-1]) if ordered else float("nan"),
        "errors": errors,
        "error_samples": samples[:5],
        "stuck_threads": stuck,
        "server_cpu": server_cpu,
        "client_cpu": client_cpu_s / seconds if client_cpu_s is not None else None,
        "peak_rss_kb": monitor.peak_kb,
    }


def _run_multiprocess(
    port: int, nconn: int, procs: int, seed: int, warmup_s: float, seconds: float,
    on_start: Callable[[int], None],
) -> tuple[list[dict[str, Any]], float]:
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    start_value = ctx.Value("q", 0)
    shares = [nconn // procs + (1 if i < nconn % procs else 0) for i in range(procs)]
    workers = [
        ctx.Process(
            target=_client_proc_main,
            args=(port, share, seed * 100 + i, warmup_s, seconds, ready, go, start_value, results),
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
            result = results.get(timeout=warmup_s + seconds + CLIENT_SOCKET_TIMEOUT_S + 60)
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
                worker.terminate()  # by its pid; only processes this script started
                worker.join(timeout=5)
    return groups, sum(g["client_cpu_s"] for g in groups)


def sanity_insert(port: int) -> str:
    """One INSERT through the connector; returns what the server said its row count was."""
    conn = connect(port)
    try:
        response = conn.execute(SQL_INSERT, [0, "x" * VALUE_BYTES])
        return str(getattr(response, "affected_row_count", "?"))
    finally:
        conn.close()


def bench_server(
    name: str, starter: Callable[[], ServerProcess], create_table: bool, args: argparse.Namespace,
    warmup_s: float, report: dict[str, Any],
) -> None:
    entry: dict[str, Any] = {"runs": {}}
    report["servers"][name] = entry
    server = None
    try:
        log(f"{name}: starting")
        server = starter()
        entry["pid"] = server.pid
        if create_table:
            conn = connect(server.port)
            try:
                conn.execute(SQL_CREATE)
            finally:
                conn.close()
        entry["row_count_reply"] = sanity_insert(server.port)
        time.sleep(0.5)
        entry["idle_rss_kb"] = read_status_kb(server.pid, "VmRSS")
        for nconn in CONNECTION_COUNTS:
            log(f"{name}: {nconn} connection(s), {warmup_s:.1f} s warm-up + {args.seconds:.1f} s")
            run = run_load(server, nconn, warmup_s, args.seconds, args.client_procs, seed=nconn)
            entry["runs"][nconn] = run
            entry[f"rss_after_{nconn}_kb"] = read_status_kb(server.pid, "VmRSS")
            if run["errors"] or run["stuck_threads"]:
                log(f"{name}: {run['errors']} errors, {run['stuck_threads']} stuck threads: {run['error_samples']}")
            if server.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {server.proc.returncode} during the load:\n{server.log_tail()}")
        t0 = time.monotonic()
        conn = connect(server.port)
        try:
            conn.execute(SQL_INSERT, [1, "after"])
        finally:
            conn.close()
        entry["post_load_request_ms"] = (time.monotonic() - t0) * 1000
        entry["hwm_rss_kb"] = read_status_kb(server.pid, "VmHWM")
    except Exception as exc:  # noqa: BLE001 - one server failing must not stop the others
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        log(f"{name}: FAILED: {entry['failure']}")
    finally:
        if server is not None:
            entry["exit_code"] = server.stop()
            entry["log_notes"] = scan_log(server)
            log(f"{name}: stopped (exit code {entry['exit_code']})")


def scan_log(server: ServerProcess) -> list[str]:
    """Warnings, errors and non-JSON lines (tracebacks) in our server's log; nothing for others."""
    if server.name != "ours":
        return []
    notes: list[str] = []
    lines = server.log_path.read_text(errors="replace").splitlines()
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            notes.append(line[:200])
            continue
        if isinstance(event, dict) and event.get("level") not in ("info", "debug"):
            notes.append(line[:200])
    return [f"{len(lines)} log lines, {len(notes)} warning/error/non-JSON"] + notes[:8]


# ============================================================================ report


def print_report(report: dict[str, Any], args: argparse.Namespace) -> None:
    out: list[str] = []
    p = out.append
    p(f"bench_single  {report['date']}  host {report['host']}  cpus {report['cpus']}  python {report['python']}")
    p(f"command: {report['command']}   (cwd {os.getcwd()}, repo at {report['commit']})")
    p(f"measure {args.seconds:g} s after {report['warmup_s']:g} s warm-up; temp dir on {report['tmp_base']}; "
      f"load average (1/5/15 min) at start {report['loadavg_start']}, at end {report['loadavg_end']}")
    p("")

    fs = report["fsync"]
    p(f"DISK  write {FSYNC_BLOCK_BYTES} B + fsync: {fmt_int(fs['fsyncs_per_s'])} fsyncs/s "
      f"(p50 {fmt_ms(fs['p50_ns'])} ms, p99 {fmt_ms(fs['p99_ns'])} ms, max {fmt_ms(fs['max_ns'])} ms)")
    p("")
    p(f"WAL append (wal package, {report['wal'][0]['payload_bytes'] if report['wal'] else '?'} B payload), "
      "limit = fsyncs/s x group")
    p(f"  {'mode':<6} {'group':>5} {'rows/s':>11} {'appends/s':>10} {'limit rows/s':>13} {'of limit':>9}")
    for w in report["wal"]:
        limit = fs["fsyncs_per_s"] * w["group"] if fs["fsyncs_per_s"] else None
        p(f"  {w['mode']:<6} {w['group']:>5} {fmt_int(w['rows_per_s']):>11} {fmt_int(w['appends_per_s']):>10} "
          f"{fmt_int(limit):>13} {fmt_ratio(ratio(w['rows_per_s'], limit)):>9}")
    p("  (write mode never fsyncs: its 'of limit' above 1x is how far it runs past the durable limit)")
    p("")

    lb = report["loopback"]
    p(f"LOOPBACK  Python socket ping-pong, 1 connection: {fmt_int(lb.get('rt_per_s'))} round trips/s "
      f"(p50 {fmt_ms(lb.get('p50_ns'))} ms, p99 {fmt_ms(lb.get('p99_ns'))} ms)")
    p("")

    servers = report["servers"]
    p(f"SQL  {SQL_INSERT}  keys 0..{KEY_RANGE - 1}, {VALUE_BYTES}-char value, PyPI tarantool connector; "
      f"client: {args.client_procs} process(es) x threads")
    p(f"  {'server':<10} {'conns':>5} {'ops/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>6} "
      f"{'srv CPU':>7} {'cli CPU':>7}")
    for nconn in CONNECTION_COUNTS:
        for name in ("ours", "tarantool", "noop"):
            entry = servers.get(name, {})
            run = entry.get("runs", {}).get(nconn)
            if run is None:
                why = entry.get("skipped") or entry.get("failure") or "not run"
                p(f"  {name:<10} {nconn:>5} {'-':>9}  ({why.splitlines()[0][:80]})")
                continue
            errors = str(run["errors"]) + (f"+{run['stuck_threads']}stuck" if run["stuck_threads"] else "")
            p(f"  {name:<10} {nconn:>5} {fmt_int(run['ops_per_s']):>9} {fmt_ms(run['p50_ns']):>8} "
              f"{fmt_ms(run['p99_ns']):>8} {fmt_ms(run['max_ns']):>8} {errors:>6} {fmt_pct(run['server_cpu']):>7} "
              f"{fmt_pct(run['client_cpu']):>7}")
    p("  (CPU: share of one core over the measured window; 2 cores in all, client and server share them)")
    p("")
    p("RATIOS")

    def ops(name: str, nconn: int) -> float | None:
        run = servers.get(name, {}).get("runs", {}).get(nconn)
        return run["ops_per_s"] if run else None

    for nconn in CONNECTION_COUNTS:
        p(f"  {nconn:>2} conn: ours/tarantool {fmt_ratio(ratio(ops('ours', nconn), ops('tarantool', nconn)))}   "
          f"ours/noop {fmt_ratio(ratio(ops('ours', nconn), ops('noop', nconn)))}   "
          f"tarantool/noop {fmt_ratio(ratio(ops('tarantool', nconn), ops('noop', nconn)))}")
    rt = lb.get("rt_per_s")
    p("  1 conn ops/s as a fraction of the loopback round-trip limit: " + "   ".join(
        f"{name} {fmt_ratio(ratio(ops(name, 1), rt))}" for name in ("ours", "tarantool", "noop")))
    p("")

    p("MEMORY  VmRSS MB")
    p(f"  {'server':<10} {'idle':>7} {'peak@16':>8} {'after 1':>8} {'after 16':>9} {'VmHWM':>7}")
    for name in ("ours", "tarantool"):
        entry = servers.get(name, {})
        run16 = entry.get("runs", {}).get(16)

        def mb(kb: int | None) -> str:
            return "-" if not kb else f"{kb / 1024:.1f}"

        p(f"  {name:<10} {mb(entry.get('idle_rss_kb')):>7} {mb(run16['peak_rss_kb'] if run16 else None):>8} "
          f"{mb(entry.get('rss_after_1_kb')):>8} {mb(entry.get('rss_after_16_kb')):>9} {mb(entry.get('hwm_rss_kb')):>7}")
    p("")

    p("TARGETS")
    targets = []
    for nconn in CONNECTION_COUNTS:
        value = ratio(ops("ours", nconn), ops("tarantool", nconn))
        targets.append((f"ours >= {TARGET_RATIO_VS_TARANTOOL:.1f}x tarantool at {nconn} conn", fmt_ratio(value),
                        None if value is None else value >= TARGET_RATIO_VS_TARANTOOL))
    run1 = servers.get("ours", {}).get("runs", {}).get(1)
    p99 = run1["p99_ns"] / 1e6 if run1 and run1["ops"] else None
    targets.append((f"ours p99 < {TARGET_P99_1CONN_MS:g} ms at 1 conn", "-" if p99 is None else f"{p99:.3f} ms",
                    None if p99 is None else p99 < TARGET_P99_1CONN_MS))
    idle = servers.get("ours", {}).get("idle_rss_kb")
    idle_mb = idle / 1024 if idle else None
    targets.append((f"ours idle RSS < {TARGET_IDLE_RSS_MB:g} MB", "-" if idle_mb is None else f"{idle_mb:.1f} MB",
                    None if idle_mb is None else idle_mb < TARGET_IDLE_RSS_MB))
    for label, value, met in targets:
        verdict = "n/a" if met is None else ("MET" if met else "MISSED")
        p(f"  {label:<36} {value:>10}  {verdict}")
    p("")

    notes = []
    for name in ("ours", "tarantool", "noop"):
        entry = servers.get(name, {})
        if entry.get("skipped"):
            notes.append(f"{name}: skipped: {entry['skipped']}")
        if entry.get("failure"):
            notes.append(f"{name}: FAILED: {entry['failure']}")
        if entry.get("exit_code") not in (None, 0) and not entry.get("skipped"):
            notes.append(f"{name}: exit code {entry['exit_code']} after SIGTERM")
        if entry.get("row_count_reply") not in (None, "1"):
            notes.append(f"{name}: the sanity INSERT reported row count {entry['row_count_reply']}")
        for nconn, run in entry.get("runs", {}).items():
            if run["errors"] or run["stuck_threads"]:
                notes.append(f"{name} {nconn} conn: {run['errors']} errors, {run['stuck_threads']} stuck threads: "
                             f"{run['error_samples']}")
        if entry.get("post_load_request_ms") is not None and entry["post_load_request_ms"] > 100:
            notes.append(f"{name}: a request right after the load took {entry['post_load_request_ms']:.0f} ms")
        if name == "ours":
            for line in entry.get("log_notes", []):
                notes.append(f"ours log: {line}")
    if notes:
        p("NOTES")
        for note in notes:
            p(f"  {note}")
    print("\n".join(out), flush=True)


# ============================================================================ main


def load_average() -> str:
    """/proc/loadavg's first three fields: other work on the machine skews every figure."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def git_commit() -> str:
    """The checked-out commit, read-only (`git rev-parse`, `git status`); '?' without git."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + (" +uncommitted changes" if dirty else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per figure (default 5)")
    parser.add_argument("--quick", action="store_true", help="2 s per figure instead of 5")
    parser.add_argument("--client-procs", type=int, default=1, metavar="K",
                        help="spread the 16 connections over K client processes (default 1: threads only)")
    parser.add_argument("--tmp-dir", type=Path, default=None,
                        help="where temporary data dirs go (default: the system temp dir); fsync and WAL "
                             "figures are for this filesystem")
    parser.add_argument("--tarantool", default=None, help="Tarantool binary (default /usr/bin/tarantool or PATH)")
    parser.add_argument("--noop-server", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--echo-server", type=int, default=None, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 2.0 if args.quick else 5.0
    if not 0.1 <= args.seconds <= 600:
        parser.error("--seconds must be between 0.1 and 600")
    if not 1 <= args.client_procs <= 16:
        parser.error("--client-procs must be between 1 and 16")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.noop_server is not None:
        return noop_server_main(args.noop_server)
    if args.echo_server is not None:
        return echo_server_main(args.echo_server)

    warmup_s = 0.5 if args.quick else 1.0
    work = Path(tempfile.mkdtemp(prefix="bench_single_", dir=args.tmp_dir))
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "warmup_s": warmup_s,
        "tmp_base": str(work.parent),
        "commit": git_commit(),
        "loadavg_start": load_average(),
        "servers": {},
        "wal": [],
        "loopback": {},
    }
    try:
        log(f"disk fsync limit in {work}")
        report["fsync"] = measure_fsync_limit(work, args.seconds, min(warmup_s, 0.5))
        for mode in ("write", "fsync"):
            for group in WAL_GROUP_SIZES:
                log(f"WAL append mode={mode} group={group}")
                report["wal"].append(measure_wal(work, mode, group, args.seconds, min(warmup_s, 0.5)))

        echo = None
        try:
            log("loopback round trip")
            echo = start_echo(work)
            report["loopback"] = measure_loopback(echo.port, args.seconds, warmup_s)
        except Exception as exc:  # noqa: BLE001
            log(f"loopback measurement failed: {exc}")
        finally:
            if echo is not None:
                echo.stop()

        bench_server("ours", lambda: start_ours(work), True, args, warmup_s, report)

        binary = args.tarantool or find_tarantool()
        if binary is not None and not os.access(binary, os.X_OK):
            binary = None
        if binary is None:
            message = f"tarantool is not installed: install it with `{TARANTOOL_INSTALL_HINT}`"
            log(message)
            report["servers"]["tarantool"] = {"skipped": message, "runs": {}}
        else:
            bench_server("tarantool", lambda: start_tarantool(work, binary), False, args, warmup_s, report)

        bench_server("noop", lambda: start_noop(work), False, args, warmup_s, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["loadavg_end"] = load_average()

    print_report(report, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
