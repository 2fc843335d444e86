"""Real `replicaset` processes for tests, benchmarks and the demo: started on 127.0.0.1 on
a free port, waited for until they answer, stopped by pid. Everything started here is the
caller's to stop."""

from __future__ import annotations

import random
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from replicaset.iproto.client import Client

START_TIMEOUT_S = 30.0
FREE_PORTS_LOW = 10_000
EPHEMERAL_PORTS_LOW_DEFAULT = 32_768
FREE_PORT_ATTEMPTS_MAX = 200
_ports = random.Random()  # its own generator: a seeded global one (chaos, hypothesis) stays as seeded
_handed_out: set[int] = set()  # never handed out twice by one process: a port asked for a server may still be free


def free_port() -> int:
    """A port of 127.0.0.1 free for TCP and UDP (a member's iproto and SWIM), for a server
    that may stop and start again on it. It is taken below the OS's ephemeral range: a
    port the kernel hands out (bind to 0) is one an outgoing connection may take as its
    local port while the server is down, and the server's restart then fails with
    "Address already in use" (a chaos run, seed 6262)."""
    high = _ephemeral_ports_low()
    for _ in range(FREE_PORT_ATTEMPTS_MAX):
        port = _ports.randrange(FREE_PORTS_LOW, high)
        if port in _handed_out:  # free now, but maybe for a server not started yet
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            try:
                tcp.bind(("127.0.0.1", port))
                udp.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no port of {FREE_PORTS_LOW}..{high - 1} free for TCP and UDP "
                       f"after {FREE_PORT_ATTEMPTS_MAX} attempts")


def _ephemeral_ports_low() -> int:
    """The first port of the OS's ephemeral range (Linux's default where it cannot be read)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_PORTS_LOW_DEFAULT
    return low if low > FREE_PORTS_LOW + 1000 else EPHEMERAL_PORTS_LOW_DEFAULT


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
    try:
        _wait_answering(proc, port, log_path, ssl_context)
    except BaseException:  # a test's time limit or Ctrl-C too: the caller never got the process to stop
        proc.kill()
        proc.wait()
        raise
    return proc, port


def _wait_answering(proc: subprocess.Popen[bytes], port: int, log_path: Path,
                    ssl_context: ssl.SSLContext | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"instance exited with {proc.returncode}; see {log_path}")
        try:
            with Client.connect("127.0.0.1", port, timeout_s=1.0, ssl_context=ssl_context) as client:
                client.ping()
            return
        except OSError:
            time.sleep(0.05)
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
