"""Real `replicaset` processes on 127.0.0.1, started and stopped by the tests."""

from __future__ import annotations

import json
import signal
import ssl
import time
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from replicaset.testing.processes import start_instance, stop_instance
from replicaset.iproto.client import Client
from replicaset.iproto.errors import ServerError


# A new replica set's first rows: CREATE TABLE _cluster, then the bootstrap member's row.
BOOTSTRAP_ROWS = 2


class Server:
    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.ssl_context: ssl.SSLContext | None = None  # for an instance whose port speaks TLS

    def start(self, *extra: str) -> Server:
        command = "serve" if (self.data_dir / "instance.toml").exists() else "bootstrap"
        self.proc, self.port = start_instance(
            [command, "--data-dir", str(self.data_dir), *extra], self.log_path, port=self.port or None,
            ssl_context=self.ssl_context,
        )
        return self

    def client(self, **kwargs: object) -> Client:
        return Client.connect("127.0.0.1", self.port, ssl_context=self.ssl_context, **kwargs)  # type: ignore[arg-type]

    def stop(self, signum: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        return stop_instance(self.proc, signum=signum)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """SIGSTOP for the block, SIGCONT after it whatever happens: a hung member, alive,
        its port still accepting connections, answering nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)

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


@contextmanager
def running(tmp_path: Path, *args: str) -> Iterator[Server]:
    """A fresh single instance in `tmp_path`, started with `args`, killed at the end."""
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        yield srv.start(*args)
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.proc.kill()
            srv.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running(tmp_path) as srv:
        yield srv


REPLICASET_UUID = "8c5e4a52-0000-4000-8000-00000000abcd"
# Every member checks its cores' invariants after every event (TigerBeetle style). Writes
# are ONE unless a test asks for a level: most tests here are about replication itself,
# and those of quorum writes name their level (tests/server/test_quorum*.py).
FAST_CONFIG = ("replication_timeout = 0.1\nreplication_connect_timeout = 3\ndebug.check_invariants = true\n"
               'replication.default_write_consistency = "one"\n')
WAIT_S = 20.0
POLL_S = 0.05

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout_s: float = WAIT_S) -> T:
    """Poll `check` until it returns something true, and return that; fail naming `what`
    when `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s (last: {value!r})")
        time.sleep(POLL_S)


WAITING_S = 0.3  # how long a request that must wait for something is seen waiting


def answer_after(request: Callable[[], object], meanwhile: Callable[[], None], timeout_s: float) -> object:
    """`request()` in a thread of its own, which must still be waiting `WAITING_S` later;
    then `meanwhile()`, what it waits for; its answer, or the ServerError it got."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(request())
        except ServerError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=run)
    waiting.start()
    try:
        time.sleep(WAITING_S)
        assert waiting.is_alive(), f"the request did not wait: {outcome}"
        meanwhile()
    finally:
        waiting.join(timeout_s)
    assert len(outcome) == 1, f"no answer within {timeout_s} s"
    return outcome[0]


class ReplicaSet:
    """Members started by the test: `bootstrap` first, then `join` through any member."""

    def __init__(self, root: Path, extra_config: str = "", ssl_context: ssl.SSLContext | None = None) -> None:
        self.root = root
        self.config = root / "fast.toml"
        self.config.write_text(FAST_CONFIG + extra_config)
        self.members: list[Server] = []
        self.ssl_context = ssl_context  # how the test reaches members whose config has [tls]

    def bootstrap(self) -> Server:
        server = Server(self.root / "m1", self.root / "m1.log")
        server.ssl_context = self.ssl_context
        server.start("--uuid", REPLICASET_UUID, "--config", str(self.config))
        self.members.append(server)
        return server

    def join(self, through: Server, config: Path | None = None) -> Server:
        server = self._next_server()
        self._start_join(server, through, config)
        return server

    def join_at_once(self, *throughs: Server) -> list[Server | RuntimeError]:
        """One join through each of `throughs`, all started together; each joiner, or
        why it did not start."""
        servers = [self._next_server() for _ in throughs]

        def start(pair: tuple[Server, Server]) -> Server | RuntimeError:
            try:
                self._start_join(*pair, None)
                return pair[0]
            except RuntimeError as exc:
                return exc

        with ThreadPoolExecutor(len(throughs)) as pool:
            return list(pool.map(start, zip(servers, throughs)))

    def _next_server(self) -> Server:
        n = len(self.members) + 1
        server = Server(self.root / f"m{n}", self.root / f"m{n}.log")
        server.ssl_context = self.ssl_context
        self.members.append(server)
        return server

    def _start_join(self, server: Server, through: Server, config: Path | None) -> None:
        server.proc, server.port = start_instance(
            ["join", "--uuid", REPLICASET_UUID, "--peer", f"127.0.0.1:{through.port}",
             "--data-dir", str(server.data_dir), "--config", str(config or self.config)],
            server.log_path, ssl_context=self.ssl_context,
        )

    def config_with(self, name: str, extra: str) -> Path:
        """A config file for some members: the set's own plus `extra` (TOML lines)."""
        path = self.root / f"{name}.toml"
        path.write_text(self.config.read_text() + extra)
        return path

    def info(self, server: Server) -> dict:
        with server.client() as client:
            return client.eval("box.info")[0]

    def wait_status(self, server: Server, status: str) -> None:
        wait_for(lambda: self.info(server)["status"] == status, f"box.info.status {status}")

    def wait_converged(self, members: list[Server] | None = None) -> dict:
        """Equal vclocks on every running member; returns that vclock."""
        members = members or [m for m in self.members if m.proc and m.proc.poll() is None]
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                # origin 0 counts each member's local rows: only the replicated part agrees
                clocks = [{o: lsn for o, lsn in self.info(m)["vclock"].items() if o != 0} for m in members]
            except OSError:  # a member restarting (a re-join happens in the same process)
                clocks = [None, {}]
            if all(c == clocks[0] for c in clocks):
                return clocks[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"vclocks did not converge: {clocks}")
            time.sleep(0.05)

    def wait_full_mesh(self) -> dict:
        """Every running member follows every other one, both ways; returns member 1's view."""
        members = [m for m in self.members if m.proc and m.proc.poll() is None]
        deadline = time.monotonic() + WAIT_S
        while True:
            views = [self.info(m)["replication"] for m in members]
            links = [
                (entry.get("upstream", {}).get("status"), entry.get("downstream", {}).get("status"))
                for view, me in zip(views, members)
                for peer_id, entry in view.items()
                if peer_id != self.info(me)["id"]
            ]
            if links and all(link == ("follow", "follow") for link in links):
                return views[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"the mesh did not form: {links}")
            time.sleep(0.05)

    def stop_all(self) -> None:
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                member.proc.kill()
                member.proc.wait(10)


@pytest.fixture
def replicaset_factory(tmp_path: Path) -> Iterator[Callable[..., ReplicaSet]]:
    """The test's replica set with config lines of its own for every member, made by the
    test (one per test: they share `tmp_path`); its members are stopped at the end."""
    made: list[ReplicaSet] = []

    def make(extra_config: str = "", ssl_context: ssl.SSLContext | None = None) -> ReplicaSet:
        made.append(ReplicaSet(tmp_path, extra_config, ssl_context))
        return made[-1]

    try:
        yield make
    finally:
        for rs in made:
            rs.stop_all()


@pytest.fixture
def replicaset(replicaset_factory: Callable[..., ReplicaSet]) -> ReplicaSet:
    return replicaset_factory()


SYNCHRO_TIMEOUT_S = 2.0
QUORUM = {"consistency": "quorum"}


def quorum_set_of(replicaset_factory: Callable[..., ReplicaSet], size: int,
                  config: str = "") -> tuple[ReplicaSet, list[Server]]:
    """`size` members with a short `synchro_timeout_s`, `config` besides, and table `kv`,
    each joined through the one before it, converged."""
    rs = replicaset_factory(f"replication.synchro_timeout_s = {SYNCHRO_TIMEOUT_S}\n{config}")
    members = [rs.bootstrap()]
    with members[0].client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER DEFAULT 0)")
    for _ in range(size - 1):
        members.append(rs.join(members[-1]))
    rs.wait_converged()
    return rs, members


@pytest.fixture
def quorum_set(replicaset_factory: Callable[..., ReplicaSet]) -> tuple[ReplicaSet, list[Server]]:
    """Three members for quorum writes (tests/server/test_quorum*.py)."""
    return quorum_set_of(replicaset_factory, 3)


def write_kv(member: Server, first: int, count: int, value: str) -> None:
    """Rows `first .. first + count - 1` of `kv`, one autocommit each."""
    with member.client() as client:
        for k in range(first, first + count):
            client.execute("INSERT INTO kv(k, v) VALUES (?, ?)", [k, value])


def kv_count(member: Server) -> int:
    with member.client() as client:
        return client.execute("SELECT count(*) FROM kv").rows[0][0]
