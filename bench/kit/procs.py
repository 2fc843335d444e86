"""Processes a benchmark starts: our server (through `replicaset.testing.processes`, as the
tests start it), Tarantool, and the bench's own helper servers. Each runs on 127.0.0.1 with its
output in a log file, and is stopped by its pid, never by name: other work on the machine may
run the same binaries.

Children must run the server of the checkout being measured, whatever the current directory:
`pin_children_to_this_checkout()` puts it first on their import path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from bench.kit import REPO
from bench.kit.report import progress
from replicaset.testing.processes import start_instance, stop_instance

HOST = "127.0.0.1"
STOP_TIMEOUT_S = 15.0
HELPER_START_TIMEOUT_S = 30.0


def pin_children_to_this_checkout() -> None:
    """Make every child's `python -m replicaset.cli` (and `-m bench...`) import this checkout:
    the virtualenv's editable install may point at another one, and a child started from
    another directory would measure that server instead."""
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")


class Proc:
    """One process the bench started: its Popen, log file and pid; `port` once it listens.
    `started_ns` and `started_wall` are taken just before it was started, for figures timed
    from process start."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log_path: Path, *, port: int | None,
                 started_ns: int, started_wall: float) -> None:
        self.name = name
        self.proc = proc
        self.pid = proc.pid
        self.log_path = log_path
        self.port = port
        self.started_ns = started_ns
        self.started_wall = started_wall

    @classmethod
    def spawn(cls, name: str, argv: list[str], log_path: Path, cwd: Path | None = None) -> Proc:
        """Start `argv` with stdout and stderr in `log_path`; returns at once."""
        started_wall, started_ns = time.time(), time.monotonic_ns()
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=str(cwd) if cwd else None)
        return cls(name, proc, log_path, port=None, started_ns=started_ns, started_wall=started_wall)

    @classmethod
    def ours(cls, name: str, args: list[str], log_path: Path, port: int | None = None) -> Proc:
        """`replicaset <args>` on `port` (a free one by default), returned once it answers a
        ping; a member restarted on its old port keeps the address its peers know."""
        started_wall, started_ns = time.time(), time.monotonic_ns()
        proc, port = start_instance(args, log_path, port)
        return cls(name, proc, log_path, port=port, started_ns=started_ns, started_wall=started_wall)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or "(no log)"

    def wait_for_line(self, predicate: Callable[[str], Any], timeout_s: float) -> Any:
        """Poll the log until a line makes `predicate` return something truthy, and return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in self.log_text().splitlines():
                found = predicate(line)
                if found:
                    return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before it was ready:\n{self.tail()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} was not ready after {timeout_s:.0f} s:\n{self.tail()}")

    def stop(self) -> int | None:
        """SIGTERM the pid, wait, SIGKILL the same pid only if it did not exit."""
        running = self.proc.poll() is None
        code = stop_instance(self.proc, STOP_TIMEOUT_S)
        if running and code == -signal.SIGKILL:
            progress(f"{self.name} (pid {self.pid}) ignored SIGTERM for {STOP_TIMEOUT_S:.0f} s: SIGKILL")
        return code


def _listening_port(line: str) -> int | None:
    """The port of a helper's `{"event": "listening", "port": N}` line."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if isinstance(event, dict) and event.get("event") == "listening" and "port" in event:
        return int(event["port"])
    return None


def start_helper(name: str, module: str, log_path: Path, args: tuple[str, ...] = ()) -> Proc:
    """`python -m <module> 0 [args]`: one of the bench's own servers, on a port it picks and
    prints."""
    helper = Proc.spawn(name, [sys.executable, "-m", module, "0", *args], log_path, cwd=REPO)
    try:
        helper.port = helper.wait_for_line(_listening_port, HELPER_START_TIMEOUT_S)
    except Exception:
        helper.stop()
        raise
    return helper


def read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def log_problems(lines: list[str]) -> list[str]:
    """The lines of one of our JSON logs worth a look: warnings, errors, and anything that is not
    JSON (a traceback)."""
    problems = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            problems.append(line)
            continue
        if isinstance(event, dict) and event.get("level") not in ("info", "debug"):
            problems.append(line)
    return problems


def log_events(lines: list[str]) -> list[dict[str, Any]]:
    """The JSON events of one of our logs, in order; other lines are left out."""
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def first_events(path: Path) -> dict[str, dict[str, Any]]:
    """The first JSON log event of each name in one of our logs."""
    events: dict[str, dict[str, Any]] = {}
    for event in log_events(read_lines(path)):
        if "event" in event:
            events.setdefault(event["event"], event)
    return events
