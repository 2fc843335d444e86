"""The audit's convergence check (check 5) replays WALs through `Engine.apply`, the code it
judges; here its verdict on a simulated set is held against the reference model of
last-writer-wins (`replicaset.testing.lww`), which reads the same WALs without the engine."""

from __future__ import annotations

import io
from pathlib import Path

import apsw

from replicaset.audit import EXIT_VIOLATIONS, run_audit
from replicaset.sim import Faults, Simulation
from replicaset.testing import lww
from wal import TruncatedRecord
from wal.segment import list_segments, read_segment_records
from tests.audit.conftest import SPARK_TIMEOUT

pytestmark = SPARK_TIMEOUT


def wal_rows(wal_dir: Path) -> list:
    """Every record of a WAL, read as recovery reads it (a torn tail ends it)."""
    segments = list_segments(wal_dir)
    rows = []
    for path in segments:
        try:
            rows.extend(record for _, record in read_segment_records(path))
        except TruncatedRecord:
            assert path == segments[-1], f"{path}: torn record before the last segment"
    return rows


def test_check_5_and_the_reference_model_name_the_same_members_and_tables(spark, tmp_path: Path) -> None:
    """A run with crashes, UNIQUE collisions and key moves, then m2's table changed behind
    its engine: the audit and the model must both find m2's `kv`, and nothing else."""
    sim = Simulation(tmp_path / "set", seed=10, faults=Faults(), writes=60)
    try:
        sim.run()
        sim.check()
    finally:
        sim.close()
    dirs = [sim.members[i].data_dir for i in sorted(sim.members)]
    conn = apsw.Connection(str(dirs[1] / "db.sqlite"))
    conn.execute("UPDATE kv SET v = 'changed' WHERE k = (SELECT min(k) FROM kv)")
    conn.close()

    expected = lww.Model().add_all(r for d in dirs for r in wal_rows(d / "wal")).state()
    by_model = {d.name: lww.differing_tables(expected, lww.db_state(d / "db.sqlite")) for d in dirs}
    assert by_model == {"m1": [], "m2": ["kv"], "m3": []}
    assert expected["kv"].rows and expected["kv"].versions

    code, report = run_audit(dirs, spark=spark, stream=io.StringIO(), progress=False)
    assert code == EXIT_VIOLATIONS
    assert {r["member"]: r["tables"] for r in report["replays"]} == by_model
    assert {r["member"]: r["ok"] for r in report["replays"]} == {name: not t for name, t in by_model.items()}
    assert all(r["rows_applied"] > 0 for r in report["replays"])
