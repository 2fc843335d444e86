"""The workloads: clients that write and read while the faults happen, each request recorded.

- bank: transfers between accounts at the server's default level (QUORUM), each one UPDATE
  statement through the PyPI `tarantool` connector. The connector has no stream
  transactions (1.3.0 sends no STREAM_ID), so a transfer is one statement that touches two
  rows with a guard on the balance: it moves the whole amount or nothing. Reads of every
  balance in between.
- set: INSERTs of unique values through the `tarantool` connector (QUORUM); the key is the
  server's auto id, so a value applied twice shows as two rows.
- registers: last-writer-wins upserts of a few keys at ONE through our own client
  (`replicaset.iproto.client.Client`): the connector's `execute` cannot send EXECUTE's
  OPTIONS map, where the level is given per request.
- streams: transfers as stream transactions (QUORUM) through our own client, two at a time
  on one connection with their statements interleaved: each reads its source balance, then
  writes it back less the amount, credits the destination and logs itself in a ledger. Two
  transactions of one member that meet on a row or a table conflict at once, never wait
  for each other, and a transfer committed between another's read and write is never lost.

Every choice a worker makes (member, accounts, amounts, keys, read or write) comes from its
own `random.Random` seeded from the run's seed; what the server answers, and when, does not.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tarantool
from tarantool.error import DatabaseError, NetworkError

from replicaset.iproto.client import Client
from replicaset.iproto.constants import RequestType
from replicaset.iproto.errors import RemoteProtocolError, ServerError
from replicaset.testing.chaos.cluster import HOST, Cluster, Member
from replicaset.testing.chaos.history import (FAILED, OK, UNKNOWN, Check, History, Op, check_bank, check_ledger,
                                              check_registers, check_set, outcome_of_error)

PAUSE_S = 0.01  # between one worker's requests: two cores carry the members too
CONNECT_RETRY_S = 0.2
OPS_PER_WORKER_MAX = 100_000


@dataclass
class Context:
    cluster: Cluster
    history: History
    stop: threading.Event
    request_timeout_s: float


class Workload:
    """A table, its setup statements, a worker loop and a check of the history."""

    name = ""
    tables: tuple[str, ...] = ()
    # Against Tarantool 2.6 (`chaos.tarantool`): its own request shapes; `leader_only` keeps
    # every worker on member 1 (synchronous spaces take writes from one instance).
    tarantool = False
    leader_only = False

    def setup(self) -> list[str]:
        raise NotImplementedError

    def request(self, ctx: Context, conn: Any, member: Member, rng: random.Random, n: int, worker: int) -> None:
        raise NotImplementedError

    def connect(self, member: Member, timeout_s: float) -> Any:
        return tarantool.Connection(HOST, member.port, socket_timeout=timeout_s, reconnect_max_attempts=0,
                                    connect_now=True, fetch_schema=False)

    def check(self, history: History, views: dict[int, dict[str, list[list[Any]]]]) -> Check:
        """The history against each answering member's tables (`views`: member -> table -> rows)."""
        raise NotImplementedError

    def run_worker(self, ctx: Context, worker: int, seed: int, home: int) -> None:
        """Requests to member `home` until `ctx.stop`; a member that cannot be reached
        sends the worker to another one."""
        rng = random.Random(f"{seed}-{self.name}-{worker}")
        members = ctx.cluster.members
        member = ctx.cluster.member(home)
        conn: Any = None
        for n in range(OPS_PER_WORKER_MAX):
            if ctx.stop.is_set():
                break
            if conn is None:
                try:
                    conn = self.connect(member, ctx.request_timeout_s)
                except (OSError, NetworkError, DatabaseError, ConnectionError, RemoteProtocolError):
                    member = member if self.leader_only else rng.choice(members)
                    ctx.stop.wait(CONNECT_RETRY_S)
                    continue
            try:
                self.request(ctx, conn, member, rng, n, worker)
            except _Broken:
                _close(conn)
                conn = None
            ctx.stop.wait(PAUSE_S)
        if conn is not None:
            _close(conn)

    def call(self, ctx: Context, op: dict[str, Any], fn: Callable[[], Any], result: Callable[[Any], Any]) -> Any:
        """Run `fn`, record it in the history with its outcome; raise `_Broken` when the
        connection can no longer be used."""
        start = ctx.history.now()
        try:
            reply = fn()
        except (NetworkError, socket.timeout, OSError, ConnectionError, RemoteProtocolError) as exc:
            ctx.history.add(Op(**op, outcome=UNKNOWN, start_s=start, end_s=ctx.history.now(), error=_text(exc)))
            raise _Broken from exc
        except (DatabaseError, ServerError) as exc:
            code, message = _code(exc)
            ctx.history.add(Op(**op, outcome=outcome_of_error(code, message), start_s=start, end_s=ctx.history.now(),
                               error=f"{code}: {message[:160]}"))
            return None
        value = result(reply)
        ctx.history.add(Op(**op, outcome=OK, start_s=start, end_s=ctx.history.now(), result=value))
        return value


class _Broken(Exception):
    """The connection went with a request on it."""


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection may fail to close; it is dropped either way
        pass


def _code(exc: BaseException) -> tuple[int, str]:
    if isinstance(exc, ServerError):
        return exc.code, exc.message
    return int(getattr(exc, "code", 0) or 0), str(getattr(exc, "message", "") or exc)


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


class Bank(Workload):
    name = "bank"
    tables = ("acct",)
    TRANSFER = ("UPDATE acct SET bal = bal + (CASE WHEN id = ? THEN -? ELSE ? END) "
                "WHERE id IN (?, ?) AND (SELECT bal FROM acct WHERE id = ?) >= ?")
    READ_SHARE = 0.2

    def __init__(self, accounts: int = 8, opening: int = 100) -> None:
        self.accounts, self.opening = accounts, opening

    def setup(self) -> list[str]:
        values = ", ".join(f"({a}, {self.opening})" for a in range(1, self.accounts + 1))
        return ["CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)",
                f"INSERT INTO acct(id, bal) VALUES {values}"]

    def request(self, ctx: Context, conn: Any, member: Member, rng: random.Random, n: int, worker: int) -> None:
        op = {"workload": self.name, "worker": worker, "member": member.n}
        if rng.random() < self.READ_SHARE:
            self.call(ctx, {**op, "kind": "read", "value": None},
                      lambda: conn.execute("SELECT id, bal FROM acct ORDER BY id"), lambda r: [list(t) for t in r.data])
            return
        src, dst = rng.sample(range(1, self.accounts + 1), 2)
        amount = rng.randint(1, self.opening // 2)
        if self.tarantool:
            self.call(ctx, {**op, "kind": "transfer", "value": [src, dst, amount]},
                      lambda: conn.call("chaos_transfer", [src, dst, amount]), lambda r: r.data[0])
            return
        self.call(ctx, {**op, "kind": "transfer", "value": [src, dst, amount]},
                  lambda: conn.execute(self.TRANSFER, [src, amount, amount, src, dst, src, amount]),
                  lambda r: r.affected_row_count)

    def check(self, history: History, views: dict[int, dict[str, list[list[Any]]]]) -> Check:
        return check_bank(history.of(self.name), {n: [row[:2] for row in view["acct"]] for n, view in views.items()},
                          accounts=self.accounts, total=self.accounts * self.opening)


class AppendSet(Workload):
    name = "set"
    tables = ("chaos_set",)

    def setup(self) -> list[str]:
        return ["CREATE TABLE chaos_set(id INTEGER PRIMARY KEY, v INTEGER NOT NULL)"]

    def request(self, ctx: Context, conn: Any, member: Member, rng: random.Random, n: int, worker: int) -> None:
        value = worker * 1_000_000 + n
        # Tarantool: the value is the key too (ids from two masters would collide).
        sql, binds = (("INSERT INTO chaos_set(id, v) VALUES (?, ?)", [value, value]) if self.tarantool
                      else ("INSERT INTO chaos_set(v) VALUES (?)", [value]))
        self.call(ctx, {"workload": self.name, "worker": worker, "member": member.n, "kind": "insert", "value": value},
                  lambda: conn.execute(sql, binds), lambda r: r.affected_row_count)

    def check(self, history: History, views: dict[int, dict[str, list[list[Any]]]]) -> Check:
        return _merge({n: check_set(history.of(self.name), [row[1] for row in view["chaos_set"]])
                       for n, view in views.items()})


class Registers(Workload):
    name = "registers"
    tables = ("reg",)
    UPSERT = "INSERT INTO reg(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v"
    INITIAL = 0

    def __init__(self, keys: int = 4) -> None:
        self.keys = keys

    def setup(self) -> list[str]:
        values = ", ".join(f"({k}, {self.INITIAL})" for k in range(1, self.keys + 1))
        return ["CREATE TABLE reg(k INTEGER PRIMARY KEY, v INTEGER NOT NULL)", f"INSERT INTO reg(k, v) VALUES {values}"]

    def connect(self, member: Member, timeout_s: float) -> Client:
        return Client.connect(HOST, member.port, timeout_s=timeout_s)

    def request(self, ctx: Context, conn: Any, member: Member, rng: random.Random, n: int, worker: int) -> None:
        key, value = rng.randint(1, self.keys), worker * 1_000_000 + n + 1
        self.call(ctx, {"workload": self.name, "worker": worker, "member": member.n, "kind": "write",
                        "value": [key, value]},
                  lambda: conn.execute(self.UPSERT, [key, value], options={"consistency": "one"}),
                  lambda r: r.row_count)

    def check(self, history: History, views: dict[int, dict[str, list[list[Any]]]]) -> Check:
        return check_registers(history.of(self.name), [[row[:2] for row in view["reg"]] for view in views.values()],
                               initial=self.INITIAL)


class Streams(Workload):
    name = "streams"
    tables = ("sacct", "sledger")
    STREAMS = (1, 2)  # on one connection, statements interleaved

    def __init__(self, accounts: int = 4, opening: int = 100) -> None:
        self.accounts, self.opening = accounts, opening

    def setup(self) -> list[str]:
        values = ", ".join(f"({a}, {self.opening})" for a in range(1, self.accounts + 1))
        return ["CREATE TABLE sacct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)",
                f"INSERT INTO sacct(id, bal) VALUES {values}",
                "CREATE TABLE sledger(id INTEGER PRIMARY KEY, src INTEGER, dst INTEGER, amount INTEGER)"]

    def connect(self, member: Member, timeout_s: float) -> Client:
        return Client.connect(HOST, member.port, timeout_s=timeout_s)

    def request(self, ctx: Context, conn: Any, member: Member, rng: random.Random, n: int, worker: int) -> None:
        """Two transfers, step by step in turn: read, write back, credit and log, COMMIT.
        A transfer refused before its COMMIT, or whose connection went before it, failed:
        the server keeps nothing of an open stream transaction."""
        transfers = {}
        for stream in self.STREAMS:
            src, dst = rng.sample(range(1, self.accounts + 1), 2)
            transfer_id = (worker * OPS_PER_WORKER_MAX + n) * len(self.STREAMS) + stream
            transfers[stream] = [transfer_id, src, dst, rng.randint(1, self.opening // 4)]
        open_streams = list(self.STREAMS)
        try:
            for stream in self.STREAMS:
                conn.call(RequestType.BEGIN, {}, stream_id=stream)
            balances: dict[int, int] = {}
            for step in range(4):
                for stream in list(open_streams):
                    _, src, dst, amount = transfers[stream]
                    try:
                        if step == 0:
                            balances[stream] = conn.execute("SELECT bal FROM sacct WHERE id = ?", [src],
                                                            stream_id=stream).rows[0][0]
                        elif step == 1:
                            conn.execute("UPDATE sacct SET bal = ? WHERE id = ?", [balances[stream] - amount, src],
                                         stream_id=stream)
                        elif step == 2:
                            conn.execute("UPDATE sacct SET bal = bal + ? WHERE id = ?", [amount, dst], stream_id=stream)
                        else:
                            conn.execute("INSERT INTO sledger(id, src, dst, amount) VALUES (?, ?, ?, ?)",
                                         transfers[stream], stream_id=stream)
                    except ServerError as exc:
                        self._failed(ctx, member, worker, transfers[stream], f"{exc.code}: {exc.message[:160]}")
                        open_streams.remove(stream)
                        conn.call(RequestType.ROLLBACK, {}, stream_id=stream)
                        continue
                    if step == 0 and balances[stream] < amount:  # no funds: nothing to move
                        open_streams.remove(stream)
                        conn.call(RequestType.ROLLBACK, {}, stream_id=stream)
            while open_streams:
                stream = open_streams.pop(0)
                op = {"workload": self.name, "worker": worker, "member": member.n, "kind": "transfer",
                      "value": transfers[stream]}
                self.call(ctx, op, lambda: conn.call(RequestType.COMMIT, {}, stream_id=stream), lambda r: True)
        except (OSError, ConnectionError, RemoteProtocolError, ServerError, _Broken) as exc:
            for stream in open_streams:
                self._failed(ctx, member, worker, transfers[stream], _text(exc))
            raise _Broken from exc

    def _failed(self, ctx: Context, member: Member, worker: int, transfer: list[int], error: str) -> None:
        now = ctx.history.now()
        ctx.history.add(Op(workload=self.name, worker=worker, member=member.n, kind="transfer", value=transfer,
                           outcome=FAILED, start_s=now, end_s=now, error=error))

    def check(self, history: History, views: dict[int, dict[str, list[list[Any]]]]) -> Check:
        return _merge({n: check_ledger(history.of(self.name), [row[:2] for row in view["sacct"]],
                                       [row[:4] for row in view["sledger"]], opening=self.opening)
                       for n, view in views.items()})


def _merge(checks: dict[int, Check]) -> Check:
    """One workload checked against every member's table: the worst figures, every problem
    named by its member."""
    first = next(iter(checks.values()))
    merged = Check(first.workload, figures=first.figures)
    for n, check in checks.items():
        merged.problems += [f"member {n}: {p}" for p in check.problems]
        merged.lost = max(merged.lost, check.lost)
        merged.duplicates = max(merged.duplicates, check.duplicates)
    return merged


WORKLOADS: dict[str, Callable[[], Workload]] = {"bank": Bank, "set": AppendSet, "registers": Registers,
                                                "streams": Streams}


def start_workers(ctx: Context, workloads: list[Workload], workers_each: int, seed: int) -> list[threading.Thread]:
    """`workers_each` threads per workload, spread over the members in turn."""
    threads = []
    size = len(ctx.cluster.members)
    for w, workload in enumerate(workloads):
        for worker in range(workers_each):
            home = 1 if workload.leader_only else (w * workers_each + worker) % size + 1
            thread = threading.Thread(target=workload.run_worker, args=(ctx, worker, seed, home),
                                      name=f"chaos-{workload.name}-{worker}", daemon=True)
            thread.start()
            threads.append(thread)
    return threads


def join_workers(threads: list[threading.Thread], timeout_s: float) -> list[str]:
    """Wait for every worker; the names of those still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threads if t.is_alive()]
