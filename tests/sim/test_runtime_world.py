"""The server's own hosts on simulated time and links (issue 33, "One host"): members built
as `replicaset bootstrap`, `join` and `serve` build them (`Node`, `runtime.server.serve`,
`runtime.join.join_async`), in one trio run under `MockClock`, on the simulated network
of `replicaset/testing/sim_world.py`. No socket, no thread, no wall clock: a run of seconds
of protocol time takes a fraction of a second, and a seed replays step for step."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.links import PeerError
from replicaset.testing.sim_set import SimMember, SimSet, WorldWatcher, simulate
from replicaset.testing.sim_world import SimNetwork

ROWS = 10  # keys the writers contend on
RETRIES_MAX = 50


class Steps(WorldWatcher):
    """Every task step: the simulated time, which task (by the order tasks were spawned in),
    none while a member stops."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, int, str]] = []
        self._ids: dict[Any, int] = {}

    def task_spawned(self, task: Any) -> None:
        self._ids[task] = len(self._ids)

    def before_task_step(self, task: Any) -> None:
        if self.world is not None and not self.world.stopping:
            self.steps.append((trio.current_time(), self._ids.get(task, -1), task.name))


async def three(rs: SimSet) -> list[SimMember]:
    return await rs.three("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")


async def write(rs: SimSet, member: SimMember, sql: str, binds: list[Any], consistency: str) -> int:
    """One write as an application makes it: retried while it is aborted (a conflict, or
    no quorum in time). How many times it was."""
    last = None
    for conflicts in range(RETRIES_MAX):
        try:
            await rs.execute(member, sql, binds, consistency=consistency)
            return conflicts
        except PeerError as exc:
            if exc.code not in (ErrorCode.TRANSACTION_CONFLICT, ErrorCode.SYNC_QUORUM_TIMEOUT):
                raise
            last = exc
            await trio.sleep(0.01)
    raise AssertionError(f"{sql} aborted {RETRIES_MAX} times, last: {last} at {trio.current_time()}")


async def contend(rs: SimSet, members: list[SimMember], writes: int) -> int:
    """Every member updates the same few rows at once, at ONE and QUORUM in turn; the
    conflicts its QUORUM writes met."""
    conflicts = 0

    async def writer(member: SimMember) -> None:
        nonlocal conflicts
        for i in range(writes):
            conflicts += await write(rs, member, "INSERT OR REPLACE INTO t VALUES (?, ?)",
                                     [i % ROWS, f"{member.id}-{i}"], "one" if i % 2 else "quorum")

    async with trio.open_nursery() as nursery:
        for member in members:
            nursery.start_soon(writer, member)
    return conflicts


def no_trouble(logs: list[dict[str, Any]]) -> None:
    trouble = [line for line in logs if line["log_level"] in ("warning", "error", "critical")]
    assert not trouble, trouble[:5]


def test_three_members_of_the_servers_own_code_converge_under_contention(tmp_path: Path) -> None:
    async def scenario(rs: SimSet) -> Any:
        members = await three(rs)
        conflicts = await contend(rs, members, 20)
        vclocks = await rs.converged()
        tables = [await rs.rows(m, "SELECT id, v FROM t ORDER BY id") for m in members]
        return conflicts, vclocks, tables, trio.current_time()

    (conflicts, vclocks, tables, elapsed_s), logs = simulate(tmp_path, 1, scenario)
    assert len({tuple(sorted(v.items())) for v in vclocks}) == 1
    assert tables[0] == tables[1] == tables[2]
    assert [row[0] for row in tables[0]] == list(range(ROWS))
    assert conflicts > 0, "the writers never met: the scenario tests no contention"
    joined = [line for line in logs if line["event"] == "joined"]
    assert sorted(line["instance_id"] for line in joined) == [2, 3]
    assert elapsed_s < 30
    no_trouble(logs)


@pytest.mark.parametrize("seed", [3, 11])
def test_a_seed_replays_step_for_step(tmp_path: Path, seed: int) -> None:
    """Contention, a member stopped and served again, a link cut and healed: the same seed
    takes the same steps at the same simulated times, to the end."""
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        await contend(rs, [first, second, third], 6)
        await rs.stop(third)
        await contend(rs, [first, second], 6)
        await rs.start(third)
        await rs.running(third)
        rs.network.cut(first.host, second.host)
        await contend(rs, [second, third], 4)
        rs.network.heal(first.host, second.host)
        return await rs.converged()

    runs = []
    for attempt in range(2):
        steps = Steps()
        vclocks, logs = simulate(tmp_path / f"run{attempt}", seed, scenario, instruments=[steps])
        before_stop = [(line["event"], line.get("instance_id")) for line in logs if line["event"] != "stopped"]
        runs.append((steps.steps, vclocks, before_stop))
    assert runs[0][0] == runs[1][0], "the two runs of one seed took different steps"
    assert runs[0][1:] == runs[1][1:]
    other = Steps()
    simulate(tmp_path / "other", seed + 1, scenario, instruments=[other])
    assert other.steps != runs[0][0], "another seed took the very same steps: the seed chooses nothing"


def test_a_member_cut_off_takes_no_quorum_write_and_catches_up_once_healed(tmp_path: Path) -> None:
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        await write(rs, first, "INSERT INTO t VALUES (1, 'before')", [], "quorum")
        await rs.converged()
        for other in (first, second):
            rs.network.cut(third.host, other.host)
        for i in range(2, 12):
            await write(rs, first if i % 2 else second, "INSERT INTO t VALUES (?, 'cut')", [i], "quorum")
        with pytest.raises(PeerError) as refused:
            await rs.execute(third, "INSERT INTO t VALUES (100, 'alone')", consistency="quorum")
        assert await rs.rows(third, "SELECT count(*) FROM t") == [[1]]
        await trio.sleep(12)  # past [cluster] dead_timeout_ms: free, on the simulated clock
        for other in (first, second):
            rs.network.heal(third.host, other.host)
        await rs.converged()
        return refused.value.code, [await rs.rows(m, "SELECT id, v FROM t ORDER BY id") for m in rs.members]

    (code, tables), logs = simulate(tmp_path, 5, scenario)
    assert code == ErrorCode.SYNC_QUORUM_TIMEOUT, code
    expected = [[1, "before"]] + [[i, "cut"] for i in range(2, 12)]
    assert tables == [expected] * 3, "a QUORUM write refused at the cut member left a row somewhere, or one is missing"
    seen = [(line["instance_id"], line["state"]) for line in logs if line["event"] == "member_state"
            and line["member"] == 3]
    assert (1, "dead") in seen and (2, "dead") in seen, "SWIM never declared the cut member dead"
    assert seen[-2:] == [(1, "alive"), (2, "alive")] or sorted(seen[-2:]) == [(1, "alive"), (2, "alive")], seen


def test_a_member_stopped_and_served_again_catches_up(tmp_path: Path) -> None:
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        await rs.stop(third)
        for i in range(20):
            await write(rs, first if i % 2 else second, "INSERT INTO t VALUES (?, 'meanwhile')", [i], "quorum")
        await rs.start(third)
        await rs.running(third)
        await rs.converged()
        return [await rs.rows(m, "SELECT count(*) FROM t") for m in rs.members]

    counts, logs = simulate(tmp_path, 9, scenario)
    assert counts == [[[20]]] * 3
    assert [line["instance_id"] for line in logs if line["event"] == "stopped"][:1] == [3]


LOST_LINK = (OSError, trio.BrokenResourceError, trio.ClosedResourceError)


def test_a_member_killed_under_load_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """kill -9 of a member while all three take inserts at ONE and QUORUM, then served
    again: every insert a client was told is done is on every member, once."""
    async def scenario(rs: SimSet) -> Any:
        members = await three(rs)
        acknowledged: list[int] = []
        killed = trio.Event()

        async def writer(member: SimMember, first_id: int) -> None:
            for i in range(first_id, first_id + 40):
                try:
                    await write(rs, member, "INSERT INTO t VALUES (?, 'x')", [i], "one" if i % 2 else "quorum")
                    acknowledged.append(i)
                except (PeerError, *LOST_LINK):
                    await killed.wait()  # its member is down: whether this one committed is unknown
                await trio.sleep(0.005)

        async def killer() -> None:
            await trio.sleep(0.05)
            await rs.crash(members[1])
            killed.set()
            await trio.sleep(1)
            await rs.start(members[1])

        async with trio.open_nursery() as nursery:
            for number, member in enumerate(members):
                nursery.start_soon(writer, member, 1000 * (number + 1))
            nursery.start_soon(killer)
        await rs.running(members[1])
        await rs.converged()
        return acknowledged, [await rs.rows(m, "SELECT id FROM t ORDER BY id") for m in members]

    (acknowledged, tables), logs = simulate(tmp_path, 13, scenario)
    assert tables[0] == tables[1] == tables[2]
    held = [row[0] for row in tables[0]]
    assert set(acknowledged) <= set(held), sorted(set(acknowledged) - set(held))
    assert len(acknowledged) > 60, "the writers hardly wrote: the kill met no load"
    own = [line["event"] for line in logs if line.get("instance_id") == 2]
    assert own.count("listening") == 2 and own.count("stopped") == 1, "the kill was a clean stop"
    assert own.index("recovering_own_rows") > own.index("listening"), "the start after the kill was taken for clean"


@pytest.mark.parametrize("through", [1, 3], ids=["finding_6a_named_by_the_join", "finding_5_joined_through"])
def test_a_joiner_whose_checkpoint_names_no_live_member_catches_up_from_the_others(tmp_path: Path,
                                                                                  through: int) -> None:
    """Reliability findings 5 and 6 (a). The joiner gets member 1's first checkpoint (served
    by member 1, or by member 3, which keeps the one it joined from), whose `_cluster` names
    members 1 and 2 only, and both are down before the joiner serves (member 1 killed,
    member 2 stopped). It must follow member 3 all the same: as a member the JOIN's end
    named (6 a), or as the member it joined through (5); and get every row from it."""
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        for i in range(10):
            await write(rs, second if i % 2 else third, "INSERT INTO t VALUES (?, 'before')", [i], "quorum")
        fourth = await rs.join(rs.members[through - 1], serve=False)
        await rs.crash(first)
        await rs.stop(second)
        await rs.start(fourth)
        with trio.fail_after(30):
            while rs.vclock(fourth) != rs.vclock(third):
                await trio.sleep(0.05)
        held = await rs.rows(fourth, "SELECT count(*) FROM t")
        await rs.start(first)
        await rs.start(second)
        await rs.converged()
        return held, [await rs.rows(m, "SELECT count(*) FROM t") for m in rs.members]

    (held, counts), logs = simulate(tmp_path, 17, scenario)
    assert held == [[10]], "the joiner did not get the rows from the member its checkpoint does not name"
    assert counts == [[[10]]] * 4
    served = [line["vclock"] for line in logs if line["event"] == "join_serving" and line["joiner_id"] == 4]
    assert served == [{1: 4}], "the joiner got another checkpoint than the first, which names members 1 and 2"


async def _pair(network: SimNetwork, listener: trio.abc.Listener[Any]) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    near = await network.at("10.0.0.2").connect("10.0.0.1", 1)
    return near, await listener.accept()


def test_a_simulated_link_delivers_in_order_and_fails_as_tcp_does_when_cut() -> None:
    async def main() -> None:
        network = SimNetwork(random.Random(1), latency_s=(0.001, 0.01))
        [listener], _ = await network.at("10.0.0.1").listen("10.0.0.1", 1)
        near, far = await _pair(network, listener)
        for i in range(20):
            await near.send_all(b"%d," % i)
        got = b""
        while got.count(b",") < 20:
            got += await far.receive_some(7)
        assert got == b"".join(b"%d," % i for i in range(20))
        network.cut("10.0.0.1", "10.0.0.2")
        with pytest.raises(trio.BrokenResourceError):
            await far.receive_some(10)
        with pytest.raises(trio.BrokenResourceError):
            await near.send_all(b"x")
        with pytest.raises(OSError):
            await network.at("10.0.0.2").connect("10.0.0.1", 1)
        network.heal("10.0.0.1", "10.0.0.2")
        near, far = await _pair(network, listener)
        await near.aclose()
        assert await far.receive_some(10) == b""
        with pytest.raises(trio.BrokenResourceError):
            await far.send_all(b"to nobody")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_coordinator_killed_and_removed_leaves_no_transaction_that_blocks_a_join(tmp_path: Path) -> None:
    """Reliability findings 4 and 2: member 2 is killed while it coordinates QUORUM
    inserts, so the others hold transactions of its prepared and undecided; it is removed
    (`box.remove(2)` once SWIM holds it dead) and never comes back. The others resolve
    those transactions by the removal rule, so a new member's join (a membership change)
    is not refused for good (4); the new member gets id 4, not the removed member's id,
    under which rows were written (2); and every acknowledged insert stays."""
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        acknowledged: list[int] = []

        async def writer() -> None:
            for i in range(1000):
                try:
                    await rs.execute(second, "INSERT INTO t VALUES (?, 'x')", [i], consistency="quorum")
                except (PeerError, *LOST_LINK):
                    return
                acknowledged.append(i)

        def prepared_of_second(member: SimMember) -> bool:
            assert member.node is not None
            return any(t.coordinator == 2 for t in member.node.driver.participant.pending.values())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            with trio.fail_after(5):  # past a few commits, until both hold one of member 2's prepared
                while len(acknowledged) < 3 or not (prepared_of_second(first) and prepared_of_second(third)):
                    await trio.sleep(0.0001)
            for other in (first, third):  # the decision never leaves member 2
                rs.network.cut(second.host, other.host)
            await rs.crash(second)
        await trio.sleep(11)  # past [cluster] dead_timeout_ms
        removed = await rs.eval(first, "box.remove(2)")
        fourth = await rs.join(first)
        await rs.converged()
        ids = [await rs.rows(m, "SELECT id FROM t ORDER BY id") for m in (first, third, fourth)]
        return acknowledged, removed, fourth.id, ids

    (acknowledged, removed, fourth_id, ids), logs = simulate(tmp_path, 19, scenario)
    assert removed[0]["removed"] == 2
    resolved = [line for line in logs if line["event"] == "txn_resolved_removed"]
    assert resolved, "no transaction of the killed coordinator was left undecided: the seed tests nothing"
    assert fourth_id == 4, "the removed member's id was given again, though its origin wrote rows"
    assert ids[0] == ids[1] == ids[2]
    assert set(acknowledged) <= {row[0] for row in ids[0]}


GC_SETTINGS = {
    "gc.interval_s": 1.0, "gc.min_retention_s": 2.0, "gc.max_retention_s": 6.0,
    "replication.delta_sync_threshold_seconds": 2.0, "replication.delta_sync_threshold_transactions": 50,
    "checkpoint_interval": 1.0, "wal_max_size": 64 * 1024,
}


def test_a_member_behind_every_log_rejoins_from_a_checkpoint_and_keeps_its_id(tmp_path: Path) -> None:
    """WAL GC, anti-entropy and re-join on the server's own hosts: member 3 is stopped while
    the others write, checkpoint every second and collect their logs past its vclock (its
    GC consumer expires after `gc.max_retention_s`); served again, it finds no member whose
    log reaches back to it, re-joins through one from a checkpoint under its own UUID, and
    ends with every row."""
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        third_uuid = third.identity.instance_uuid
        await rs.stop(third)
        for i in range(400):
            await write(rs, first if i % 2 else second, "INSERT INTO t VALUES (?, ?)", [i, "x" * 1000], "one")
            await trio.sleep(0.03)
        await trio.sleep(8)  # past gc.max_retention_s: the consumer of member 3 goes
        starts = [rs.vclock(m) for m in (first, second)]
        logs_start = [m.node.engine.wal.segments()[0][1].to_dict() for m in (first, second)]
        await rs.start(third)
        with trio.fail_after(60):
            while third.node is None or not third.node.driver.running or rs.vclock(third) != rs.vclock(first):
                await trio.sleep(0.05)
        counts = [await rs.rows(m, "SELECT count(*) FROM t") for m in rs.members]
        return third_uuid, third.identity, starts, logs_start, counts

    (uuid_before, identity, starts, logs_start, counts), logs = simulate(tmp_path, 23, scenario,
                                                                          settings=GC_SETTINGS)
    assert all(start.get(1, 0) > 0 for start in logs_start), f"no log was collected: {logs_start}"
    assert any(line["event"] == "rejoin" and line["instance_id"] == 3 for line in logs), "member 3 never re-joined"
    assert identity.instance_uuid == uuid_before and identity.instance_id == 3
    assert counts == [[[400]]] * 3
    refusals = {"subscribe_refused", "upstream_refused"}  # "join again from a checkpoint": what sends it to re-join
    errors = [line for line in logs if line["log_level"] in ("error", "critical") and line["event"] not in refusals]
    assert not errors, errors[:3]


def test_a_joined_member_killed_with_a_torn_wal_tail_starts_again(tmp_path: Path) -> None:
    """Reliability finding 1: a member that joined is killed mid-write and its WAL's last
    record is cut in half, so SQLite holds rows its WAL no longer does. It must start
    again, rebuilding from the checkpoint it joined from (kept in `snap/`) and its WAL,
    and get the rest from the others."""
    async def scenario(rs: SimSet) -> Any:
        first, second, third = await three(rs)
        for i in range(30):
            await write(rs, third, "INSERT INTO t VALUES (?, 'x')", [i], "one")
        await rs.crash(third)
        last = sorted((third.data_dir / "wal").iterdir())[-1]
        os.truncate(last, last.stat().st_size - 7)  # the torn tail of a write cut short
        await rs.start(third)
        await rs.running(third)
        await rs.converged()
        return [await rs.rows(m, "SELECT count(*) FROM t") for m in rs.members]

    counts, logs = simulate(tmp_path, 29, scenario)
    assert counts[0] == counts[1] == counts[2]
    assert counts[0][0][0] >= 29, "more than the torn row is gone"
    assert any(line["event"] == "rebuild_from_checkpoint" and line["instance_id"] == 3 for line in logs), \
        "the torn tail did not leave SQLite ahead of the WAL: the seed tests nothing"
