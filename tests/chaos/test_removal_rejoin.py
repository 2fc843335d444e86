"""Found by the fault harness (`tools/chaos.py --seed 4 --seconds 20 --faults remove-rejoin`):
a member removed with `box.remove(3)` and replaced by a fresh instance: the new instance
takes the freed id 3 and treats the removed one's rows (origin 3) as its own. It drops them
as "own rows from a peer" (docs/design/README.md §4.3), so it never holds what the removed member wrote; and
its registration's barrier names those rows (origin 3 at the removed member's last LSN), so
it never reaches the barrier and stays in status `loading` for good, taking no write and no
vote. In the harness's run the new member 3 lacked 16 acknowledged inserts, a later
`box.remove(2)` found no quorum (member 3 did not prepare), and the set never converged."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from replicaset.testing.chaos.run import RunOptions, run
from tests.chaos import CHAOS_RUN_TIMEOUT_S
from tests.server.conftest import ReplicaSet, wait_for
from tests.server.test_swim import SWIM_FAST

ROWS = 10


def swim_state(rs: ReplicaSet, member, of: int) -> str | None:
    return next((m["state"] for m in rs.info(member)["members"] if m["id"] == of), None)


def count(member, table: str = "kv") -> int:
    with member.client() as client:
        return client.execute(f"SELECT count(*) FROM {table}").rows[0][0]


def test_a_new_instance_replacing_a_removed_member_holds_its_rows_under_a_new_id(tmp_path: Path) -> None:
    rs = ReplicaSet(tmp_path, SWIM_FAST)
    try:
        first = rs.bootstrap()
        with first.client() as client:
            client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        rs.join(first)
        third = rs.join(first)
        rs.wait_status(third, "running")  # a member still loading refuses writes
        with third.client() as client:
            for k in range(ROWS):
                client.execute("INSERT INTO kv(k, v) VALUES (?, 'written by the first member 3')", [k])
        rs.wait_converged()
        third.kill()
        wait_for(lambda: swim_state(rs, first, 3) == "dead", "member 3 DEAD on member 1")
        with first.client() as client:
            assert client.eval("box.remove(3)")[0]["removed"] == 3
        shutil.rmtree(third.data_dir)
        replacement = rs.join(first)
        assert rs.info(replacement)["id"] == 4, "id 3 wrote rows: it is retired, not given again"
        assert count(first) == ROWS
        wait_for(lambda: count(replacement) == ROWS, "the replacement holds the removed member's rows", timeout_s=10)
        rs.wait_status(replacement, "running")
    finally:
        rs.stop_all()


@pytest.mark.timeout(CHAOS_RUN_TIMEOUT_S)
def test_finding_4_seeded_run_removes_and_rejoins_every_member_in_turn(tmp_path: Path) -> None:
    """The run that found finding 4 (and the stale checkpoint `_cluster` beside it): members
    3, 2 and 1 each killed, removed and joined again under a new id while the workloads
    run. Every removal and re-join goes through, and nothing acknowledged is lost."""
    options = RunOptions(seed=4, duration_s=20.0, kinds=("remove-rejoin",), converge_timeout_s=30.0, audit=False,
                         root=tmp_path / "chaos")
    out = io.StringIO()
    report = run(options, out=out)
    assert report["problems"] == [], f"{report['verdict']}\n{out.getvalue()}"
    notes = [note for fault in report["faults"] for note in fault["notes"]]
    assert [list(f["members"]) for f in report["faults"]] == [[3], [2], [1]]
    assert sum("re-joined" in note for note in notes) == 3, notes
    assert report["acknowledged_writes_lost"] == report["duplicates"] == report["divergent_rows_total"] == 0
