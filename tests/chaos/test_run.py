"""A short seeded chaos run in the suite: three members whose every peer link goes through the
harness's proxies, the bank, set, register and stream-transaction workloads, kills, pauses, partitions and link
faults from one seed, then heal, convergence and the checks. Longer runs, with the Spark audit
and the member faults, are `make chaos` (docs/reliability.md)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from replicaset.testing.chaos.run import RunOptions, run
from replicaset.testing.chaos.schedule import LINK_FAULTS, PARTITIONS, PROCESS_FAULTS
from tests.chaos import CHAOS_RUN_TIMEOUT_S

SEED = 20  # a pause, a majorities ring, a kill -9 and another ring
WALL_S_MAX = 45.0


@pytest.mark.timeout(CHAOS_RUN_TIMEOUT_S)
def test_a_short_seeded_run_loses_nothing_and_converges(tmp_path: Path) -> None:
    options = RunOptions(seed=SEED, duration_s=16.0, kinds=PROCESS_FAULTS + PARTITIONS + LINK_FAULTS,
                         fault_s=(2.0, 3.5), gap_s=(1.0, 2.0), converge_timeout_s=15.0, audit=False,
                         root=tmp_path / "chaos", workloads=("bank", "set", "registers", "streams"))
    started = time.monotonic()
    out = io.StringIO()
    report = run(options, out=out)
    wall_s = time.monotonic() - started
    assert report["problems"] == [], f"{report['verdict']}\n{out.getvalue()}"
    assert report["verdict"].startswith(f"chaos PASS seed={SEED} ")
    assert [f["kind"] for f in report["faults"]] == ["pause", "partition-ring", "kill", "partition-ring"]
    assert report["acknowledged_writes_lost"] == report["duplicates"] == report["divergent_rows_total"] == 0
    for workload, kind in (("bank", "transfer:ok"), ("set", "insert:ok"), ("registers", "write:ok")):
        assert report["operations"][workload].get(kind, 0) >= 20, report["operations"]
    assert report["operations"]["streams"].get("transfer:ok", 0) >= 5, report["operations"]
    # Every ordered pair's TCP links and SWIM datagrams went through its proxy: `[cluster] dial`
    # is applied wherever a member reaches a peer.
    for pair, stats in report["proxies"].items():
        assert stats["bytes_forward"] > 0 and stats["datagrams"] > 0, (pair, stats)
    assert report["exit_codes"] == [0, 0, 0]
    assert wall_s < WALL_S_MAX, f"the run took {wall_s:.1f} s"
