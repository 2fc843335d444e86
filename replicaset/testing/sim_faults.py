"""A seeded run of faults and writes on the server's own hosts in the simulated world.

Three members take inserts of their own ids and updates and deletes of a few shared keys,
at ONE and QUORUM in turn, while a schedule drawn from the seed kills (kill -9), stops or
powers off a member and serves it again, replaces a member (killed, removed, wiped, and a
new instance joined at its address), cuts links between two members and heals them, makes
every link slow (20-300 ms) or drops 30 % of the datagrams (SWIM's) for a while. At most
one member is down at a time, so a quorum is always there to be found. At the end every
fault is undone and the checks are those a user would make: the members converge, each
holds every insert a client was told is done, the members' tables are equal, and no member
logged an error.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import trio

from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.links import PeerError
from replicaset.storage import Engine
from replicaset.storage.rows import DmlPayload
from replicaset.testing import lww
from replicaset.testing.sim_set import SimMember, SimSet
from wal import LOCAL_ORIGIN, Record, RecordType
from wal.segment import list_segments, scan_segment

SHARED_KEYS = 5
ABORTED = frozenset({ErrorCode.TRANSACTION_CONFLICT, ErrorCode.SYNC_QUORUM_TIMEOUT})
LOST_LINK = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


@dataclass
class FaultRun:
    seed: int
    faults: list[str] = field(default_factory=list)  # what the schedule did, for the report
    acknowledged: set[int] = field(default_factory=set)  # ids a client was told are inserted
    acknowledged_quorum: set[int] = field(default_factory=set)  # of those, at QUORUM
    # Ids whose rows an OS crash took from their member's WAL before an fsync: under
    # `wal_mode = write` an insert at ONE is acknowledged once written, not fsynced.
    lost_in_os_crash: set[int] = field(default_factory=set)
    # Ids of a replaced member's own inserts its wiped WAL held: under ONE, acknowledged
    # once on its disk, they may be nowhere else.
    wiped: set[int] = field(default_factory=set)
    attempts: int = 0
    refused: int = 0  # writes aborted or cut off: not acknowledged, maybe committed
    tables: list[list[list[Any]]] = field(default_factory=list)  # each member's `ids` at the end
    shared: list[list[list[Any]]] = field(default_factory=list)  # each member's `shared` at the end
    # Per member, where its tables differ from what last-writer-wins makes of every row
    # any member's WAL holds (`replicaset.testing.lww`): members that agree with each
    # other but not with the rules show here.
    model_differences: list[list[str]] = field(default_factory=list)
    model_checked: bool = False  # no WAL reaches back to the first row once the bootstrap member is replaced


def failures(run: FaultRun, logs: list[dict[str, Any]]) -> list[str]:
    """What a user would call wrong with the run, one line each; none when it passed."""
    where = f"seed {run.seed}, faults {run.faults}"
    found = []
    if not run.faults:
        found.append(f"{where}: the schedule made no fault")
    if len(run.acknowledged) <= 50:
        found.append(f"{where}: the writers hardly wrote ({len(run.acknowledged)} inserts acknowledged)")
    may_be_lost = run.lost_in_os_crash | run.wiped  # only if acknowledged at ONE
    for number, table in enumerate(run.tables, 1):
        missing = run.acknowledged - {row[0] for row in table}
        if missing & run.acknowledged_quorum:
            found.append(f"{where}: member {number} lacks acknowledged QUORUM inserts "
                         f"{sorted(missing & run.acknowledged_quorum)[:10]}")
        if missing - may_be_lost:
            found.append(f"{where}: member {number} lacks acknowledged inserts {sorted(missing - may_be_lost)[:10]}")
    if not run.tables[0] == run.tables[1] == run.tables[2]:
        found.append(f"{where}: the members hold different rows")
    if not run.shared[0] == run.shared[1] == run.shared[2]:
        found.append(f"{where}: the members settled shared keys apart")
    for number, wrong in enumerate(run.model_differences, 1):
        if wrong:
            found.append(f"{where}: member {number} differs from last-writer-wins: " + "; ".join(wrong))
    errors = [line for line in logs if line["log_level"] in ("error", "critical")]
    if errors:
        found.append(f"{where}: errors logged: {errors[:3]}")
    return found


async def run_faults(rs: SimSet, seed: int, *, seconds: float = 20.0,
                     pause_s: tuple[float, float] = (0.002, 0.02)) -> FaultRun:
    """The workload (each writer pausing `pause_s` between writes) and the fault schedule
    for `seconds` of simulated time, every fault undone at the end, and the set converged;
    what happened, for the checks."""
    run = FaultRun(seed=seed)
    rng = random.Random(seed)
    members = await rs.three("CREATE TABLE ids(id INTEGER PRIMARY KEY, member INTEGER)",
                             "CREATE TABLE shared(k INTEGER PRIMARY KEY, v TEXT)")  # replaced in place by `replace`
    down: set[int] = set()  # the places in `members` of members not serving
    async with trio.open_nursery() as nursery:
        for slot in range(len(members)):
            nursery.start_soon(_writer, rs, run, slot, down, random.Random(rng.random()), 1_000_000 * (slot + 1),
                               pause_s)
        await _schedule(rs, run, members, down, random.Random(rng.random()), trio.current_time() + seconds)
        nursery.cancel_scope.cancel()
    await rs.converged(timeout_s=60.0)
    run.tables = [await rs.rows(m, "SELECT id FROM ids ORDER BY id") for m in members]
    run.shared = [await rs.rows(m, "SELECT k, v FROM shared ORDER BY k") for m in members]
    engines = [m.node.engine for m in members if m.node is not None]
    # A joiner's WAL starts at the checkpoint it joined from: the model needs one that
    # starts at the first row, the bootstrap member's, unless it was replaced.
    if any(not engine.wal.segments()[0][1].to_dict() for engine in engines):
        run.model_checked = True
        run.model_differences = _against_the_model(engines)
    return run


def _against_the_model(engines: list[Engine]) -> list[list[str]]:
    records: dict[tuple[int, int], Record] = {}
    for engine in engines:
        wal = engine.wal
        for record in wal.read_from(wal.segments()[0][1]):
            if record.origin != LOCAL_ORIGIN:
                records.setdefault((record.origin, record.lsn), record)
    expected = lww.Model().add_all(records[key] for key in sorted(records)).state()
    return [lww.differences(expected, lww.engine_state(engine)) for engine in engines]


async def _writer(rs: SimSet, run: FaultRun, slot: int, down: set[int], rng: random.Random,
                  first_id: int, pause_s: tuple[float, float]) -> None:
    for i in range(first_id, first_id + 1_000_000):
        await trio.sleep(rng.uniform(*pause_s))
        if slot in down:
            continue
        member = rs.members[slot]
        consistency = "quorum" if i % 2 else "one"
        draw = rng.random()
        if draw < 0.5:
            sql, binds = "INSERT INTO ids VALUES (?, ?)", [i, member.id]
        elif draw < 0.85:
            sql, binds = "INSERT OR REPLACE INTO shared VALUES (?, ?)", [rng.randrange(SHARED_KEYS), f"{member.id}-{i}"]
        else:  # tombstones, for last-writer-wins and their purge
            sql, binds = "DELETE FROM shared WHERE k = ?", [rng.randrange(SHARED_KEYS)]
        run.attempts += 1
        try:
            await rs.execute(member, sql, binds, consistency=consistency)
        except PeerError as exc:
            if exc.code not in ABORTED and exc.code != ErrorCode.READONLY:
                raise
            run.refused += 1
            continue
        except LOST_LINK:
            run.refused += 1
            continue
        if sql.startswith("INSERT INTO ids"):
            run.acknowledged.add(i)
            if consistency == "quorum":
                run.acknowledged_quorum.add(i)


async def _schedule(rs: SimSet, run: FaultRun, members: list[SimMember], down: set[int],
                    rng: random.Random, end_s: float) -> None:
    """Faults until `end_s`, each undone before the next (so none is left at the end)."""
    kinds = ("kill", "stop", "cut", "slow", "lossy", "replace") + (("os_crash",) if rs.can_os_crash else ())
    while trio.current_time() < end_s:
        await trio.sleep(rng.uniform(0.5, 2.0))
        kind = rng.choice(kinds)
        slot = rng.randrange(len(members))
        victim = members[slot]
        if kind in ("slow", "lossy"):
            run.faults.append(f"{trio.current_time():.3f} {kind}")
            await _degrade(rs, kind, rng.uniform(0.5, 4.0))
            continue
        if kind == "cut":
            other = rng.choice([m for m in members if m is not victim])
            run.faults.append(f"{trio.current_time():.3f} cut {victim.id}-{other.id}")
            rs.network.cut(victim.host, other.host)
            await trio.sleep(rng.uniform(0.2, 3.0))
            rs.network.heal(victim.host, other.host)
            continue
        run.faults.append(f"{trio.current_time():.3f} {kind} {victim.id}")
        down.add(slot)
        if kind == "replace":
            through = rng.choice([m for m in members if m is not victim])
            await rs.crash(victim)
            run.wiped |= _own_inserts(victim)
            victim = await rs.replace(victim, through)
            run.faults[-1] += f" by {victim.id}"
        else:
            if kind == "os_crash":
                run.lost_in_os_crash |= await _os_crash(rs, victim)
            else:
                await (rs.crash(victim) if kind == "kill" else rs.stop(victim))
            await trio.sleep(rng.uniform(0.2, 3.0))
            await rs.start(victim)
            await rs.running(victim, timeout_s=60.0)
        down.discard(slot)


async def _degrade(rs: SimSet, kind: str, seconds: float) -> None:
    """Every link slow (20-300 ms), or 30 % of the datagrams lost, for `seconds`."""
    setting, value = ("latency_s", (0.02, 0.3)) if kind == "slow" else ("loss", 0.3)
    before = getattr(rs.network, setting)
    setattr(rs.network, setting, value)
    await trio.sleep(seconds)
    setattr(rs.network, setting, before)


async def _os_crash(rs: SimSet, member: SimMember) -> set[int]:
    """The member's machine loses power: the ids of its own inserts the crash took."""
    before = _own_inserts(member)
    await rs.os_crash(member)
    return before - _own_inserts(member)


def _own_inserts(member: SimMember) -> set[int]:
    """The ids of the member's own inserts its WAL holds (read only: a torn tail is left be)."""
    return {row.new["id"] for path in list_segments(member.data_dir / "wal")
            for _, record in scan_segment(path).records
            if record.origin == member.id and record.type == RecordType.DML
            for row in DmlPayload.unpack(record.payload).rows if row.table == "ids" and row.new}
