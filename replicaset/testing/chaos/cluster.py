"""The replica set under test: real members on 127.0.0.1, each peer link through the proxies.

Every member's listen port and every proxy port are chosen before any member starts, so each
member's config can say, in `[cluster] dial`, that a peer's registered address is dialed at
the proxy for that ordered pair. Member `n` bootstraps (n = 1) or joins through member 1 in
order, so its instance id is `n`. Clients of the harness talk to members directly.
"""

from __future__ import annotations

import signal
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicaset.iproto.client import Client
from replicaset.iproto.errors import ServerError
from replicaset.storage.schema import is_internal
from replicaset.testing.chaos.proxy import HOST, Network
from replicaset.testing.processes import free_port, start_instance, stop_instance

REPLICASET_UUID = "c4a05000-0000-4000-8000-00000000c4a0"
CLIENT_TIMEOUT_S = 5.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.1


class Process:
    """A member's process as the harness sees it: ours or Tarantool's, on `port`."""

    proc: subprocess.Popen[bytes] | None
    port: int

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"


class Signalled(ABC):
    """What the harness does to any member's process (ours or Tarantool's) and how it waits
    for the set to agree; a subclass keeps `members` (each with `proc`, `paused`, `running`)
    and reads a member's `vclock` and `rows`, raising one of `UNANSWERED` when it cannot."""

    members: list[Any]
    UNANSWERED: tuple[type[Exception], ...] = (OSError, ConnectionError)

    @abstractmethod
    def vclock(self, member: Any) -> dict[int, int]: ...

    @abstractmethod
    def rows(self, member: Any, table: str) -> list[list[Any]]: ...

    def kill(self, member: Any) -> None:
        """kill -9: the process ends now, whatever it was doing."""
        assert member.proc is not None
        member.proc.send_signal(signal.SIGKILL)
        member.proc.wait(STOP_TIMEOUT_S)
        member.paused = False

    def pause(self, member: Any) -> None:
        assert member.proc is not None
        member.proc.send_signal(signal.SIGSTOP)
        member.paused = True

    def resume(self, member: Any) -> None:
        if member.running and member.paused:
            member.proc.send_signal(signal.SIGCONT)
        member.paused = False

    def snapshot(self, tables: list[str]) -> list[tuple[dict[int, int], dict[str, list[list[Any]]]] | None]:
        """Each member's vclock and tables, read together (None for a member not answering)."""
        views: list[tuple[dict[int, int], dict[str, list[list[Any]]]] | None] = []
        for member in self.members:
            try:
                views.append((self.vclock(member), {t: self.rows(member, t) for t in tables}))
            except self.UNANSWERED:
                views.append(None)
        return views

    def wait_converged(self, tables: list[str], timeout_s: float) -> tuple[float | None, list[Any]]:
        """Seconds until every member holds the same vclock and the same `tables` (None if
        not within `timeout_s`), and the last views read."""
        started = time.monotonic()
        while True:
            views = self.snapshot(tables)
            if all(v is not None for v in views) and all(v == views[0] for v in views):
                return time.monotonic() - started, views
            if time.monotonic() - started > timeout_s:
                return None, views
            time.sleep(POLL_S)


@dataclass
class Member(Process):
    n: int
    port: int
    data_dir: Path
    log_path: Path
    config_path: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    extra_config: str = ""  # lines added for its next start (a clock skew)
    on_tmpfs: bool = False  # its data directory is a small file system of its own (the full-disk fault)

    def client(self, timeout_s: float = CLIENT_TIMEOUT_S) -> Client:
        return Client.connect(HOST, self.port, timeout_s=timeout_s)


@dataclass
class Cluster(Signalled):
    """`size` members under `root`, with `config` (TOML lines, no `[cluster]` section) for
    every member; `start` brings them up, `stop` ends every process it started."""

    root: Path
    size: int
    seed: int
    config: str = ""
    members: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.network = Network(self.seed)
        ports = [free_port() for _ in range(self.size)]
        for n, port in enumerate(ports, start=1):
            self.members.append(Member(n=n, port=port, data_dir=self.root / f"m{n}", log_path=self.root / f"m{n}.log",
                                       config_path=self.root / f"m{n}.toml"))
        for src in self.members:
            for dst in self.members:
                if src is not dst:
                    self.network.add(src.n, dst.n, dst.port)

    def member(self, n: int) -> Member:
        return self.members[n - 1]

    def write_config(self, member: Member) -> Path:
        """The set's config, the member's own lines, and its dial map (every peer at its proxy)."""
        dial = ", ".join(f'"{peer.address}" = "{HOST}:{self.network.port(member.n, peer.n)}"'
                         for peer in self.members if peer is not member)
        member.config_path.write_text(f"{self.config}\n{member.extra_config}\n[cluster]\n{CLUSTER_CONFIG}"
                                      f"dial = {{ {dial} }}\n")
        return member.config_path

    def start(self, setup: list[str]) -> None:
        """Proxies, member 1, the `setup` statements on it, then every other member joined
        through member 1 in turn."""
        self.network.start()
        first = self.members[0]
        first.proc, _ = start_instance(["bootstrap", "--uuid", REPLICASET_UUID, "--data-dir", str(first.data_dir),
                                        "--config", str(self.write_config(first))], first.log_path, port=first.port)
        with first.client() as client:
            for sql in setup:
                client.execute(sql, options={"consistency": "one"})
        for member in self.members[1:]:
            self.join(member, first)
        for member in self.members:
            instance_id = self.info(member)["id"]
            if instance_id != member.n:
                raise RuntimeError(f"member {member.n} has instance id {instance_id}")

    def join(self, member: Member, through: Member) -> int:
        """`replicaset join` of `member` (a fresh data directory) through `through`; its id."""
        member.proc, _ = start_instance(["join", "--uuid", REPLICASET_UUID, "--peer", through.address,
                                         "--data-dir", str(member.data_dir), "--config", str(self.write_config(member))],
                                        member.log_path, port=member.port)
        return int(self.info(member)["id"])

    # ------------------------------------------------------------ processes

    def restart(self, member: Member) -> None:
        """`serve` again on the same port with its (possibly new) config."""
        member.proc, _ = start_instance(["serve", "--data-dir", str(member.data_dir),
                                         "--config", str(self.write_config(member))], member.log_path, port=member.port)

    def stop(self) -> list[int | None]:
        """Every member stopped (SIGTERM, then SIGKILL), then the proxies; the exit codes."""
        codes = []
        for member in self.members:
            self.resume(member)
            codes.append(stop_instance(member.proc, STOP_TIMEOUT_S) if member.proc is not None else None)
        self.network.stop()
        return codes

    # ------------------------------------------------------------ state

    def info(self, member: Member) -> dict[str, Any]:
        with member.client() as client:
            return client.eval("box.info")[0]

    def running_member(self, besides: Member, timeout_s: float) -> Member | None:
        """A live member other than `besides` whose `box.info.status` is `running`, the first
        in order, waited for up to `timeout_s`: a member still loading, or orphan after a
        re-join of its own, refuses a removal or a joiner's registration as a write."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = next((m for m in self._live(besides) if self._is_running(m)), None)
            if found is not None or time.monotonic() > deadline:
                return found
            time.sleep(POLL_S)

    def not_running(self, besides: Member, timeout_s: float) -> list[int]:
        """The live members other than `besides` whose status is still not `running` after
        up to `timeout_s`: a joiner catching up votes for nothing yet (it must first hold
        what its registration's voters held), so a removal waits for it, as an operator
        would, or it may find no quorum until the removed member is back."""
        deadline = time.monotonic() + timeout_s
        while True:
            behind = [m.n for m in self._live(besides) if not self._is_running(m)]
            if not behind or time.monotonic() > deadline:
                return behind
            time.sleep(POLL_S)

    def _live(self, besides: Member) -> list[Member]:
        return [m for m in self.members if m is not besides and m.running and not m.paused]

    def _is_running(self, member: Member) -> bool:
        try:
            return self.info(member)["status"] == "running"
        except (OSError, ServerError):
            return False

    def registered(self, member: Member, instance_id: int) -> bool:
        """Whether `member`'s `_cluster` still holds `instance_id`."""
        with member.client() as client:
            return bool(client.execute("SELECT 1 FROM _cluster WHERE id = ?", [instance_id]).rows)

    def vclock(self, member: Member) -> dict[int, int]:
        """The replicated part of the member's vclock (origin 0 counts its local rows)."""
        return {int(o): lsn for o, lsn in self.info(member)["vclock"].items() if int(o) != 0}

    def rows(self, member: Member, table: str) -> list[list[Any]]:
        with member.client() as client:
            return client.execute(f"SELECT * FROM {table} ORDER BY 1").rows

    def tables(self, member: Member) -> list[str]:
        """The replicated tables the member holds: clients' and `_cluster`."""
        with member.client() as client:
            found = client.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").rows
        return [name for (name,) in found if not is_internal(name)]


CLUSTER_CONFIG = "gossip_interval_ms = 200\nsuspect_timeout_ms = 1000\ndead_timeout_ms = 2000\n"
