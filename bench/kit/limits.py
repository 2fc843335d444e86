"""What this machine allows at best, the ceilings the server's figures are read against:

- the disk's group-commit limit: N x (os.write of a 4 KiB block + os.fsync) => fsyncs/s; a
  durable write path does at most (fsyncs/s x records per fsync) rows/s;
- the loopback round-trip limit: a blocking-socket ping-pong with a separate process (this
  module run as `python -m bench.kit.limits PORT` is that process's echo server); one
  connection does at most that many requests/s.

Each runs for `seconds` after `warmup_s`; only what started after the warm-up counts."""

from __future__ import annotations

import array
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.kit.procs import HOST, start_helper
from bench.kit.report import percentile, progress

FSYNC_BLOCK_BYTES = 4096
FSYNC_FILE_MAX_BYTES = 64 * 1024 * 1024  # start a new file past this, as the WAL rolls segments
MAX_FSYNCS = 1_000_000
MAX_PINGS = 10_000_000
PING_SOCKET_TIMEOUT_S = 10.0


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


def echo_server_main(port: int) -> int:
    """A blocking echo server, one thread per connection; exits with its parent."""
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
    """Round trips/s of 32-byte pings to the echo server on `port`, one connection."""
    message = b"x" * 32
    latencies = array.array("q")
    with socket.create_connection((HOST, port), timeout=PING_SOCKET_TIMEOUT_S) as sock:
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


def measure_loopback_limit(work: Path, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Start the echo server, ping it, stop it; {} when that fails (the figure is then '-')."""
    echo = None
    try:
        echo = start_helper("echo", "bench.kit.limits", work / "echo.log")
        assert echo.port is not None
        return measure_loopback(echo.port, seconds, warmup_s)
    except Exception as exc:  # noqa: BLE001 - a missing ceiling must not stop the figures
        progress(f"loopback measurement failed: {exc}")
        return {}
    finally:
        if echo is not None:
            echo.stop()


if __name__ == "__main__":
    sys.exit(echo_server_main(int(sys.argv[1])))
