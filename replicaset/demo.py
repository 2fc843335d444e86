"""`replicaset demo`: start a local instance, run a short mixed workload, show box.info.

It uses only what a user would: the CLI to start the server, the iproto client to write
and read, and the console to show `box.info`; everything it starts, it stops.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replicaset.console import to_yaml
from replicaset.iproto.client import Client

START_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_instance(args: list[str], log_path: Path, port: int | None = None) -> tuple[subprocess.Popen[bytes], int]:
    """Start `replicaset <args> --listen 127.0.0.1:<port>` (a free one by default) and wait
    until it answers."""
    port = port or free_port()
    log = open(log_path, "ab")
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
            with Client.connect("127.0.0.1", port, timeout_s=1.0) as client:
                client.ping()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"instance did not answer within {START_TIMEOUT_S} s; see {log_path}")


def stop_instance(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def run_workload(client: Client, rows: int, seed: int = 7) -> dict[str, int]:
    rng = random.Random(seed)
    client.execute("CREATE TABLE IF NOT EXISTS accounts(id INTEGER PRIMARY KEY, owner TEXT UNIQUE, balance INTEGER NOT NULL)")
    counts = {"insert": 0, "update": 0, "delete": 0}
    ids: list[int] = []
    for i in range(rows):
        roll = rng.random()
        if roll < 0.6 or not ids:
            ids.extend(client.execute("INSERT INTO accounts(owner, balance) VALUES (?, ?)", [f"owner-{i}", rng.randint(0, 1000)]).autoincrement_ids)
            counts["insert"] += 1
        elif roll < 0.9:
            client.execute("UPDATE accounts SET balance = balance + ? WHERE id = ?", [rng.randint(-50, 50), rng.choice(ids)])
            counts["update"] += 1
        else:
            client.execute("DELETE FROM accounts WHERE id = ?", [ids.pop(rng.randrange(len(ids)))])
            counts["delete"] += 1
    return counts


def run_demo(data_dir: Path | None, rows: int) -> int:
    with tempfile.TemporaryDirectory(prefix="replicaset-demo-") as tmp:
        root = Path(data_dir) if data_dir else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        instance_dir = root / "i1"
        args = ["serve", "--data-dir", str(instance_dir)] if (instance_dir / "instance.toml").exists() else ["bootstrap", "--data-dir", str(instance_dir)]
        print(f"starting one instance in {instance_dir}")
        proc, port = start_instance(args, root / "i1.log")
        try:
            with Client.connect("127.0.0.1", port) as client:
                started = time.monotonic()
                counts = run_workload(client, rows)
                elapsed = time.monotonic() - started
                total = client.execute("SELECT count(*), sum(balance) FROM accounts").rows[0]
                print(f"workload: {counts} in {elapsed:.2f} s ({rows / elapsed:,.0f} statements/s)")
                print(f"accounts: {total[0]} rows, total balance {total[1]}")
                print("box.info:")
                print(to_yaml(client.eval("box.info")[0]), end="")
        finally:
            code = stop_instance(proc)
        print(f"instance stopped (exit code {code}); logs in {root / 'i1.log'}" + ("" if data_dir else " (removed)"))
        return 0 if code == 0 else 1
