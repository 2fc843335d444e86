"""The two replica sets the replica-set figures compare: three members of ours, started as
`replicaset demo` does (bootstrap, then each joins through the last), and three Tarantool 2.6
instances in a master-master full mesh, started at once. Both offer the same surface (`name`,
`ports`, `pids()`, `vclock()`, `status()`, `stop()`, `log_notes()`), so a scenario drives
either without knowing which it has.

Each comes in the variant the quorum benchmark needs: ours with a default write consistency
(every write at `quorum` without the client asking, since the connector cannot send the OPTIONS
map), Tarantool with synchronous replication (`replication_synchro_quorum`, `kv` made
`is_sync`). After a run, `divergent_keys` says which rows the members do not agree on."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from bench.kit.client import SQL_CREATE, connect
from bench.kit.procs import HOST, Proc, log_events, log_problems, read_lines
from bench.kit.report import MIB, load_average, progress
from bench.kit.tarantool import spawn_tarantool, wait_ready
from replicaset.iproto.client import Client
from replicaset.testing.processes import free_port

START_TIMEOUT_S = 60.0
CONVERGE_TIMEOUT_S = 120.0
CLIENT_SOCKET_TIMEOUT_S = 30.0
TARANTOOL_MEMTX_BYTES = 512 * MIB
OUR_OPTIONS: dict[str, Any] = {"wal_mode": "write", "replication_timeout": 0.2, "replication_connect_timeout": 10}
OUR_CONFIG = 'wal_mode = "write"\nreplication_timeout = 0.2\nreplication_connect_timeout = 10\n'  # OUR_OPTIONS


def toml_value(value: Any) -> str:
    """A TOML scalar or list for our config file (bools lower-case, strings JSON-quoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def our_config_text(options: Mapping[str, Any]) -> str:
    """OUR_OPTIONS overridden or extended by `options`, by their dotted names
    (`wal_max_size`, `gc.interval_s`, `replication.default_write_consistency`): top-level
    names first, then one table per section."""
    merged = {**OUR_OPTIONS, **options}
    top = [f"{name} = {toml_value(v)}" for name, v in merged.items() if "." not in name]
    sections: dict[str, list[str]] = {}
    for name, v in merged.items():
        if "." in name:
            section, _, key = name.partition(".")
            sections.setdefault(section, []).append(f"{key} = {toml_value(v)}")
    text = "".join(line + "\n" for line in top)
    for section, lines in sections.items():
        text += f"[{section}]\n" + "".join(line + "\n" for line in lines)
    return text


class Members(Protocol):
    """What a load needs of a set: where its members listen, their pids for CPU time."""

    name: str
    ports: list[int]

    def pids(self) -> list[int]: ...


class ReplicaSet(Members, Protocol):
    def vclock(self, port: int) -> dict[int, int]: ...
    def status(self, port: int) -> str: ...


def norm_vclock(raw: Any) -> dict[int, int]:
    """A vclock from either server as {id: lsn}, without component 0 and zero entries."""
    if isinstance(raw, list):
        items = [(i + 1, v) for i, v in enumerate(raw)]
    elif isinstance(raw, dict):
        items = [(int(k), v) for k, v in raw.items()]
    else:
        return {}
    return {k: int(v) for k, v in items if k != 0 and v}


class OurSet:
    """Three members of ours (or `size`), started as `replicaset demo` does (bootstrap, join
    via the last)."""

    def __init__(self, work: Path, *, name: str = "ours", consistency: str = "one", trace_file: str = "",
                 options: Mapping[str, Any] | None = None, size: int = 3) -> None:
        """`trace_file`: each member writes the driver's trace there, in its data directory.
        `options`: more config options by dotted name (`gc.interval_s`), over these."""
        self.name = name
        self.size = size
        self.work = work / name
        self.work.mkdir()
        self.config = self.work / "config.toml"
        merged: dict[str, Any] = {"replication.default_write_consistency": consistency}
        if trace_file:
            merged["debug.trace_file"] = trace_file
        merged.update(options or {})
        self.config.write_text(our_config_text(merged))
        self.rs_uuid = str(uuid.uuid4())
        self.members: list[Proc] = []
        self.ports: list[int] = []
        self.startup_note: str | None = None

    def _start_member(self, n: int, args: list[str]) -> None:
        member = Proc.ours(f"ours m{n}", [*args, "--uuid", self.rs_uuid, "--data-dir", str(self.data_dir(n)),
                                          "--config", str(self.config)], self.work / f"m{n}.log")
        self.members.append(member)
        assert member.port is not None
        self.ports.append(member.port)

    def start(self) -> None:
        self._start_member(1, ["bootstrap"])
        for n in range(2, self.size + 1):
            self._start_member(n, ["join", "--peer", f"{HOST}:{self.ports[-1]}"])
        # A member that sees a new member join may go back to `loading` until it has reached
        # the new quorum: wait until all three are running before the DDL, and say so.
        t0 = time.monotonic()
        seen: list[list[str]] = []
        while True:
            statuses = [self.status(port) for port in self.ports]
            if not seen or statuses != seen[-1]:
                seen.append(statuses)
            if all(s == "running" for s in statuses):
                break
            if time.monotonic() - t0 > START_TIMEOUT_S:
                raise RuntimeError(f"members not all running after {START_TIMEOUT_S:.0f} s: {seen}")
            time.sleep(0.01)
        if len(seen) > 1:
            self.startup_note = (f"after the third member joined, statuses went {' -> '.join(map(str, seen))} "
                                 f"over {time.monotonic() - t0:.2f} s before all were running (writes refused meanwhile)")
        with Client.connect(HOST, self.ports[0]) as client:
            client.execute(SQL_CREATE)  # takes the set's DDL lock at any default level

    def pids(self) -> list[int]:
        return [m.pid for m in self.members]

    def stop_member(self, n: int) -> int | None:
        """SIGTERM member `n` (1-based) and wait: a clean stop."""
        return self.members[n - 1].stop()

    def kill_member(self, n: int) -> int | None:
        """SIGKILL member `n`'s pid (a crash) and reap it."""
        member = self.members[n - 1]
        if member.proc.poll() is None:
            os.kill(member.pid, signal.SIGKILL)
        return member.proc.wait(timeout=30)

    def restart_member(self, n: int) -> Proc:
        """`replicaset serve` member `n` again on its data directory, config and port (its
        peers know it by that address), logging to the same file; returned once it answers
        a ping. Its previous process must have exited."""
        old = self.members[n - 1]
        if old.proc.poll() is None:
            raise RuntimeError(f"member {n} (pid {old.pid}) is still running")
        member = Proc.ours(f"ours m{n}", ["serve", "--data-dir", str(self.data_dir(n)), "--config", str(self.config)],
                           old.log_path, port=self.ports[n - 1])
        self.members[n - 1] = member
        return member

    def members_view(self, port: int) -> dict[int, str]:
        """`box.info.members` of one member as {id: state}."""
        with Client.connect(HOST, port, timeout_s=CLIENT_SOCKET_TIMEOUT_S) as client:
            view = client.eval("box.info.members")[0]
        return {int(m["id"]): str(m["state"]) for m in view}

    def data_dir(self, n: int) -> Path:
        """Member `n`'s data directory (1-based, in start order)."""
        return self.work / f"m{n}"

    def info(self, port: int) -> dict[str, Any]:
        with Client.connect(HOST, port, timeout_s=CLIENT_SOCKET_TIMEOUT_S) as client:
            return client.eval("box.info")[0]

    def vclock(self, port: int) -> dict[int, int]:
        return norm_vclock(self.info(port).get("vclock"))

    def status(self, port: int) -> str:
        return str(self.info(port).get("status"))

    def stop(self) -> list[int | None]:
        codes = []
        for member in reversed(self.members):
            try:
                codes.append(member.stop())
            except Exception as exc:  # noqa: BLE001
                progress(f"ours: stopping pid {member.pid} failed: {exc}")
                codes.append(None)
        return list(reversed(codes))

    def log_notes(self) -> list[str]:
        """Warnings, errors and non-JSON lines in the members' logs, and how often each member
        lost and re-made its upstream links."""
        notes = []
        for n, member in enumerate(self.members, start=1):
            lines = read_lines(member.log_path)
            bad = [line[:220] for line in log_problems(lines)]
            reconnects: dict[str, int] = {}
            relays = 0
            for event in log_events(lines):
                if event.get("event") == "upstream_disconnected":
                    reason = str(event.get("reason", "?"))
                    reason = "no message for ..." if reason.startswith("no message from") else reason
                    reconnects[reason] = reconnects.get(reason, 0) + 1
                if event.get("event") == "relay_started":
                    relays += 1
            notes.append(f"m{n}: {len(lines)} log lines, {len(bad)} warning/error/non-JSON; {relays} relay_started; "
                         f"upstream_disconnected {sum(reconnects.values())}x {reconnects}")
            notes.extend(f"m{n}:   {line}" for line in bad[:6])
        return notes


TARANTOOL_MEMBER_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    replication = {{{uris}}},
    replication_connect_quorum = {quorum},
    replication_connect_timeout = 60,
    wal_mode = 'write',
    read_only = false,
    memtx_memory = {memtx},
    work_dir = '{work_dir}',{synchro_cfg}{extra_cfg}
}}
-- Runs once per set, on the instance that bootstraps it (the smallest UUID, not always the first):
-- the others can only join once guest may replicate. They get the grant with the snapshot.
box.once('bench_grant', function()
    box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
end)
require('log').info('BENCH_READY')
"""


SYNCHRO_CFG = """
    replication_synchro_quorum = {quorum},
    replication_synchro_timeout = {timeout_s},
    replication_timeout = {replication_timeout_s},"""


class TarantoolSet:
    """Three Tarantool 2.6 instances, master-master full mesh, started at once. With
    `synchro_quorum`, replication is synchronous: `kv` is `is_sync` and a write on member 1 is
    answered once that many instances (member 1 included) have written it."""

    def __init__(self, work: Path, binary: str, *, name: str = "tarantool", synchro_quorum: int | None = None,
                 synchro_timeout_s: float = 5.0, replication_timeout_s: float = 1.0,
                 box_cfg: Mapping[str, int | float] | None = None) -> None:
        """`box_cfg`: more numeric `box.cfg` options (`checkpoint_interval = 30`)."""
        self.name = name
        self.work = work / name
        self.work.mkdir()
        self.binary = binary
        self.synchro_cfg = (SYNCHRO_CFG.format(quorum=synchro_quorum, timeout_s=synchro_timeout_s,
                                               replication_timeout_s=replication_timeout_s)
                            if synchro_quorum else "")
        self.extra_cfg = "".join(f"\n    {name} = {value!r}," for name, value in (box_cfg or {}).items())
        self.members: list[Proc] = []
        self.ports: list[int] = []

    def start(self) -> None:
        self.ports = [free_port() for _ in range(3)]
        uris = ", ".join(f"'{HOST}:{p}'" for p in self.ports)
        for n, port in enumerate(self.ports, start=1):
            self.members.append(spawn_tarantool(f"tarantool t{n}", self.binary, self.work / f"t{n}",
                                                TARANTOOL_MEMBER_INIT, port=port, uris=uris, quorum=3,
                                                memtx=TARANTOOL_MEMTX_BYTES, synchro_cfg=self.synchro_cfg,
                                                extra_cfg=self.extra_cfg))
        for member in self.members:
            wait_ready(member, START_TIMEOUT_S)
        conn = connect(self.ports[0], CLIENT_SOCKET_TIMEOUT_S)
        try:
            conn.execute(SQL_CREATE)
            if self.synchro_cfg:
                conn.eval("local s = box.space._space:get(box.space.KV.id); local flags = s[6]; flags.is_sync = true; "
                          "box.space._space:update(s[1], {{'=', 6, flags}})")
        finally:
            conn.close()
        # The table was made on t1: wait until it exists on every member.
        deadline = time.monotonic() + START_TIMEOUT_S
        for port in self.ports:
            while True:
                try:
                    conn = connect(port, CLIENT_SOCKET_TIMEOUT_S)
                    try:
                        conn.execute("SELECT count(*) FROM kv")
                        break
                    finally:
                        conn.close()
                except Exception as exc:  # noqa: BLE001
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"kv did not reach tarantool on port {port}: {exc}") from exc
                    time.sleep(0.1)

    def pids(self) -> list[int]:
        return [m.pid for m in self.members]

    def work_dir(self, n: int) -> Path:
        """Instance `n`'s work_dir (1-based): its .xlog and .snap files."""
        return self.work / f"t{n}"

    def _eval(self, port: int, expr: str) -> list[Any]:
        conn = connect(port, CLIENT_SOCKET_TIMEOUT_S)
        try:
            return list(conn.eval(expr))
        finally:
            conn.close()

    def vclock(self, port: int) -> dict[int, int]:
        return norm_vclock(self._eval(port, "return box.info.vclock")[0])

    def status(self, port: int) -> str:
        return str(self._eval(port, "return box.info.status")[0])

    def stop(self) -> list[int | None]:
        return [m.stop() for m in self.members]

    def log_notes(self) -> list[str]:
        notes = []
        for member in self.members:
            lines = member.log_text().splitlines()
            bad = [line[:220] for line in lines if " E> " in line or " W> " in line]
            notes.append(f"{member.name}: {len(lines)} log lines, {len(bad)} E>/W>")
            notes.extend(f"{member.name}:   {line}" for line in bad[:4])
        return notes


def run_set(rs: OurSet | TarantoolSet, sets: dict[str, Any], body: Callable[[dict[str, Any]], None],
            **fields: Any) -> None:
    """Start `rs`, run `body` on its report entry (`sets[rs.name]`, holding `fields` too),
    and stop it. A failure is recorded in the entry instead of raised: one set failing must
    not stop the rest of a benchmark."""
    entry: dict[str, Any] = {"loads": {}, "notes": [], **fields}
    sets[rs.name] = entry
    entry["loadavg_start"] = load_average()
    try:
        progress(f"{rs.name}: starting three members")
        rs.start()
        if getattr(rs, "startup_note", None):
            entry["notes"].append(rs.startup_note)
        body(entry)
    except Exception as exc:  # noqa: BLE001 - one set failing must not stop the rest
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"{rs.name}: FAILED: {entry['failure']}")
    finally:
        entry["exit_codes"] = rs.stop()
        entry["log_notes"] = rs.log_notes()
        entry["loadavg_end"] = load_average()
        progress(f"{rs.name}: stopped, exit codes {entry['exit_codes']}")


def wait_converged(rs: ReplicaSet, timeout_s: float = CONVERGE_TIMEOUT_S) -> tuple[float | None, list[dict[int, int]]]:
    """Seconds until every member's vclock equals member 1's (None on timeout), and the vclocks."""
    t0 = time.monotonic()
    vclocks: list[dict[int, int]] = []
    while True:
        try:
            vclocks = [rs.vclock(port) for port in rs.ports]
            if all(v == vclocks[0] for v in vclocks):
                return time.monotonic() - t0, vclocks
        except Exception as exc:  # noqa: BLE001
            progress(f"{rs.name}: box.info failed while waiting for convergence: {exc}")
        if time.monotonic() - t0 > timeout_s:
            return None, vclocks
        time.sleep(0.02)


def table_rows(port: int) -> dict[int, str]:
    """kv of one member as {k: v}, through the connector (either server answers it)."""
    conn = connect(port, socket_timeout_s=120)
    try:
        return {k: v for k, v in conn.execute("SELECT k, v FROM kv ORDER BY k")}
    finally:
        conn.close()


def table_digest(port: int) -> tuple[int, int]:
    """(rows, xxh3 of every row in key order) of kv on one member, through the same connector."""
    import xxhash

    digest = xxhash.xxh3_64()
    rows = table_rows(port)
    for k, v in rows.items():
        digest.update(f"{k}\x00{v}\x01".encode())
    return len(rows), digest.intdigest()


def divergent_keys(tables: list[dict[int, str]]) -> list[int]:
    """The keys whose row is not the same on every member (missing on some, or another value)."""
    missing = object()
    keys = set().union(*tables)
    return sorted(k for k in keys if len({id(missing) if k not in t else t[k] for t in tables}) > 1)
