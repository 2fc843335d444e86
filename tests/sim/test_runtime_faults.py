"""Seeded faults on the server's own hosts in the simulated world (issue 33): kill -9, clean
stops and cut links under writes at ONE and QUORUM, checked as a user would check them
(`replicaset/testing/sim_faults.py`). A failing seed is replayed step for step by running
it again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replicaset.testing.sim_faults import FaultRun, run_faults
from tests.pagecache import PageCache
from tests.sim.test_runtime_world import simulate


def check(run: FaultRun, logs: list[dict[str, Any]]) -> None:
    where = f"seed {run.seed}, faults {run.faults}"
    assert run.faults, f"{where}: the schedule made no fault"
    assert len(run.acknowledged) > 50, f"{where}: the writers hardly wrote"
    may_be_lost = run.lost_in_os_crash | run.wiped  # only if acknowledged at ONE
    for table in run.tables:
        held = {row[0] for row in table}
        missing = sorted(run.acknowledged - held)
        assert not set(missing) & run.acknowledged_quorum, \
            f"{where}: acknowledged QUORUM inserts missing on a member: {sorted(set(missing) & run.acknowledged_quorum)[:10]}"
        assert not set(missing) - may_be_lost, \
            f"{where}: acknowledged inserts missing on a member: {sorted(set(missing) - may_be_lost)[:10]}"
    assert run.tables[0] == run.tables[1] == run.tables[2], f"{where}: the members hold different rows"
    assert run.shared[0] == run.shared[1] == run.shared[2], f"{where}: the members settled shared keys apart"
    for number, wrong in enumerate(run.model_differences, 1):
        assert not wrong, f"{where}: member {number} differs from last-writer-wins: " + "; ".join(wrong)
    errors = [line for line in logs if line["log_level"] in ("error", "critical")]
    assert not errors, f"{where}: {errors[:3]}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_faults_under_writes_lose_nothing_acknowledged(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    run, logs = simulate(tmp_path, seed, lambda rs: run_faults(rs, seed, seconds=6.0, pause_s=(0.01, 0.04)),
                         lose_unsynced=cache.os_crash)
    check(run, logs)


@pytest.mark.deep
@pytest.mark.parametrize("seed", range(100, 140))
def test_faults_under_writes_lose_nothing_acknowledged_deep(tmp_path: Path, seed: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    run, logs = simulate(tmp_path, seed, lambda rs: run_faults(rs, seed, seconds=30.0), lose_unsynced=cache.os_crash)
    check(run, logs)
