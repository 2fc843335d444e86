"""Seeded simulations of 3-5 members: faults first, then heal and require convergence."""

from __future__ import annotations

import apsw
import pytest

from replicaset.sim import NO_FAULTS, Simulation
from tests.sim.simkit import simulate

SEEDS = range(8)
FSYNC_SEEDS = range(8, 16)
DEEP_SEEDS = range(8, 208)


def test_without_faults_three_members_converge(tmp_path):
    sim = simulate(tmp_path, 0, faults=NO_FAULTS)
    assert len(sim.acked) >= 60
    clocks = list(sim.final_vclocks.values())
    assert clocks[0] == clocks[1] == clocks[2] and sum(clocks[0].values()) > 30


@pytest.mark.parametrize(("wal_mode", "seed"), [*(("write", s) for s in SEEDS), *(("fsync", s) for s in FSYNC_SEEDS)])
def test_faults_then_heal_converges(tmp_path, seed, wal_mode):
    """Under fsync a crash loses no written row and a restarted member takes writes at once:
    an LSN reused there overwrites an acknowledged durable write unless the check sees it."""
    simulate(tmp_path, seed, members=3 + seed % 3, wal_mode=wal_mode)


@pytest.mark.deep
@pytest.mark.parametrize("seed", DEEP_SEEDS)
def test_faults_then_heal_converges_long_sweep(tmp_path, seed):
    simulate(tmp_path, seed, members=3 + seed % 3, writes=150, fault_phase_s=6.0)


def test_a_reused_lsn_would_be_caught(tmp_path):
    """The end-of-run check can fail: two payloads under one (origin, lsn) are found."""
    sim = Simulation(tmp_path / "x", seed=1, faults=NO_FAULTS, writes=10)
    try:
        sim.run()
        sim.check()
        victim = sim.members[2].engine
        from wal import Record, RecordType
        from replicaset.storage.rows import DmlPayload
        forged = DmlPayload(hlc=1, schema_id=(1, 1), rows=[]).pack()
        victim.wal.append([Record(type=RecordType.DML, origin=2, lsn=victim.wal.vclock.get(2) + 1, txn_id=1, payload=forged)])
        sim.members[3].engine.wal.append([Record(type=RecordType.DML, origin=2, lsn=sim.members[3].engine.wal.vclock.get(2) + 1, txn_id=2, payload=forged + b"\x00")])
        with pytest.raises(AssertionError, match="two payloads"):
            sim.check()
    finally:
        sim.close()


def test_an_acknowledged_write_overwritten_everywhere_would_be_caught(tmp_path):
    """Every member agrees on the row at 2:L, but a client was told its write there was
    durable and it is not the row held: an LSN was reused, and the end check says so."""
    sim = Simulation(tmp_path / "x", seed=3, faults=NO_FAULTS, writes=10, wal_mode="fsync")
    try:
        sim.run()
        sim.check()
        origin, lsn, payload = next(a for a in sim.acked if a[0] == 2)
        overwritten = payload + b"\x00"
        sim.acked.insert(0, (origin, lsn, overwritten))
        sim.durable.add((origin, lsn, overwritten))
        with pytest.raises(AssertionError, match=f"durable write {origin}:{lsn} was overwritten"):
            sim.check()
    finally:
        sim.close()


def test_members_that_agree_with_each_other_but_not_with_the_rules_would_be_caught(tmp_path):
    """The same wrong value on every member: digests agree, the reference model does not."""
    sim = Simulation(tmp_path / "x", seed=4, faults=NO_FAULTS, writes=20)
    try:
        sim.run()
        sim.check()
        for member in sim.members.values():
            conn = apsw.Connection(str(member.data_dir / "db.sqlite"))
            conn.execute("UPDATE kv SET v = 'not written by anyone' WHERE k = (SELECT min(k) FROM kv)")
            conn.close()
        with pytest.raises(AssertionError, match="differs from the reference model: kv: row .*not written by anyone"):
            sim.check()
    finally:
        sim.close()


def test_a_seed_replays_the_same_run_step_for_step(tmp_path):
    """The simulator runs the writers inside trio, with worker threads for the fsyncs:
    a seed must still decide everything, or a failing seed could not be replayed."""
    runs = []
    for attempt in range(2):
        lines: list[dict] = []
        sim = Simulation(tmp_path / f"run{attempt}", seed=9, wal_mode="fsync", trace=lines.append)
        try:
            sim.run()
            sim.check()
        finally:
            sim.close()
        runs.append(lines)
    assert len(runs[0]) > 100 and runs[0] == runs[1]
