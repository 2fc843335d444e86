"""Deterministic simulation of a replica set: real engines and writers, the replication
cores, a fake network and crashes, all driven from one seed in virtual time (TigerBeetle's
VOPR).

Each member has a real `Engine` in its own directory, the server's `Writer` over it and a
`MemberDriver`, the one the server runs, with its `Applier` per peer and `Relay` per
subscriber connection; the simulator is the host that carries out the driver's actions.
It runs inside trio as one task, so every call of a writer runs to its end before the
next event (no flusher task: with no group-commit delay and nobody else waiting, a commit
is flushed at once; `wal_mode = fsync` flushes, and every fsync, run in a worker thread
that the task awaits). The writer's hooks tell the driver of commits, flushes and syncs;
their actions are carried out once the writer's call returns (`_settle`). Links are FIFO
connections, as TCP is; the seed decides delays (so rows from different peers interleave
in every order), cut connections, whole partitions, duplicated and reordered deliveries
(which the apply-once check must absorb and a gap must turn into a resubscribe), process
crashes and OS crashes that lose the WAL bytes written since the member's last sync
point. Relays ship only rows behind the sync point when they are of the relaying
member's own origin (FINDINGS F1). After the fault phase the network heals, crashed
members restart, and the run must converge: equal vclocks, one payload per `(origin,
lsn)` everywhere and each one a client was acknowledged for, every acknowledged durable
write held byte-for-byte, and on every member the tables, versions and latent images that
the reference model of last-writer-wins (`replicaset.testing.lww`) computes.

Under `wal_mode = "fsync"` every flush is durable: an OS crash loses nothing and a
restarted member takes writes at once. Under `"write"` a restarted member first fetches
the rows of its own origin from every peer (docs/design/README.md §4.4).

The run can write a trace: one dict per step, named and parameterised as the actions of
`specs/VClockReplication.tla`, which `specs/check_trace.py` checks against the spec. The
first dict (`"event": "Init"`) gives the constants, the last (`"event": "End"`, written once
the run converged) the number of steps between them. The members' drivers trace every
action of a member (`LocalWrite`, `WalFlush`, `WalSync`, `RelaySend`, `ApplierReceive`,
`RecoveryAnswer`, `RecoveryGiveUp`, `RecoveryFinish`); the simulator traces only the
environment (`Crash`, `Restart`). A row's changes are traced as
`[key, value id]` (`replicaset.member.trace`), with its HLC stamp at `LocalWrite`, and after
every flush and restart the member's table is traced as `{key: [value id, stamp, origin]}`
as it holds it, so TLC compares the values and versions it holds with the spec's
last-writer-wins.

With a quorum workload (`quorum=`: `Bank`, `KvQuorum`, or a scenario's `script`) the
simulator also hosts the driver's quorum transaction events as the server's `QuorumHost`
does (docs/design/quorum.md): each member keeps a metastore through `TxnRecords`, clients'
transactions are captured and written with `commit_captured`, and PREPARE, answers, COMMIT,
ABORT, questions, decisions and heartbeats are messages on a FIFO link per pair that the
seed delays and drops, partitions cut and a crash of either end loses. Crashes are process
crashes only. The end checks add: no commit without `needed(level, total)` members that
answered PREPARED (seen as they answered, not as the coordinator counted), one row per
transaction, every acknowledged transaction held, and the workload's own checks. The
drivers' trace then carries `specs/QuorumCommit.tla`'s lines too. Without a quorum
workload nothing of this runs and a seed's run and trace are what they were.

With `swim=` (a `SwimConfig`, the runtime's `[cluster]` names) every member's driver gets a
SWIM core, a fresh one at incarnation 0 at each (re)start, as the server's `SwimHost`
gives it: the simulator ticks it every `ping_timeout / 2`, tells it the registered members
at start, and carries its datagrams, encoded and decoded by the runtime's wire code,
between members after the seed's delay; it takes no SWIM decision. A partition drops
datagrams between its sides, a crashed member's datagrams are lost, and `drop_p` loses
datagrams at random until the heal. `pause(member, s)` stops a member's process (scripted
only, so that runs without pauses draw what they drew): it neither ticks nor receives;
what reaches it waits, in order, until it resumes (TCP frames, and datagrams up to
`buffer_datagrams_max` as a socket buffer holds them: past that they are lost), so
stale news arrives late as `specs/Swim.tla` models. The run converges only once every
view holds every member ALIVE at one incarnation. The trace then carries the driver's
`specs/Swim.tla` lines, and the environment's `Pause`, `Resume` and `Lose` (a datagram
dropped, with the updates it carried).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio

from replicaset.core import quorum as q
from replicaset.core.admission import Admission, admit
from replicaset.core import replication as repl
from replicaset.core import swim
from replicaset.core.replicaset import Refusal, ReplicaSet, must_recover
from replicaset.core.streams import StreamTxn
from replicaset.member import (
    Accepted,
    Action,
    ApplierAction,
    MemberDriver,
    Membership,
    QuorumAction,
    RelayAction,
    SwimAction,
)
from replicaset.member.trace import traced_updates, value_id
from replicaset.member.txn_records import TxnRecords
from replicaset.meta.recovery import recover_participant
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnStatus
from replicaset.runtime import swim as swim_wire
from replicaset.runtime.writer import Writer, WriteFailed
from replicaset.storage import (
    ApplyError,
    Captured,
    Engine,
    EngineConfig,
    GapError,
    SchemaPending,
    SqlError,
    TxnConflict,
)
from replicaset.testing import lww
from replicaset.storage.rows import DmlPayload
from wal import GroupCommitPolicy, Record, RecordType, VClock, WalError, WalMode
from wal.segment import list_segments

TIMEOUT_S = 0.1
TICK_S = 0.05
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class Faults:
    """Every fault the simulator injects, and how often; the run's seed draws them all.

    Rates are per member and second of the fault phase; `bootstrap_crash_share` scales
    the crash rate of member 1 (once the registrar, whose crashes stalled joins; the
    share stays so that a seed draws the faults it always drew); `sync_p` is the
    chance that a flush under `wal_mode = write` is followed by an fsync of its own (rows
    that no relay asked to sync stay exposed to an OS crash)."""

    delay_min_s: float = 0.0005
    delay_max_s: float = 0.05
    cut_per_s: float = 0.5
    partition_per_s: float = 0.2
    partition_s: tuple[float, float] = (0.1, 0.6)
    duplicate_p: float = 0.02
    reorder_p: float = 0.02
    crash_per_s: float = 0.2
    bootstrap_crash_share: float = 0.25
    os_crash_share: float = 0.5
    restart_after_s: float = 0.3
    sync_p: float = 0.3
    txn_drop_p: float = 0.05


@dataclass(frozen=True)
class SwimConfig:
    """SWIM in a run: `[cluster]`'s settings under the runtime's names and units (short
    timers, so that a run sees suspicions, deaths and refutations in seconds), the chance
    that a datagram is lost before the heal, and the datagrams a paused member's socket
    buffer holds."""

    gossip_interval_ms: int = 100
    gossip_fanout: int = 2
    suspect_timeout_ms: int = 400
    dead_timeout_ms: int = 800
    drop_p: float = 0.0
    buffer_datagrams_max: int = 64

    def settings(self) -> swim.SwimSettings:
        """The core's settings, made from these as the runtime makes them from `[cluster]`."""
        return swim_wire.settings({f"cluster.{name}": getattr(self, name) for name in (
            "gossip_interval_ms", "gossip_fanout", "suspect_timeout_ms", "dead_timeout_ms")})

    def period_max_s(self) -> float:
        """The longest protocol period: its help request and its end each come at the first
        tick (every `ping_timeout / 2`) at or after they are due."""
        s = self.settings()
        return s.gossip_interval_s + s.ping_timeout_s

    def heard_within_s(self, members: int, delay_max_s: float) -> float:
        """How long two running members can go without a message between them when none
        is lost: each probes the other once a round of `members - 1` periods, up to
        `2 * members - 3` periods apart across a reshuffle; then the delivery, and a tick."""
        return (2 * members - 3) * self.period_max_s() + delay_max_s + self.settings().ping_timeout_s / 2

    def refuted_within_s(self, members: int, delay_max_s: float) -> float:
        """From the moment a member's datagrams flow again (a resume, a heal) until every
        view holds it ALIVE at its refutation: within `heard_within_s` it exchanges a
        message with a member that accuses it (which carries the accusation), and refutes
        at once; within another, with every member (its own entry is in each message)."""
        return 2 * self.heard_within_s(members, delay_max_s)

    def dead_within_s(self, members: int, delay_max_s: float) -> float:
        """From a crash until every other member holds the member DEAD: its last datagram
        arrives within `delay_max_s`; each member's probe of it starts within
        `2 * members - 3` periods and fails at the end of its period (SUSPECT, unless a
        peer's gossip said so first); DEAD follows at `max(suspected + suspect_timeout,
        last heard + dead_timeout)`, at the first tick after."""
        s = self.settings()
        suspected_s = (2 * members - 2) * self.period_max_s() + delay_max_s
        return max(suspected_s + s.suspect_timeout_s, delay_max_s + s.dead_timeout_s) + s.ping_timeout_s / 2


@dataclass(frozen=True)
class SwimChange:
    """A `StateChanged` of `observer`'s SWIM core at `t_s`: its view's entry for `member`.
    `life` counts the observer's cores (one per start): a restart begins a new view."""

    t_s: float
    observer: int
    life: int
    member: int
    state: swim.MemberState
    incarnation: int


SWIM_UUID = "00000000-0000-4000-8000-00000000cafe"  # the replica set's uuid on simulated datagrams
# Where each kind of event is addressed (its argument naming the member): what a paused
# member holds until it resumes.
_ADDRESSED = {"tick": 0, "sync": 0, "swim_tick": 0, "link_lost": 0, "deliver": 1, "txn_deliver": 1, "swim_deliver": 1,
              "stream_step": 0}


NO_FAULTS = Faults(delay_max_s=0.01, cut_per_s=0, partition_per_s=0, duplicate_p=0, reorder_p=0, crash_per_s=0,
                   txn_drop_p=0)


@dataclass
class Link:
    """One applier connection from `applier_of` to `relay_on`; FIFO unless reordered."""

    conn: int
    applier_of: int
    relay_on: int
    last_delivery_s: float = 0.0
    open: bool = True


@dataclass
class Member:
    id: int
    data_dir: Path
    engine: Engine | None = None
    writer: Writer | None = None
    driver: MemberDriver | None = None
    links: dict[int, int] = field(default_factory=dict)  # peer -> conn of our applier
    sync_point: dict[str, int] = field(default_factory=dict)
    unsynced: bool = False  # rows written since the last sync point
    vclock_at_crash: VClock | None = None
    # What the writer's hooks produced during its last call, carried out once it returns.
    outbox: list[Action] = field(default_factory=list)
    sync_wanted: bool = False  # the seed wants an fsync after the last flush
    flushed_since: bool = False  # rows waiting for their schema may go
    # Quorum transactions (a run with a quorum workload): the metastore, bumped at every
    # crash so that messages to or from an earlier incarnation are lost, the captured rows
    # of undecided transactions of ours, and decided rows until COMMIT carries them.
    records: TxnRecords | None = None
    incarnation: int = 0
    captured: dict[int, Captured] = field(default_factory=dict)
    decided_rows: dict[int, Record] = field(default_factory=dict)
    next_heartbeat_s: float = 0.0
    next_gc_s: float = 0.0
    swim_lives: int = 0  # SWIM cores it had, one per start


TXN_TIMEOUT_S = 1.0
GC_INTERVAL_S = 0.25  # the collection of decided records, often enough to run under the faults
GC_MIN_RETENTION_MS = 300
GC_MAX_RETENTION_MS = 3_000
SYNC_AFTER_S = 0.04  # a coordinator's fsync of its row, after its COMMIT could leave
Statement = tuple[str, tuple[Any, ...]]


@dataclass
class Client:
    """A client's quorum transaction, as the client sees it: acknowledged at its level
    (`row`), failed (`error`), or neither (its coordinator crashed, or the deadline passed
    after the decision: the outcome is unknown to the client)."""

    txn_id: int
    coordinator: int
    incarnation: int
    level: q.Level
    deadline_s: float
    what: Any = None
    row: tuple[int, int] | None = None
    error: q.TxnError | str | None = None


class QuorumWorkload:
    """Client transactions at QUORUM or ALL for a run: how many, at which level, what each
    writes (`statements`), and the end checks it adds (`check`). This one sends none: the
    transactions of a scenario are begun by its script (`Simulation.begin`). With
    `interleaved`, each transaction is a stream whose statements arrive one by one, with
    other clients' statements, applied rows and decided rows on its member in between."""

    transactions: int = 0
    level: q.Level = q.Level.QUORUM
    single_key_one_writes: bool = False
    interleaved: bool = False

    async def setup(self, sim: Simulation, writer: Writer) -> None:
        """Tables the workload needs, made at consistency ONE on member 1 before the others open."""

    async def statements(self, sim: Simulation, member: Member) -> tuple[list[Statement], Any] | None:
        """The next transaction's statements at `member`, and what the checks know it by."""
        return None

    def check(self, sim: Simulation) -> None:
        """End checks of the workload, after convergence."""


@dataclass
class KvQuorum(QuorumWorkload):
    """Single-key QUORUM upserts of `kv` beside the run's ONE writes, themselves single-key
    (no statement that moves a row to another key): the workload of a `QuorumCommit` trace,
    whose transactions write one key each."""

    transactions: int = 20
    level: q.Level = q.Level.QUORUM
    single_key_one_writes: bool = True

    async def statements(self, sim: Simulation, member: Member) -> tuple[list[Statement], Any] | None:
        key = sim.rng.randrange(sim.keys)
        value = f"q{member.id}-{self.transactions}"
        return [("INSERT INTO kv(k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", (key, value))], key


@dataclass
class Bank(QuorumWorkload):
    """Transfers between accounts, each one QUORUM transaction of three rows (two balances
    and its line in the `xfer` log), from every member at once.

    The end checks: every member holds the same accounts; each balance is its opening
    balance plus what the logged transfers moved (so the total never changed and no
    transfer was applied twice or in part); every acknowledged transfer is logged; every
    logged transfer is one a client asked for, with its amounts; and no quorum transaction's
    row is held at two places in the log."""

    transactions: int = 40
    accounts: int = 6
    opening: int = 100
    level: q.Level = q.Level.QUORUM
    asked: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # transfer id -> (src, dst, amount)

    async def setup(self, sim: Simulation, writer: Writer) -> None:
        await writer.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)")
        await writer.execute("CREATE TABLE xfer(id INTEGER PRIMARY KEY, src INTEGER, dst INTEGER, amount INTEGER)")
        for account in range(self.accounts):
            await writer.execute("INSERT INTO acct(id, bal) VALUES (?, ?)", (account, self.opening))

    async def statements(self, sim: Simulation, member: Member) -> tuple[list[Statement], Any] | None:
        src, dst = sim.rng.sample(range(self.accounts), 2)
        amount = sim.rng.randint(1, 30)
        assert member.engine is not None
        try:
            balances = dict(_rows(member.engine, "SELECT id, bal FROM acct WHERE id IN (?, ?)", (src, dst)))
        except SqlError:  # the accounts have not reached this member yet
            return None
        if len(balances) < 2 or balances[src] < amount:
            return None
        transfer = len(self.asked) + 1
        self.asked[transfer] = (src, dst, amount)
        return [("UPDATE acct SET bal = ? WHERE id = ?", (balances[src] - amount, src)),
                ("UPDATE acct SET bal = ? WHERE id = ?", (balances[dst] + amount, dst)),
                ("INSERT INTO xfer(id, src, dst, amount) VALUES (?, ?, ?, ?)", (transfer, src, dst, amount))], transfer

    def check(self, sim: Simulation) -> None:
        where = f"seed {sim.seed}"
        acked = {client.what for client in sim.clients.values() if client.row is not None}
        for i, member in sim.members.items():
            assert member.engine is not None
            balances = dict(_rows(member.engine, "SELECT id, bal FROM acct"))
            logged = {row[0]: tuple(row[1:]) for row in _rows(member.engine, "SELECT id, src, dst, amount FROM xfer")}
            expected = {account: self.opening for account in range(self.accounts)}
            for transfer, (src, dst, amount) in logged.items():
                assert self.asked.get(transfer) == (src, dst, amount), f"{where}: member {i} logs transfer {transfer} nobody asked for"
                expected[src] -= amount
                expected[dst] += amount
            assert balances == expected, f"{where}: member {i}: balances {balances}, the logged transfers make {expected}"
            assert sum(balances.values()) == self.opening * self.accounts
            lost = acked - set(logged)
            assert not lost, f"{where}: member {i} lost acknowledged transfers {sorted(lost)}"


@dataclass
class StreamBank(Bank):
    """Bank transfers as stream transactions whose statements interleave on their member
    with other streams' (`interleaved`), from every member at once. A transfer reads the
    source balance in one statement (into `snap`) and writes it back, less the amount, in
    a later one: only the conflict on a table read and written by another transaction
    since keeps a transfer committed between the two from being lost, which the balances
    check would show."""

    interleaved: bool = True

    async def setup(self, sim: Simulation, writer: Writer) -> None:
        await super().setup(sim, writer)
        await writer.execute("CREATE TABLE snap(xfer INTEGER PRIMARY KEY, bal INTEGER)")

    async def statements(self, sim: Simulation, member: Member) -> tuple[list[Statement], Any] | None:
        src, dst = sim.rng.sample(range(self.accounts), 2)
        amount = sim.rng.randint(1, 30)
        transfer = len(self.asked) + 1
        self.asked[transfer] = (src, dst, amount)
        return [("INSERT INTO snap(xfer, bal) SELECT ?, bal FROM acct WHERE id = ?", (transfer, src)),
                ("UPDATE acct SET bal = (SELECT bal FROM snap WHERE xfer = ?) - ? WHERE id = ?", (transfer, amount, src)),
                ("UPDATE acct SET bal = bal + ? WHERE id = ?", (amount, dst)),
                ("INSERT INTO xfer(id, src, dst, amount) VALUES (?, ?, ?, ?)", (transfer, src, dst, amount))], transfer


@dataclass
class OpenStream:
    """A client's stream transaction on `member_id` (`QuorumWorkload.interleaved`): the
    statements sent so far, and the transaction itself in the core the server's session
    keeps it in (`core.streams.StreamTxn`, its rows between statements included)."""

    member_id: int
    incarnation: int
    statements: list[Statement]
    what: Any
    txn: StreamTxn = field(default_factory=StreamTxn)
    sent: int = 0


def _rows(engine: Engine, sql: str, binds: tuple[Any, ...] = ()) -> list[list[Any]]:
    result = engine.query(sql, binds)
    assert result is not None, f"{sql!r} is no read"
    return result.rows


class Simulation:
    def __init__(self, root: Path, *, seed: int, members: int = 3, writes: int = 60, faults: Faults = Faults(),
                 keys: int = 6, fault_phase_s: float = 3.0, wal_mode: WalMode = WalMode.WRITE,
                 trace: Callable[[dict[str, Any]], None] | None = None, quorum: QuorumWorkload | None = None,
                 script: Sequence[tuple[float, Callable[[Simulation], Any]]] = (),
                 swim: SwimConfig | None = None) -> None:
        """`quorum` adds client transactions at QUORUM or ALL (with it every member keeps a
        metastore, and crashes are process crashes only); `script` calls each function at
        its time in the fault phase (an async one is awaited): a scenario's partitions,
        crashes, pauses and transactions (`begin`, `partition`, `crash`, `pause`,
        `drop_txn_messages`); `swim` runs SWIM on every member."""
        self.seed = seed
        self.wal_mode = WalMode(wal_mode)
        self.rng = random.Random(seed)
        self.root = root
        self.faults = faults
        self.keys = keys
        self.writes_left = writes
        self.fault_phase_s = fault_phase_s
        self.now_s = 0.0
        self.healed = False
        self._queue: list[tuple[float, int, str, tuple[Any, ...]]] = []
        self._seq = itertools.count()
        self._conns = itertools.count(1)
        self.links: dict[int, Link] = {}
        self.partitioned: set[frozenset[int]] = set()
        self.acked: list[tuple[int, int, bytes]] = []
        # (origin, lsn, payload) of acknowledged writes their origin made durable: none of
        # them may be lost, nor its LSN taken by another write.
        self.durable: set[tuple[int, int, bytes]] = set()
        self._last_ack: dict[tuple[int, int], bytes] = {}
        self._trace_out = trace
        self.traced_steps = 0
        self.members = {i: Member(i, root / f"m{i}") for i in range(1, members + 1)}
        self.quorum = quorum
        self.members_crashed = 0
        self.os_crashes = 0
        self.collected = 0  # decided transaction records deleted by the collection
        self.script = list(script)
        self.txns_left = quorum.transactions if quorum is not None else 0
        self.clients: dict[int, Client] = {}
        self.streams: list[OpenStream] = []  # stream transactions not committed yet
        self.stream_conflicts = 0  # stream transactions that conflicted before their COMMIT
        # Who answered PREPARED for each transaction, seen on the way out of each member,
        # never by the coordinator's count: a commit needs a quorum of them.
        self.prepared_by: dict[int, set[int]] = {}
        self.drop_txn: Callable[[int, int, str], bool] = lambda src, dst, kind: False
        self._txn_last_delivery: dict[tuple[int, int], float] = {}
        self.swim = swim
        # SWIM draws from its own stream: a run's other faults and writes stay the seed's.
        self.swim_rng = random.Random(f"{seed}:swim")
        self.swim_changes: list[SwimChange] = []
        self.swim_lost = 0  # datagrams dropped
        self.swim_addresses = {f"sim:{i}": i for i in self.members}
        self.paused: dict[int, list[tuple[str, tuple[Any, ...]]]] = {}  # member -> its events, held

    # ---------------------------------------------------------------- plumbing

    def trace(self, event: dict[str, Any]) -> None:
        if self._trace_out is None:
            return
        if event["event"] not in ("Init", "End"):
            self.traced_steps += 1
        self._trace_out(event)

    def _traced_table(self, member: Member) -> dict[str, list[Any]]:
        """The member's table as the trace shows it: every key with a version, as
        `[value id of the image it holds (visible or latent), stamp, origin]`, None for a
        tombstone; "missing" when a live version has no image at all."""
        if self._trace_out is None:
            return {}
        assert member.engine is not None
        state = lww.engine_state(member.engine).get("kv")
        if state is None:
            return {}
        images = {f"kv:{row['k']}": row for row in state.rows.values()} | state.latent
        table = {}
        for key, (hlc, origin, deleted) in sorted(state.versions.items()):
            image = images.get(key)
            value = None if deleted else value_id(image) if image is not None else "missing"
            table[key] = [value, hlc, origin]
        return table

    def _at(self, delay_s: float, kind: str, *args: Any) -> None:
        heapq.heappush(self._queue, (self.now_s + delay_s, next(self._seq), kind, args))

    def _clock_ms(self) -> int:
        return 1_700_000_000_000 + int(self.now_s * 1000)

    async def _open(self, member: Member, *, recovering: bool = False) -> None:
        member.engine = Engine.open(
            EngineConfig(data_dir=member.data_dir, instance_id=member.id, wal_mode=self.wal_mode),
            clock_ms=self._clock_ms,
        )
        # No flusher task: with no delay and one task, every commit is flushed at once.
        member.writer = Writer(
            member.engine, group_commit=GroupCommitPolicy(1 << 22, 1024, 0), fsync=self.wal_mode is WalMode.FSYNC,
            on_commit=partial(self._on_commit, member), on_flush=partial(self._on_flush, member),
            on_synced=partial(self._on_synced, member),
        )
        membership = Membership(members=len(self.members), upstreams=frozenset(str(p) for p in self.members if p != member.id),
                                ids={str(p): p for p in self.members})
        participant = None
        if self.quorum is not None:  # as the server's QuorumHost: the participant its metastore left
            meta = MetaStore.open(member.data_dir / "meta")
            member.records = TxnRecords(meta, member.id)
            participant = recover_participant(meta, member.id, 4 * TIMEOUT_S, self.now_s)
        member.driver = MemberDriver(
            instance_id=member.id,
            store=member.engine,
            replicaset=ReplicaSet(instance_id=member.id, configured_quorum=None,
                                  connect_deadline_s=self.now_s + CONNECT_TIMEOUT_S, recovering=recovering),
            membership=lambda: membership,
            timeout_s=TIMEOUT_S,
            backoff_max_s=0.4,
            trace=self.trace if self._trace_out is not None else None,
            traced_table=lambda: self._traced_table(member),
            participant=participant,
        )
        for peer in self.members:
            if peer != member.id:
                await self._do(member, member.driver.applier_start(str(peer), self.now_s, peer=str(peer)))
        await self._do(member, member.driver.members_changed(self.now_s))  # as the runtime does once its appliers start
        if self.swim is not None:  # as the server's SwimHost: a fresh core, told the registered members
            member.swim_lives += 1
            member.driver.swim = swim.Swim(member.id, f"sim:{member.id}", random.Random(self.swim_rng.getrandbits(64)),
                                           self.swim.settings())
            await self._do(member, member.driver.swim_members(self.now_s, {i: f"sim:{i}" for i in self.members}))

    # ---------------------------------------------------------------- the run

    def run(self, max_events: int = 200_000) -> None:
        trio.run(self._run, max_events)

    async def _run(self, max_events: int) -> None:
        self.trace({"event": "Init", "members": sorted(self.members), "wal_mode": self.wal_mode.value,
                    "seed": self.seed})
        first = self.members[1]
        await self._open(first)
        assert first.writer is not None
        await first.writer.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, u INTEGER UNIQUE)")
        if self.quorum is not None:
            await self.quorum.setup(self, first.writer)
        await self._settle(first)
        for member in self.members.values():
            if member.engine is None:
                await self._open(member)
            self._at(TICK_S, "tick", member.id)
        self._at(0.01, "write")
        if self.txns_left:
            self._at(0.02, "txn")
        for at_s, step in self.script:
            self._at(at_s, "script", step)
        if self.swim is not None:
            tick_s = self.swim.settings().ping_timeout_s / 2
            for i in self.members:  # the members' ticks spread over a tick
                self._at(tick_s * i / len(self.members), "swim_tick", i)
        self._at(self.fault_phase_s, "heal")
        for _ in range(max_events):
            if not self._queue:
                break
            self.now_s, _, kind, args = heapq.heappop(self._queue)
            if self._held(kind, args):
                continue
            await getattr(self, f"_on_{kind}")(*args)
            self.check_invariants()
            if self.healed and self.writes_left == 0 and self.txns_left == 0 and not self.streams and self._converged():
                self.trace({"event": "End", "steps": self.traced_steps})
                return
        raise AssertionError(f"seed {self.seed}: no convergence after {max_events} events: {self.vclocks()}")

    async def _on_heal(self) -> None:
        self.healed = True
        self.partitioned.clear()
        for member in self.members.values():
            if member.engine is None:
                await self._on_restart(member.id)

    async def _on_tick(self, member_id: int) -> None:
        self._at(TICK_S, "tick", member_id)
        member = self.members[member_id]
        if member.driver is None:
            return
        await self._do(member, member.driver.tick(self.now_s))
        if self.quorum is not None:
            await self._txn_tick(member)
        if not self.healed:
            await self._maybe_fault(member)

    async def _maybe_fault(self, member: Member) -> None:
        f, rng = self.faults, self.rng
        if rng.random() < f.cut_per_s * TICK_S and member.links:
            await self._cut(rng.choice(sorted(member.links.values())), "cut by the simulator")
        if rng.random() < f.partition_per_s * TICK_S:
            other = rng.choice([m for m in self.members if m != member.id])
            pair = frozenset({member.id, other})
            self.partitioned.add(pair)
            for link in list(self.links.values()):
                if {link.applier_of, link.relay_on} == set(pair):
                    await self._cut(link.conn, "partition")
            self._at(rng.uniform(*f.partition_s), "unpartition", pair)
        crash_rate = f.crash_per_s * (f.bootstrap_crash_share if member.id == 1 else 1.0)
        if rng.random() < crash_rate * TICK_S:
            await self._crash(member, os_crash=rng.random() < f.os_crash_share)

    async def _on_unpartition(self, pair: frozenset[int]) -> None:
        self.partitioned.discard(pair)

    async def _on_restart(self, member_id: int) -> None:
        member = self.members[member_id]
        if member.engine is not None:
            return
        await self._open(member, recovering=must_recover(
            unclean=True, wal_mode_write=self.wal_mode is WalMode.WRITE, has_peers=True, force_recovery=False))
        assert member.engine is not None
        if member.vclock_at_crash is not None and not member.vclock_at_crash <= member.engine.vclock:
            # An OS crash took rows: what is left on disk after a reboot is durable.
            self._mark_durable(member)
        # A WAL opened after an unclean stop counts only its first segment's start as durable,
        # so a relay withholds our rows until a sync says more: the SyncWal it asks must run.
        member.unsynced = member.unsynced or member.engine.durable_vclock != member.engine.vclock
        member.vclock_at_crash = None
        swim_view = {"view": self.swim_view(member_id)} if self.swim is not None else {}
        self.trace({"event": "Restart", "member": member_id, "vclock": self._clock_of(member),
                    "table": self._traced_table(member), **swim_view, "t": self.now_s})
        if member.records is not None:  # as the server's QuorumHost.run: settle what the crash left
            assert member.driver is not None and member.engine is not None
            view = frozenset(self.members)
            await self._do(member, member.records.restart(member.driver, member.engine, self.now_s, view))
            self._at(SYNC_AFTER_S, "sync", member.id, member.incarnation)

    async def _crash(self, member: Member, *, os_crash: bool) -> None:
        """A process crash loses nothing the WAL holds; an OS crash under wal_mode=write
        also loses the WAL bytes written since the member's last sync point."""
        assert member.engine is not None and member.id not in self.paused, f"member {member.id} crashes while paused"
        self.trace({"event": "Crash", "member": member.id, "os": os_crash, "t": self.now_s})
        self.members_crashed += 1
        self.os_crashes += os_crash
        member.vclock_at_crash = member.engine.wal.vclock
        member.engine.close()
        member.engine = member.writer = None
        if member.records is not None:  # memory is lost; the metastore is not
            member.records.meta.close()
            member.records = None
            member.incarnation += 1
            member.captured.clear()
            member.decided_rows.clear()
        assert member.driver is not None
        for conn in list(member.links.values()) + list(member.driver.relays):
            await self._cut(conn, "crash")
        member.driver = None
        if os_crash and self.wal_mode is WalMode.WRITE:
            self._lose_unsynced_tail(member)
        self._at(self.faults.restart_after_s, "restart", member.id)

    def _mark_durable(self, member: Member) -> None:
        """What the member wrote so far survives an OS crash from now on."""
        member.unsynced = False
        member.sync_point = {p.name: p.stat().st_size for p in list_segments(member.data_dir / "wal")}
        assert member.engine is not None
        own_lsn = member.engine.vclock.get(member.id)
        # An LSN acknowledged twice was lost in an OS crash the first time: the later write holds it.
        self.durable.update((o, lsn, payload) for (o, lsn), payload in self._last_ack.items()
                            if o == member.id and lsn <= own_lsn)

    def _lose_unsynced_tail(self, member: Member) -> None:
        for path in list_segments(member.data_dir / "wal"):
            size = member.sync_point.get(path.name)
            if size is None:
                path.unlink()
            elif path.stat().st_size > size:
                with open(path, "r+b") as f:
                    f.truncate(self.rng.randint(size, path.stat().st_size))

    # ---------------------------------------------------------------- the writer's hooks

    def _on_commit(self, member: Member, records: Sequence[Record]) -> None:
        """A local commit, queued: its client is acknowledged after the flush that follows."""
        for record in records:
            self.acked.append((record.origin, record.lsn, record.payload))
            self._last_ack[(record.origin, record.lsn)] = record.payload
        assert member.driver is not None
        member.driver.committed(self.now_s, records)

    def _on_flush(self, member: Member, records: list[Record]) -> None:
        """The driver hears of the flush at once (it traces WalFlush); the seed may want an
        fsync before the relays' actions are carried out."""
        assert member.driver is not None
        member.unsynced = member.flushed_since = True
        if self.wal_mode is WalMode.FSYNC:
            self._mark_durable(member)  # every flush is an fsync
        member.outbox += member.driver.flushed(self.now_s, records)
        if member.records is not None and member.engine is not None and member.engine.flushed_quorum_rows:
            if member.records.rows_flushed(member.driver, self.now_s, member.engine.flushed_quorum_rows,
                                           member.engine.durable_vclock.to_dict()):
                self._at(SYNC_AFTER_S, "sync", member.id, member.incarnation)
        if self.wal_mode is WalMode.WRITE and self.rng.random() < self.faults.sync_p:
            member.sync_wanted = True

    def _on_synced(self, member: Member, advanced: bool) -> None:
        assert member.driver is not None
        self._mark_durable(member)
        member.outbox += member.driver.synced(self.now_s, advanced=advanced)
        if member.records is not None:  # rows applied count; our own word that our rows are durable
            assert member.engine is not None
            durable = member.engine.durable_vclock.to_dict()
            member.records.synced(member.driver, self.now_s, durable)
            member.outbox += member.driver.txn_durable(self.now_s, member.id, durable)

    async def _settle(self, member: Member) -> None:
        """After a call of the member's writer: the fsync the seed wanted, then the actions
        its hooks produced, in order; then rows waiting for their schema look again."""
        while member.writer is not None:
            if member.sync_wanted:
                member.sync_wanted = False
                await member.writer.sync_wal()
            elif member.outbox:
                actions, member.outbox = member.outbox, []
                await self._do(member, actions)
            elif member.flushed_since:
                member.flushed_since = False
                assert member.driver is not None
                for key in [k for k, applier in member.driver.appliers.items() if applier.waiting is not None]:
                    member.outbox += member.driver.applier_schema_check(key, self.now_s)
            else:
                return

    # ---------------------------------------------------------------- network

    async def _connect(self, member: Member, peer: int) -> None:
        conn = next(self._conns)
        self.links[conn] = Link(conn, member.id, peer)
        member.links[peer] = conn
        await self._send(conn, member.id, peer, "hello")

    async def _cut(self, conn: int, reason: str, unapplied: tuple[Record, ...] = ()) -> None:
        link = self.links.get(conn)
        if link is None or not link.open:
            return
        link.open = False
        applier_side, relay_side = self.members[link.applier_of], self.members[link.relay_on]
        if relay_side.driver is not None:
            relay_side.driver.relay_closed(conn)
        if applier_side.links.get(link.relay_on) == conn:
            del applier_side.links[link.relay_on]
            if applier_side.id in self.paused:  # the process reads the closed connection once it runs
                self.paused[applier_side.id].append(("link_lost", (applier_side.id, link.relay_on, reason, unapplied)))
            else:
                await self._on_link_lost(applier_side.id, link.relay_on, reason, unapplied)

    async def _on_link_lost(self, member_id: int, peer: int, reason: str, unapplied: tuple[Record, ...]) -> None:
        member = self.members[member_id]
        if member.engine is not None and member.driver is not None:
            await self._do(member, member.driver.applier_link_lost(str(peer), self.now_s, reason, unapplied=unapplied))

    async def _send(self, conn: int, src: int, dst: int, kind: str, *payload: Any) -> None:
        link = self.links[conn]
        if not link.open:
            return
        if frozenset({src, dst}) in self.partitioned:
            await self._cut(conn, "partition")
            return
        deliver = max(self.now_s + self.rng.uniform(self.faults.delay_min_s, self.faults.delay_max_s), link.last_delivery_s)
        # TCP neither duplicates nor reorders; row frames still get both, to prove that
        # apply-once absorbs copies and that a gap ends in a resubscribe, never a hole.
        garble = kind == "rows" and not self.healed
        if garble and self.rng.random() < self.faults.reorder_p:
            deliver = self.now_s + self.rng.uniform(0.0, self.faults.delay_max_s)
        else:
            link.last_delivery_s = deliver
        heapq.heappush(self._queue, (deliver, next(self._seq), "deliver", (conn, dst, kind, payload)))
        if garble and self.rng.random() < self.faults.duplicate_p:
            heapq.heappush(self._queue, (deliver + 0.001, next(self._seq), "deliver", (conn, dst, kind, payload)))

    async def _on_deliver(self, conn: int, dst: int, kind: str, payload: tuple[Any, ...]) -> None:
        link = self.links[conn]
        member = self.members[dst]
        if not link.open or member.driver is None:
            return
        await getattr(self, f"_recv_{kind}")(member, member.driver, conn, link, *payload)

    # ---------------------------------------------------------------- messages

    async def _recv_hello(self, relay_side: Member, driver: MemberDriver, conn: int, link: Link) -> None:
        await self._send(conn, relay_side.id, link.applier_of, "welcome")

    async def _recv_welcome(self, member: Member, driver: MemberDriver, conn: int, link: Link) -> None:
        await self._do(member, driver.applier_connected(str(link.relay_on), self.now_s))

    async def _recv_subscribe(self, member: Member, driver: MemberDriver, conn: int, link: Link, vclock: dict,
                              last_txn: dict, include_own: bool) -> None:
        accepted = driver.relay_subscribe(conn, self.now_s, subscriber=link.applier_of, vclock=VClock(vclock),
                                          last_txn=last_txn, include_own=include_own)
        if isinstance(accepted, repl.Refuse):
            await self._send(conn, member.id, link.applier_of, "refused", accepted.refusal, accepted.message)
            return
        assert isinstance(accepted, Accepted)
        await self._send(conn, member.id, link.applier_of, "subscribed", accepted.vclock)
        await self._do(member, accepted.actions)
        await self._do(member, driver.relay_ack(conn, self.now_s, VClock(vclock)))  # as the server's session

    async def _recv_subscribed(self, member: Member, driver: MemberDriver, conn: int, link: Link, vclock: dict) -> None:
        await self._do(member, driver.applier_subscribed(str(link.relay_on), self.now_s, VClock(vclock)))

    async def _recv_refused(self, member: Member, driver: MemberDriver, conn: int, link: Link, refusal: Refusal,
                            message: str) -> None:
        await self._do(member, driver.applier_refused(str(link.relay_on), self.now_s, refusal, message))

    async def _recv_rows(self, member: Member, driver: MemberDriver, conn: int, link: Link,
                         records: tuple[Record, ...]) -> None:
        await self._do(member, driver.applier_rows(str(link.relay_on), self.now_s, records))

    async def _recv_heartbeat(self, member: Member, driver: MemberDriver, conn: int, link: Link, vclock: dict) -> None:
        await self._do(member, driver.applier_heartbeat(str(link.relay_on), self.now_s, VClock(vclock)))

    async def _recv_ack(self, member: Member, driver: MemberDriver, conn: int, link: Link, vclock: dict) -> None:
        await self._do(member, driver.relay_ack(conn, self.now_s, VClock(vclock)))

    # ---------------------------------------------------------------- actions

    async def _do(self, member: Member, actions: list[Action]) -> None:
        """Carry out the driver's actions in its order; the replica set's are traced by it."""
        for tagged in actions:
            if isinstance(tagged, ApplierAction):
                await self._applier_act(member, int(tagged.key), tagged.action)
            elif isinstance(tagged, RelayAction):
                await self._relay_act(member, tagged.conn, tagged.action)
            elif isinstance(tagged, QuorumAction) and member.records is not None:
                await self._txn_act(member, tagged.action)
            elif isinstance(tagged, SwimAction):
                self._swim_act(member, tagged.action)

    async def _applier_act(self, member: Member, peer: int, action: repl.Action) -> None:
        if isinstance(action, repl.Connect):
            await self._connect(member, peer)
        elif isinstance(action, repl.SendSubscribe):
            await self._send(member.links[peer], member.id, peer, "subscribe", action.vclock, action.last_txn,
                             action.include_own)
        elif isinstance(action, repl.ApplyRows):
            await self._apply(member, peer, action)
        elif isinstance(action, repl.SendAck):
            if peer in member.links:
                await self._send(member.links[peer], member.id, peer, "ack", action.vclock)
        elif isinstance(action, repl.Disconnect):
            if peer in member.links:
                await self._cut(member.links[peer], action.reason)

    async def _relay_act(self, member: Member, conn: int, action: repl.Action) -> None:
        if isinstance(action, repl.SendRows):
            await self._send(conn, member.id, action.subscriber, "rows", action.records)
        elif isinstance(action, repl.SendHeartbeat):
            await self._send(conn, member.id, action.subscriber, "heartbeat", action.vclock)
        elif isinstance(action, repl.SyncWal):
            if member.unsynced:  # else a sync since the relay asked made its rows durable
                assert member.writer is not None
                await member.writer.sync_wal()
                await self._settle(member)
        elif isinstance(action, repl.ReadLog):
            assert member.engine is not None and member.driver is not None
            rows = list(member.engine.wal.read_from(VClock(action.after)))
            await self._do(member, member.driver.relay_rows(conn, self.now_s, rows))
        elif isinstance(action, repl.Disconnect):
            await self._cut(conn, action.reason)

    async def _apply(self, member: Member, peer: int, action: repl.ApplyRows) -> None:
        """The writer applies the rows (each once, then one flush); then acknowledge, or
        leave the link (a gap: the row that broke it counts), or let the rest wait for
        their schema in the applier, or stop (a row refused)."""
        writer, driver = member.writer, member.driver
        assert writer is not None and driver is not None
        key = str(peer)
        failure: ApplyError | None = None
        try:
            await writer.apply(action.records, own_allowed=action.own_allowed, skip_conflicts=action.skip_conflicts,
                               took=partial(driver.applier_took, key, self.now_s) if driver.tracing else None)
        except ApplyError as exc:
            failure = exc
        await self._settle(member)
        if isinstance(failure, SchemaPending):
            await self._do(member, driver.applier_schema_pending(key, self.now_s, failure.schema_id, action.records,
                                                                 own_allowed=action.own_allowed))
        elif isinstance(failure, GapError):
            if peer in member.links:
                await self._cut(member.links[peer], str(failure), action.records)
        elif failure is not None:
            await self._do(member, driver.applier_apply_failed(key, self.now_s, str(failure)))
        else:
            await self._do(member, driver.applier_applied(key, self.now_s))

    # ---------------------------------------------------------------- client writes

    async def _on_write(self) -> None:
        if self.writes_left <= 0:
            return
        self._at(self.rng.uniform(0.005, 0.05), "write")
        candidates = [m for m in self.members.values() if m.driver is not None and m.id not in self.paused
                      and m.driver.write_refusal(self.now_s) is None]
        if not candidates:
            return
        member = self.rng.choice(candidates)
        assert member.writer is not None
        key, rng = self.rng.randrange(self.keys), self.rng
        statements = [
            ("INSERT INTO kv(k, v, u) VALUES (?, ?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v, u = excluded.u",
             (key, f"v{member.id}-{self.writes_left}", rng.randrange(self.keys * 2))),
            ("UPDATE kv SET v = ? WHERE k = ?", (f"u{member.id}-{self.writes_left}", key)),
            ("DELETE FROM kv WHERE k = ?", (key,)),
            ("UPDATE kv SET k = ? WHERE k = ?", (rng.randrange(self.keys), key)),
        ]
        if self.quorum is not None and self.quorum.single_key_one_writes:
            statements = statements[:3]
        statement = rng.choice(statements)
        acked = len(self.acked)
        try:
            await member.writer.execute(*statement)
        except SqlError:
            pass  # the writer rolled it back: a client would see the error
        if len(self.acked) > acked:
            self.writes_left -= 1
        await self._settle(member)

    # ---------------------------------------------------------------- quorum transactions

    async def _on_txn(self) -> None:
        """The workload's next client transaction, at a member that takes writes."""
        if self.txns_left <= 0:
            return
        self._at(self.rng.uniform(0.01, 0.08), "txn")
        candidates = [m.id for m in self.members.values() if m.driver is not None and m.id not in self.paused
                      and m.driver.write_refusal(self.now_s) is None]
        if not candidates:
            return
        assert self.quorum is not None
        member = self.members[self.rng.choice(candidates)]
        made = await self.quorum.statements(self, member)
        if made is None:
            return
        statements, what = made
        if self.quorum.interleaved:
            self.txns_left -= 1
            stream = OpenStream(member_id=member.id, incarnation=member.incarnation, statements=statements, what=what)
            stream.txn.begin(self.now_s, self.quorum.level, timeout_s=math.inf)
            self.streams.append(stream)
            self._at(self.rng.uniform(0.001, 0.02), "stream_step", member.id, stream)
        elif await self.begin(member.id, statements, self.quorum.level, what=what) is not None:
            self.txns_left -= 1

    async def _on_stream_step(self, member_id: int, stream: OpenStream) -> None:
        """The stream's next statement, as the server's session runs it, or its COMMIT once
        all are sent. The client gives up on a refusal; its connection dies with its
        member's process."""
        member = self.members[member_id]
        writer, driver = member.writer, member.driver
        ended = (writer is None or driver is None or member.incarnation != stream.incarnation
                 or driver.write_refusal(self.now_s) is not None)
        txn = stream.txn
        if not ended and stream.sent < len(stream.statements):
            assert writer is not None
            sql, binds = stream.statements[stream.sent]
            txn.statement(q.Level.ONE)
            try:
                _, captured = await writer.stream_execute(txn.captured, sql, binds, quorum=True)
            except TxnConflict as exc:
                self.stream_conflicts += 1
                txn.conflicted(str(exc))
                ended = True
            except SqlError:
                ended = True
            else:
                txn.ran(captured)
                txn.check_invariants()
                stream.sent += 1
                self._at(self.rng.uniform(0.001, 0.03), "stream_step", member_id, stream)
                return
        self.streams.remove(stream)
        commit = txn.finish(commit=False) if ended else txn.finish(commit=True)
        txn.check_invariants()
        if commit is None:
            return
        captured = commit.captured
        assert writer is not None and isinstance(captured, Captured)
        try:
            await writer.check_stream(captured)
        except TxnConflict:
            self.stream_conflicts += 1
            return
        await self._begin_captured(member, captured, commit.level, what=stream.what)

    async def begin(self, member_id: int, statements: Sequence[Statement], level: q.Level = q.Level.QUORUM, *,
                    what: Any = None) -> Client | None:
        """A client's transaction at `member_id`, as the server's writer and QuorumHost.commit
        take it: the statements run in one transaction whose rows are captured with the
        versions read and rolled back; its PENDING record goes to the metastore; then the
        driver begins it. None when there is nothing to write (or a statement failed)."""
        member = self.members[member_id]
        writer, driver, engine, records = member.writer, member.driver, member.engine, member.records
        if writer is None or driver is None or engine is None or records is None:
            return None
        captured = None
        try:
            for sql, binds in statements:
                _, captured = await writer.stream_execute(captured, sql, binds, quorum=True)
        except SqlError:
            return None
        return await self._begin_captured(member, captured, level, what=what)

    async def _begin_captured(self, member: Member, captured: Captured | None, level: q.Level, *,
                              what: Any) -> Client | None:
        """A captured transaction's PENDING record, then the driver begins it, as
        QuorumHost.commit does."""
        driver, engine, records = member.driver, member.engine, member.records
        if driver is None or engine is None or records is None or captured is None or not captured.rows:
            return None
        member_id = member.id
        txn_id = engine.hlc.now(self._clock_ms())
        members = frozenset(self.members)
        reads = {key: q.Version(hlc=v[0], origin=v[1]) if v else q.NO_VERSION for key, v in captured.reads.items()}
        records.begun(txn_id, members=members, level=level, keys=reads, sync=True)
        member.captured[txn_id] = captured
        client = self.clients[txn_id] = Client(txn_id=txn_id, coordinator=member_id, incarnation=member.incarnation,
                                               level=level, deadline_s=self.now_s + TXN_TIMEOUT_S, what=what)
        await self._do(member, driver.txn_begin(self.now_s, txn_id, reads=reads, members=members, level=level,
                                                deadline_s=client.deadline_s))
        return client

    async def _txn_tick(self, member: Member) -> None:
        """As the server's QuorumHost.run: tick the cores, and every `replication_timeout`
        tell the members of each undecided transaction of ours that we are alive."""
        driver = member.driver
        assert driver is not None
        await self._do(member, driver.txn_tick(self.now_s))
        if self.now_s >= member.next_gc_s and member.records is not None:
            member.next_gc_s = self.now_s + GC_INTERVAL_S
            self.collected += member.records.collect(
                driver, self.now_s, now_ms=self._clock_ms(), members=frozenset(self.members),
                min_retention_ms=GC_MIN_RETENTION_MS, max_retention_ms=GC_MAX_RETENTION_MS)
        if self.now_s < member.next_heartbeat_s:
            return
        member.next_heartbeat_s = self.now_s + TIMEOUT_S
        by_member: dict[int, list[int]] = {}
        for txn_id, to in driver.txn_unfinished().items():
            for other in sorted(to):
                by_member.setdefault(other, []).append(txn_id)
        for other, ids in by_member.items():
            self._txn_send(member.id, other, "heartbeat", tuple(ids))

    async def _txn_act(self, member: Member, action: Any) -> None:
        """Carry out an action of the member's coordinator or participant, as QuorumHost does."""
        driver, records = member.driver, member.records
        assert driver is not None and records is not None
        if isinstance(action, q.Prepared):
            self.prepared_by.setdefault(action.txn_id, set()).add(member.id)
        elif isinstance(action, q.SendPrepare):
            for other in sorted(action.to):
                self._txn_send(member.id, other, "prepare", action.txn_id, dict(action.reads), action.members)
        elif isinstance(action, q.DecideCommit):
            await self._write_decided(member, action)
        elif isinstance(action, q.SendCommit):
            record = member.decided_rows.pop(action.txn_id, None)
            if record is not None:
                for other in sorted(action.to):
                    self._txn_send(member.id, other, "commit", action.txn_id, record)
        elif isinstance(action, q.DecideAbort):
            member.captured.pop(action.txn_id, None)
            records.decided(action.txn_id, TxnStatus.ABORTED)
        elif isinstance(action, q.SendAbort):
            for other in sorted(action.to):
                self._txn_send(member.id, other, "abort", action.txn_id)
        elif isinstance(action, q.ReleaseIntents):
            driver.txn_abort(self.now_s, action.txn_id)
        elif isinstance(action, q.QueryDecision):
            coordinator = driver.txn_coordinator(action.txn_id)
            for other in sorted(action.ask):
                self._txn_send(member.id, other, "query", action.txn_id, coordinator)
        elif isinstance(action, q.SendDecision):
            self._txn_send(member.id, action.to, "decision", action.txn_id, action.decision)
        elif isinstance(action, q.AckClient | q.FailClient):
            client = self.clients.get(action.txn_id)
            if client is not None and client.incarnation == member.incarnation and client.coordinator == member.id:
                if isinstance(action, q.AckClient):
                    client.row = (action.origin, action.lsn)
                else:
                    client.error = action.error

    async def _write_decided(self, member: Member, action: q.DecideCommit) -> None:
        """The decision is our next WAL row (QuorumHost._write_row): written and applied
        through the apply path, reported to the coordinator, then synced for our own word
        that it is durable."""
        writer, driver = member.writer, member.driver
        assert writer is not None and driver is not None
        prepared = self.prepared_by.get(action.txn_id, set())
        txn = driver.coordinator.txns[action.txn_id]
        assert len(prepared & txn.members) >= q.needed(txn.level, len(txn.members)), (
            f"seed {self.seed}: transaction {action.txn_id:#x} commits with {sorted(prepared)} prepared "
            f"of {sorted(txn.members)}")
        captured = member.captured.pop(action.txn_id)
        try:
            record = await writer.commit_captured(captured, txn_id=action.txn_id, min_stamp=action.min_stamp)
        except (ApplyError, SqlError, WriteFailed) as exc:
            client = self.clients.get(action.txn_id)
            if client is not None:
                client.error = f"the transaction's row could not be written: {exc}"
            await self._settle(member)
            await self._do(member, driver.txn_write_failed(self.now_s, action.txn_id))
            return
        self.acked.append((record.origin, record.lsn, record.payload))
        self._last_ack[(record.origin, record.lsn)] = record.payload
        await self._settle(member)
        member.decided_rows[action.txn_id] = record
        await self._do(member, driver.txn_committed(self.now_s, action.txn_id, record.origin, record.lsn))
        if member.engine is not None and member.engine.durable_vclock.get(record.origin) >= record.lsn:
            self._on_synced(member, False)  # wal_mode = fsync: the flush was the sync
            await self._settle(member)
        else:
            self._at(SYNC_AFTER_S, "sync", member.id, member.incarnation)

    async def _on_sync(self, member_id: int, incarnation: int) -> None:
        """The fsync a coordinator asks for its row, run later as the server's syncer task
        runs it: an OS crash may come first."""
        member = self.members[member_id]
        if member.writer is not None and member.incarnation == incarnation:
            await member.writer.sync_wal()
            await self._settle(member)

    def _txn_send(self, src: int, dst: int, kind: str, *payload: Any) -> None:
        """A quorum message on the pair's request link: FIFO, delayed; lost when the pair is
        partitioned, when either end crashes before it arrives, at the seed's whim while
        faults last, or when the scenario drops it."""
        if frozenset({src, dst}) in self.partitioned or self.drop_txn(src, dst, kind):
            return
        if not self.healed and self.rng.random() < self.faults.txn_drop_p:
            return
        pair = (src, dst)
        deliver = max(self.now_s + self.rng.uniform(self.faults.delay_min_s, self.faults.delay_max_s),
                      self._txn_last_delivery.get(pair, 0.0))
        self._txn_last_delivery[pair] = deliver
        incarnations = (self.members[src].incarnation, self.members[dst].incarnation)
        heapq.heappush(self._queue, (deliver, next(self._seq), "txn_deliver", (src, dst, incarnations, kind, payload)))

    async def _on_txn_deliver(self, src: int, dst: int, incarnations: tuple[int, int], kind: str,
                              payload: tuple[Any, ...]) -> None:
        member = self.members[dst]
        if (self.members[src].incarnation, member.incarnation) != incarnations or member.records is None:
            return
        if frozenset({src, dst}) in self.partitioned:
            return
        await getattr(self, f"_txn_{kind}")(member, src, *payload)

    async def _txn_prepare(self, member: Member, src: int, txn_id: int, reads: dict[q.Key, q.Version],
                           members: frozenset[int]) -> None:
        driver, records = member.driver, member.records
        assert driver is not None and records is not None
        answer = driver.txn_prepare(self.now_s, txn_id, coordinator=src, members=members, reads=reads,
                                    view=frozenset(self.members))
        if isinstance(answer, q.Prepared):
            records.prepared(txn_id, coordinator=src, members=members, keys=reads, sync=True)
            self.prepared_by.setdefault(txn_id, set()).add(member.id)
        if answer is not None:
            self._txn_send(member.id, src, "answer", answer)

    async def _txn_answer(self, member: Member, src: int, answer: q.Prepared | q.Conflicted) -> None:
        assert member.driver is not None
        await self._do(member, member.driver.txn_answered(self.now_s, src, answer))

    async def _txn_commit(self, member: Member, src: int, txn_id: int, record: Record) -> None:
        """QuorumHost.serve for COMMIT: the row is applied when it is the next of its
        origin (else the relay brings it), and the answer is what we hold."""
        driver, writer, engine = member.driver, member.writer, member.engine
        assert driver is not None and writer is not None and engine is not None
        driver.txn_heartbeat(self.now_s, txn_id)
        if admit(engine.pending_vclock.get(record.origin), record.lsn) is Admission.NEXT:
            try:
                await writer.apply([record], took=partial(driver.txn_commit_took, self.now_s) if driver.tracing else None)
            except (ApplyError, WriteFailed, WalError):
                pass  # the relay brings the row again
            await self._settle(member)
        if member.engine is not None:
            self._txn_send(member.id, src, "held", member.engine.vclock.to_dict())

    async def _txn_held(self, member: Member, src: int, vclock: dict[int, int]) -> None:
        assert member.driver is not None
        await self._do(member, member.driver.txn_durable(self.now_s, src, vclock))

    async def _txn_abort(self, member: Member, src: int, txn_id: int) -> None:
        assert member.driver is not None and member.records is not None
        member.driver.txn_abort(self.now_s, txn_id)
        member.records.decided(txn_id, TxnStatus.ABORTED)

    async def _txn_heartbeat(self, member: Member, src: int, txn_ids: tuple[int, ...]) -> None:
        assert member.driver is not None
        for txn_id in txn_ids:
            member.driver.txn_heartbeat(self.now_s, txn_id)

    async def _txn_query(self, member: Member, src: int, txn_id: int, coordinator: int) -> None:
        assert member.driver is not None
        await self._do(member, member.driver.txn_query(self.now_s, txn_id, coordinator=coordinator, asker=src))

    async def _txn_decision(self, member: Member, src: int, txn_id: int, decision: q.Decision) -> None:
        assert member.driver is not None and member.records is not None
        member.driver.txn_decision(self.now_s, txn_id, decision)
        if decision is q.Decision.ABORT:
            member.records.decided(txn_id, TxnStatus.ABORTED)

    def _txns_settled(self) -> bool:
        """No client waits, no transaction is undecided, no intent is held."""
        for member in self.members.values():
            if member.driver is None:
                return False
            if member.driver.participant.pending or member.driver.txn_unfinished():
                return False
        return not any(self._waiting(client) for client in self.clients.values())

    def _waiting(self, client: Client) -> bool:
        """A client still waits: its coordinator is the process it asked, and its deadline
        (with the server's slack) has not passed."""
        if client.row is not None or client.error is not None:
            return False
        return (self.members[client.coordinator].incarnation == client.incarnation
                and self.now_s < client.deadline_s + 2 * TICK_S)

    # ---------------------------------------------------------------- a scenario's steps

    async def _on_script(self, step: Callable[[Simulation], Any]) -> None:
        result = step(self)
        if hasattr(result, "__await__"):
            await result

    async def partition(self, *sides: Sequence[int]) -> None:
        """Cut every pair of members on different sides until the heal."""
        for a, b in itertools.combinations(sides, 2):
            for x in a:
                for y in b:
                    self.partitioned.add(frozenset({x, y}))
        for link in list(self.links.values()):
            if frozenset({link.applier_of, link.relay_on}) in self.partitioned:
                await self._cut(link.conn, "partition")

    async def crash(self, member_id: int) -> None:
        """A process crash; the member restarts `restart_after_s` later."""
        member = self.members[member_id]
        if member.engine is not None:
            await self._crash(member, os_crash=False)

    def pause(self, member_id: int, duration_s: float) -> None:
        """The member's process stops for `duration_s` (a long GC, a stopped VM): its
        events wait until it resumes. A member down (crashed) or paused already is left
        as it is: the seed's faults may have come first."""
        if self.members[member_id].engine is None or member_id in self.paused:
            return
        self.paused[member_id] = []
        self.trace({"event": "Pause", "member": member_id, "t": self.now_s})
        self._at(duration_s, "resume", member_id)

    async def _on_resume(self, member_id: int) -> None:
        """What waited for the member is taken in the order it came, before anything later."""
        held = self.paused.pop(member_id)
        self.trace({"event": "Resume", "member": member_id, "t": self.now_s})
        for kind, args in held:
            heapq.heappush(self._queue, (self.now_s, next(self._seq), kind, args))

    def _held(self, kind: str, args: tuple[Any, ...]) -> bool:
        """An event addressed to a paused member waits; a datagram past its socket buffer
        is lost."""
        index = _ADDRESSED.get(kind)
        if index is None or args[index] not in self.paused:
            return False
        held = self.paused[args[index]]
        if kind == "swim_deliver":
            assert self.swim is not None
            if sum(k == kind for k, _ in held) >= self.swim.buffer_datagrams_max:
                self._swim_lose(*args)
                return True
        held.append((kind, args))
        return True

    # ---------------------------------------------------------------- SWIM

    async def _on_swim_tick(self, member_id: int) -> None:
        assert self.swim is not None
        self._at(self.swim.settings().ping_timeout_s / 2, "swim_tick", member_id)
        member = self.members[member_id]
        if member.driver is not None:
            await self._do(member, member.driver.swim_tick(self.now_s))

    def _swim_act(self, member: Member, action: swim.Action) -> None:
        """As the server's SwimHost: a state change is noted (the log's line), a message is
        encoded and sent to its address."""
        if isinstance(action, swim.StateChanged):
            self.swim_changes.append(SwimChange(self.now_s, member.id, member.swim_lives, action.member, action.state,
                                                action.incarnation))
            return
        if isinstance(action, swim.SendPingReq):
            data = swim_wire.encode("ping_req", SWIM_UUID, member.id, action.seq, action.target, action.updates)
        else:
            kind = "ping" if isinstance(action, swim.SendPing) else "ack"
            data = swim_wire.encode(kind, SWIM_UUID, member.id, action.seq, None, action.updates)
        self._swim_send(member.id, self.swim_addresses[action.address], data)

    def _swim_send(self, src: int, dst: int, data: bytes) -> None:
        """A datagram: delayed by the seed, not ordered; lost across a partition and, until
        the heal, at `drop_p`."""
        assert self.swim is not None
        if frozenset({src, dst}) in self.partitioned or (
                not self.healed and self.swim_rng.random() < self.swim.drop_p):
            self._swim_lose(src, dst, data)
            return
        delay_s = self.swim_rng.uniform(self.faults.delay_min_s, self.faults.delay_max_s)
        self._at(delay_s, "swim_deliver", src, dst, data)

    async def _on_swim_deliver(self, src: int, dst: int, data: bytes) -> None:
        member = self.members[dst]
        if member.driver is None or frozenset({src, dst}) in self.partitioned:
            self._swim_lose(src, dst, data)
            return
        kind, sender, seq, target, updates = swim_wire.decode(data, SWIM_UUID)
        await self._do(member, member.driver.swim_received(self.now_s, kind, sender, seq, target, updates))

    def _swim_lose(self, src: int, dst: int, data: bytes) -> None:
        self.swim_lost += 1
        if self._trace_out is not None:
            updates = swim_wire.decode(data, SWIM_UUID)[4]
            self.trace({"event": "Lose", "member": dst, "peer": src, "updates": traced_updates(updates),
                        "t": self.now_s})

    def swim_view(self, member_id: int) -> dict[int, tuple[str, int]]:
        """The member's SWIM view: each member's state and incarnation, as it holds them."""
        driver = self.members[member_id].driver
        assert driver is not None and driver.swim is not None
        return {m.member: (m.state.value, m.incarnation) for m in driver.swim.view()}

    def swim_agreed(self) -> bool:
        """Every member runs, and every view holds every member ALIVE at the same
        incarnation."""
        if self.paused or any(m.driver is None for m in self.members.values()):
            return False
        views = [self.swim_view(i) for i in self.members]
        return all(view == views[0] for view in views) and all(st == "alive" for st, _ in views[0].values())

    # ---------------------------------------------------------------- checks

    def _clock_of(self, member: Member) -> dict[int, int]:
        assert member.engine is not None
        clock = member.engine.vclock
        return {m: clock.get(m) for m in sorted(self.members)}

    def vclocks(self) -> dict[int, dict[int, int]]:
        return {i: m.engine.vclock.replicated().to_dict() for i, m in self.members.items() if m.engine}

    def _converged(self) -> bool:
        if any(m.driver is None or m.driver.recovering for m in self.members.values()):
            return False
        clocks = list(self.vclocks().values())
        if not all(c == clocks[0] for c in clocks):
            return False
        if self.swim is not None and not self.swim_agreed():
            return False
        return self.quorum is None or self._txns_settled()

    def check_invariants(self) -> None:
        """After every event (TigerBeetle style): every engine's, and every driver's (its
        cores', and no relay ahead of its member's durable cut for rows of the member's own
        origin, FINDINGS F1). The driver checks its own after each of its events too; an
        event of the engine alone (a write, a flush, a crash) is checked here."""
        for member in self.members.values():
            if member.engine is None:
                continue
            assert member.driver is not None
            member.engine.check_invariants()
            member.driver.check_invariants()

    def check(self) -> None:
        """The end-of-run checks; each failure names the seed.

        Every member holds each `(origin, lsn)` once, all with one payload, and that payload
        is one a client was acknowledged for; an acknowledged write whose origin made it
        durable is held by every member byte-for-byte (under `wal_mode = write` an OS crash
        may lose a write that was not durable yet, whose LSN the origin then reuses). The
        tables, versions and latent images of every member are those the reference model
        of last-writer-wins (`replicaset.testing.lww`) computes from the rows held: members
        that agree with each other but not with the rules fail here."""
        where = f"seed {self.seed}"
        self.final_vclocks = self.vclocks()
        digests = {i: m.engine.table_digest() for i, m in self.members.items() if m.engine}
        assert len(set(map(str, digests.values()))) == 1, f"{where}: table digests differ: {digests}"
        payloads: dict[tuple[int, int], bytes] = {}
        held_by: dict[int, set[tuple[int, int]]] = {}
        records: list[Record] = []
        for i, member in self.members.items():
            assert member.engine is not None
            seen = held_by.setdefault(i, set())
            for record in member.engine.wal.read_from(VClock()):
                key = (record.origin, record.lsn)
                if record.origin == 0:
                    continue
                assert key not in seen, f"{where}: member {i} holds {key} twice"
                seen.add(key)
                if key not in payloads:
                    payloads[key] = record.payload
                    records.append(record)
                assert payloads[key] == record.payload, f"{where}: {key} has two payloads"
        acked: dict[tuple[int, int], list[bytes]] = {}
        for origin, lsn, payload in self.acked:
            acked.setdefault((origin, lsn), []).append(payload)
        for key, payload in payloads.items():
            assert payload in acked.get(key, []), f"{where}: {key[0]}:{key[1]} holds a payload no client wrote there"
        for origin, lsn, payload in self.acked:
            if (origin, lsn, payload) not in self.durable:
                continue
            for i, seen in held_by.items():
                assert (origin, lsn) in seen, (
                    f"{where}: acknowledged durable write {origin}:{lsn} is lost on member {i}")
            assert payloads[(origin, lsn)] == payload, (
                f"{where}: acknowledged durable write {origin}:{lsn} was overwritten by another write at its LSN")
        if self.quorum is not None:
            self._check_quorum(records)
        expected = lww.Model().add_all(records).state()
        for i, member in self.members.items():
            assert member.engine is not None
            wrong = lww.differences(expected, lww.engine_state(member.engine))
            assert not wrong, f"{where}: member {i} differs from the reference model: " + "; ".join(wrong)

    def _check_quorum(self, records: list[Record]) -> None:
        """Each quorum transaction's row is held at one `(origin, lsn)` only, every member
        holds the row of every transaction acknowledged at its level, and the workload's
        own checks hold."""
        where = f"seed {self.seed}"
        rows: dict[int, tuple[int, int]] = {}
        for record in records:
            if record.type == RecordType.DML:
                txn_id = DmlPayload.unpack(record.payload).quorum_txn
                if txn_id is not None:
                    assert txn_id not in rows, f"{where}: transaction {txn_id:#x} holds two rows"
                    rows[txn_id] = (record.origin, record.lsn)
        for client in self.clients.values():
            if client.row is not None:
                assert rows.get(client.txn_id) == client.row, f"{where}: acknowledged {client.txn_id:#x} is lost"
            if client.error is not None and not isinstance(client.error, str):
                assert client.txn_id not in rows, f"{where}: failed {client.txn_id:#x} committed"
        assert self.quorum is not None
        self.quorum.check(self)

    def close(self) -> None:
        for member in self.members.values():
            if member.records is not None:
                member.records.meta.close()
                member.records = None
            if member.engine is not None:
                member.engine.close()
                member.engine = member.writer = None
