"""Seeded faults on the server's own hosts in the simulated world (issue 33): kill -9, clean
stops, power loss, replaced members, cut, slow and lossy links under writes at ONE and
QUORUM, checked as a user would check them (`replicaset/testing/sim_faults.py`). A failing
seed is replayed step for step by running it again (`tools/sim_faults.py --seed N`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from replicaset.testing.sim_faults import FaultRun, failures, run_faults
from replicaset.testing.pagecache import PageCache
from replicaset.testing.sim_set import simulate


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_faults_under_writes_lose_nothing_acknowledged(tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    run, logs = simulate(tmp_path, seed, lambda rs: run_faults(rs, seed, seconds=6.0, pause_s=(0.01, 0.04)),
                         lose_unsynced=cache.os_crash)
    assert not failures(run, logs)


@pytest.mark.deep
@pytest.mark.parametrize("seed", range(100, 140))
def test_faults_under_writes_lose_nothing_acknowledged_deep(tmp_path: Path, seed: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    run, logs = simulate(tmp_path, seed, lambda rs: run_faults(rs, seed, seconds=30.0), lose_unsynced=cache.os_crash)
    assert not failures(run, logs)


def passing_run(**fields: Any) -> FaultRun:
    ids = [[i] for i in range(100)]
    run = FaultRun(seed=0, faults=["1.0 kill 2"], acknowledged=set(range(100)), acknowledged_quorum=set(range(0, 100, 2)),
                   tables=[ids, ids, ids], shared=[[], [], []])
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def test_the_checks_pass_a_good_run_and_name_what_a_bad_one_lost() -> None:
    assert failures(passing_run(), []) == []
    short = [[i] for i in range(100) if i not in (3, 4)]
    lost_quorum_and_one = passing_run(tables=[short, short, short])
    assert [line.split(": ", 1)[1] for line in failures(lost_quorum_and_one, [])] == [
        f"member {n} lacks acknowledged {kind}" for n in (1, 2, 3)
        for kind in ("QUORUM inserts [4]", "inserts [3, 4]")]
    wiped_one = passing_run(tables=[short, short, short], wiped={3, 4})
    assert [line.split(": ", 1)[1] for line in failures(wiped_one, [])] == [
        f"member {n} lacks acknowledged QUORUM inserts [4]" for n in (1, 2, 3)], "a wiped disk excuses ONE only"
    assert failures(passing_run(), [{"log_level": "error", "event": "x"}])


def test_the_tool_runs_a_seed_and_says_what_it_did() -> None:
    done = subprocess.run([sys.executable, "tools/sim_faults.py", "--seed", "2", "--seconds", "3"], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("seed 2: ok in "), done.stdout
    assert "inserts acknowledged" in done.stdout
