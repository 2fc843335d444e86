"""A Tarantool 2.6 replica set under the same harness, for the side-by-side figures.

Three (or five) instances, master-master full mesh, each instance's `replication` list
pointing at the proxy for each ordered pair, so the proxies cut and delay Tarantool's links
as they do ours. `synchro_quorum` makes the workloads' spaces synchronous (`is_sync`,
`replication_synchro_quorum`); Tarantool 2.6 then takes synchronous writes from one instance
at a time (the owner of its limbo), so every worker writes through member 1. Tarantool 2.6's
SQL over iproto has no interactive transactions: a bank transfer is a Lua function called
with CALL, defined in the init script. The set's key is the inserted value itself:
autoincrement ids from two masters would collide and stop replication, which is a schema
choice, not what the set workload measures. Members expose what `schedule.Nemesis` and the
run need: `member`, `kill`, `restart`, `pause`, `resume`, `network`, `stop`, `tables`,
`wait_converged`.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tarantool

from replicaset.testing.chaos.cluster import POLL_S, STOP_TIMEOUT_S, Process, Signalled
from replicaset.testing.chaos.proxy import HOST, Network
from replicaset.testing.processes import free_port

START_TIMEOUT_S = 60.0
READY = "CHAOS_READY"
TABLES = ("acct", "chaos_set")

INIT = """
box.cfg{{
    listen = '{host}:{port}',
    replication = {{{peers}}},
    replication_connect_quorum = {connect_quorum},
    replication_connect_timeout = 10,
    replication_timeout = 0.5,
    wal_mode = 'write',
    memtx_memory = 128 * 1024 * 1024,
    work_dir = '{work_dir}',{synchro}
}}
box.once('chaos_schema', function()
    box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
    box.execute('CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)')
    box.execute('CREATE TABLE chaos_set(id INTEGER PRIMARY KEY, v INTEGER NOT NULL)')
    for id = 1, {accounts} do box.space.ACCT:insert{{id, {opening}}} end
    {make_sync}
end)
-- One transfer, all or nothing: a guard on the balance, then both updates in one transaction.
function chaos_transfer(src, dst, amount)
    box.begin()
    local from = box.space.ACCT:get(src)
    if from == nil or from[2] < amount then
        box.rollback()
        return 0
    end
    box.space.ACCT:update(src, {{{{'-', 2, amount}}}})
    box.space.ACCT:update(dst, {{{{'+', 2, amount}}}})
    box.commit()
    return 2
end
require('log').info('{ready}')
"""
SYNCHRO = """
    replication_synchro_quorum = {quorum},
    replication_synchro_timeout = 2,"""
MAKE_SYNC = ("for _, name in ipairs({'ACCT', 'CHAOS_SET'}) do "
             "local s = box.space._space:get(box.space[name].id); local flags = s[6]; flags.is_sync = true; "
             "box.space._space:update(s[1], {{'=', 6, flags}}) end")


def find_tarantool() -> str | None:
    return shutil.which("tarantool")


@dataclass
class TarantoolMember(Process):
    n: int
    port: int
    data_dir: Path
    log_path: Path
    init_path: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False

    def connect(self, timeout_s: float = 5.0) -> tarantool.Connection:
        return tarantool.Connection(HOST, self.port, socket_timeout=timeout_s, reconnect_max_attempts=0,
                                    connect_now=True, fetch_schema=False)


@dataclass
class TarantoolCluster(Signalled):
    root: Path
    size: int
    seed: int
    binary: str
    synchro_quorum: int | None = None
    accounts: int = 8
    opening: int = 100
    members: list[TarantoolMember] = field(default_factory=list)
    UNANSWERED = (OSError, tarantool.error.Error)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.network = Network(self.seed)
        for n in range(1, self.size + 1):
            self.members.append(TarantoolMember(n=n, port=free_port(), data_dir=self.root / f"t{n}",
                                                log_path=self.root / f"t{n}.log", init_path=self.root / f"t{n}.lua"))
        for src in self.members:
            for dst in self.members:
                if src is not dst:
                    self.network.add(src.n, dst.n, dst.port)

    def member(self, n: int) -> TarantoolMember:
        return self.members[n - 1]

    def start(self, setup: list[str]) -> None:
        """Every instance at once (a Tarantool mesh bootstraps together); `setup` is ignored:
        the init script makes the spaces."""
        self.network.start()
        for member in self.members:
            member.data_dir.mkdir(parents=True, exist_ok=True)
            # Itself too (directly): the bootstrap leader is the smallest UUID among the
            # instances each sees, itself included, or they wait for each other.
            peers = ", ".join([f"'{member.address}'"] + [f"'{HOST}:{self.network.port(member.n, peer.n)}'"
                                                         for peer in self.members if peer is not member])
            synchro = SYNCHRO.format(quorum=self.synchro_quorum) if self.synchro_quorum else ""
            member.init_path.write_text(INIT.format(
                host=HOST, port=member.port, peers=peers, connect_quorum=self.size, work_dir=member.data_dir,
                synchro=synchro, make_sync=MAKE_SYNC if self.synchro_quorum else "", accounts=self.accounts,
                opening=self.opening, ready=READY))
            self._spawn(member)
        for member in self.members:
            self._wait_ready(member)

    def _spawn(self, member: TarantoolMember) -> None:
        with open(member.log_path, "ab") as log:
            member.proc = subprocess.Popen([self.binary, str(member.init_path)], stdout=log, stderr=log,
                                           cwd=member.data_dir)

    def _wait_ready(self, member: TarantoolMember) -> None:
        """Until the instance answers and holds the spaces (the init script ran, or the
        snapshot that made them arrived)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if member.proc is not None and member.proc.poll() is not None:
                raise RuntimeError(f"tarantool t{member.n} exited with {member.proc.returncode}; see {member.log_path}")
            try:
                conn = member.connect(1.0)
                try:
                    conn.execute("SELECT count(*) FROM acct")
                    return
                finally:
                    conn.close()
            except (OSError, tarantool.error.Error):
                time.sleep(POLL_S)
        raise RuntimeError(f"tarantool t{member.n} was not ready within {START_TIMEOUT_S} s; see {member.log_path}")

    def restart(self, member: TarantoolMember) -> None:
        self._spawn(member)
        self._wait_ready(member)

    def stop(self) -> list[int | None]:
        codes: list[int | None] = []
        for member in self.members:
            self.resume(member)
            if member.proc is None:
                codes.append(None)
                continue
            if member.proc.poll() is None:
                member.proc.terminate()
                try:
                    member.proc.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    member.proc.kill()
                    member.proc.wait()
            codes.append(member.proc.returncode)
        self.network.stop()
        return codes

    def tables(self, member: TarantoolMember) -> list[str]:
        return list(TABLES)

    def _query(self, member: TarantoolMember, run: Any) -> Any:
        conn = member.connect()
        try:
            return run(conn)
        finally:
            conn.close()

    def vclock(self, member: TarantoolMember) -> dict[int, int]:
        raw = self._query(member, lambda c: c.eval("return box.info.vclock").data[0])
        items = raw.items() if isinstance(raw, dict) else enumerate(raw, start=1)
        return {int(o): int(lsn) for o, lsn in items if int(o) != 0 and lsn}

    def rows(self, member: TarantoolMember, table: str) -> list[list[Any]]:
        return self._query(member, lambda c: [list(r) for r in c.execute(f"SELECT * FROM {table} ORDER BY 1").data])
