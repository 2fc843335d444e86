"""What this machine allows at best, the ceilings the server's figures are read against:

- the disk's group-commit limit: N x (os.write of a 4 KiB block + os.fsync) => fsyncs/s; a
  durable write path does at most (fsyncs/s x records per fsync) rows/s;
- the loopback round-trip limit: a blocking-socket ping-pong with a separate process (this
  module run as `python -m bench.kit.limits PORT` is that process's echo server); one
  connection does at most that many requests/s;
- the loopback throughput limit: one connection sending 1 MiB blocks to a separate process
  that reads and drops them (`python -m bench.kit.limits PORT sink`), MB/s: a bulk transfer
  between two processes of this machine moves at most that much;
- the disk's streaming limit: 1 MiB writes of one file, then one fsync, MB/s: what a
  received checkpoint can be written at.

Each runs for `seconds` after `warmup_s`; only what started after the warm-up counts."""

from __future__ import annotations

import array
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.kit.procs import HOST, start_helper
from bench.kit.report import percentile, progress

FSYNC_BLOCK_BYTES = 4096
FSYNC_FILE_MAX_BYTES = 64 * 1024 * 1024  # start a new file past this, as the WAL rolls segments
MAX_FSYNCS = 1_000_000
MAX_PINGS = 10_000_000
PING_SOCKET_TIMEOUT_S = 10.0
BULK_BLOCK_BYTES = 1024 * 1024
MAX_BULK_BLOCKS = 1_000_000
DISK_STREAM_BYTES_MAX = 1024 * 1024 * 1024


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


def _serve_until_parent_exits(serve: Callable[[socket.socket], None], port: int) -> int:
    """Listen on `port`, say where on stdout, and serve each connection in a thread until
    the parent process goes."""
    parent = os.getppid()
    listener = socket.create_server((HOST, port))
    listener.settimeout(0.5)
    print(json.dumps({"event": "listening", "port": listener.getsockname()[1]}), flush=True)
    while os.getppid() == parent:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    return 0


def echo_server_main(port: int) -> int:
    """A blocking echo server, one thread per connection; exits with its parent."""
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

    return _serve_until_parent_exits(serve, port)


def sink_server_main(port: int) -> int:
    """Reads and drops everything a connection sends; when the sender shuts its side down,
    answers with the byte count (8 bytes, big-endian) and closes. Exits with its parent."""
    def serve(conn: socket.socket) -> None:
        buffer = bytearray(BULK_BLOCK_BYTES)
        total = 0
        with conn:
            conn.settimeout(60.0)
            try:
                while True:
                    got = conn.recv_into(buffer)
                    if not got:
                        break
                    total += got
                conn.sendall(total.to_bytes(8, "big"))
            except OSError:
                return

    return _serve_until_parent_exits(serve, port)


def measure_loopback_throughput(port: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    """MB/s (2^20 bytes) of 1 MiB `sendall`s to the sink on `port`, one connection: the bytes
    the sink counted over the time from the first measured send until it answered. The warm-up
    goes over another connection first."""
    block = os.urandom(BULK_BLOCK_BYTES)

    def send_for(duration_s: float) -> tuple[int, float]:
        with socket.create_connection((HOST, port), timeout=PING_SOCKET_TIMEOUT_S) as sock:
            t0 = time.monotonic()
            deadline = t0 + duration_s
            for _ in range(MAX_BULK_BLOCKS):
                if time.monotonic() >= deadline:
                    break
                sock.sendall(block)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while len(answer) < 8:
                chunk = sock.recv(8 - len(answer))
                if not chunk:
                    raise ConnectionError("the sink closed the connection without a count")
                answer += chunk
            return int.from_bytes(answer, "big"), time.monotonic() - t0

    if warmup_s > 0:
        send_for(warmup_s)
    received, elapsed_s = send_for(seconds)
    return {"mb_per_s": received / BULK_BLOCK_BYTES / elapsed_s if elapsed_s > 0 else None,
            "bytes": received, "seconds": elapsed_s}


def measure_loopback_throughput_limit(work: Path, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Start the sink, stream to it, stop it; {} when that fails (the figure is then '-')."""
    sink = None
    try:
        sink = start_helper("sink", "bench.kit.limits", work / "sink.log", ("sink",))
        assert sink.port is not None
        return measure_loopback_throughput(sink.port, seconds, warmup_s)
    except Exception as exc:  # noqa: BLE001 - a missing ceiling must not stop the figures
        progress(f"loopback throughput measurement failed: {exc}")
        return {}
    finally:
        if sink is not None:
            sink.stop()


def measure_disk_stream(directory: Path, nbytes: int) -> dict[str, Any]:
    """MB/s (2^20 bytes) of `nbytes` written to a new file in `directory` in 1 MiB writes,
    then one fsync (the time includes it), as a received checkpoint is written; the file is
    removed."""
    nbytes = max(BULK_BLOCK_BYTES, min(nbytes, DISK_STREAM_BYTES_MAX))
    block = os.urandom(BULK_BLOCK_BYTES)
    path = directory / "stream_probe.bin"
    try:
        t0 = time.monotonic()
        with open(path, "wb", buffering=0) as out:
            written = 0
            while written < nbytes:
                written += out.write(block)
            t_written = time.monotonic()
            os.fsync(out.fileno())
        t1 = time.monotonic()
    finally:
        path.unlink(missing_ok=True)
    return {"mb_per_s": written / BULK_BLOCK_BYTES / (t1 - t0), "bytes": written,
            "write_s": t_written - t0, "fsync_s": t1 - t_written}


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
    if sys.argv[2:] == ["sink"]:
        sys.exit(sink_server_main(int(sys.argv[1])))
    sys.exit(echo_server_main(int(sys.argv[1])))
