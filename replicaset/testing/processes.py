"""Real `replicaset` processes for tests, benchmarks and the demo: started on 127.0.0.1 on
a free port, waited for until they answer, stopped by pid. Everything started here is the
caller's to stop."""

from __future__ import annotations

import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from replicaset.iproto.client import Client

START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_instance(args: list[str], log_path: Path, port: int | None = None, *,
                   ssl_context: ssl.SSLContext | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start `replicaset <args> --listen 127.0.0.1:<port>` (a free one by default) and wait
    until it answers (over TLS with `ssl_context`, for an instance configured with [tls])."""
    port = port or free_port()
    with open(log_path, "ab") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "replicaset.cli", *args, "--listen", f"127.0.0.1:{port}"],
            stdout=log,
            stderr=log,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"instance exited with {proc.returncode}; see {log_path}")
        try:
            with Client.connect("127.0.0.1", port, timeout_s=1.0, ssl_context=ssl_context) as client:
                client.ping()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"instance did not answer within {START_TIMEOUT_S} s; see {log_path}")


def stop_instance(
    proc: subprocess.Popen[bytes], timeout_s: float = 10.0, *, signum: signal.Signals = signal.SIGTERM
) -> int:
    """Ask the instance to stop with `signum` (SIGTERM and SIGINT both stop it cleanly);
    kill it if it is still running after `timeout_s`."""
    if proc.poll() is None:
        proc.send_signal(signum)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
