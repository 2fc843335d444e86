"""Real `replicaset` processes on 127.0.0.1, started and stopped by the tests."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from replicaset.demo import start_instance, stop_instance
from replicaset.iproto.client import Client


class Server:
    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self, *extra: str) -> Server:
        command = "serve" if (self.data_dir / "instance.toml").exists() else "bootstrap"
        self.proc, self.port = start_instance([command, "--data-dir", str(self.data_dir), *extra], self.log_path)
        return self

    def client(self, **kwargs: object) -> Client:
        return Client.connect("127.0.0.1", self.port, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> int:
        assert self.proc is not None
        return stop_instance(self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def log_events(self) -> list[dict]:
        events = []
        for line in self.log_path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return events


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        yield srv.start()
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(10)
