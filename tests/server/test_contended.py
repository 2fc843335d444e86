"""Three members under a plain contended workload, as a new user would run them: one
`tarantool` connector client per member moving units between five shared accounts every
2 ms, no faults. The set must converge at once when the clients stop, with nothing at
warning or error level in any log. This found a row that was never relayed (a flush the
writer did not see) and relays failing with "a hole" in normal operation."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
import tarantool

from tests.server.conftest import ReplicaSet, wait_for

ACCOUNTS = 5
PAUSE_S = 0.002
# A stuck row never converges; what the members have queued when the clients stop took
# 1.94 s once on a 2-core machine at load average 8, over the 1.5 s allowed before.
CONVERGE_S = 2.0


def run_contended(rs: ReplicaSet, duration_s: float) -> None:
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE acct(id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)")
        for i in range(1, ACCOUNTS + 1):
            client.execute("INSERT INTO acct(id, bal) VALUES (?, 100)", [i])
    members = [first, rs.join(first), rs.join(first)]
    for member in members:
        rs.wait_status(member, "running")
    rs.wait_full_mesh()
    before = rs.wait_converged()

    acknowledged = [0] * len(members)
    stop_at = time.monotonic() + duration_s

    def client_loop(n: int) -> None:
        rng = random.Random(n)
        conn = tarantool.connect("127.0.0.1", members[n].port)
        try:
            while time.monotonic() < stop_at:
                for delta in (-1, 1):
                    conn.execute(f"UPDATE acct SET bal = bal + {delta} WHERE id = ?", [rng.randint(1, ACCOUNTS)])
                    acknowledged[n] += 1
                time.sleep(PAUSE_S)
        finally:
            conn.close()

    threads = [threading.Thread(target=client_loop, args=(n,)) for n in range(len(members))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(duration_s + 30)
    stopped = time.monotonic()
    assert all(count > 0 for count in acknowledged), acknowledged

    checked_at: list[float] = []

    def agreed() -> list | None:
        checked_at.append(time.monotonic())
        views = []
        for member in members:
            info = rs.info(member)
            with member.client() as client:
                views.append(({o: lsn for o, lsn in info["vclock"].items() if o}, client.execute("SELECT * FROM acct ORDER BY id").rows))
        return views if all(v == views[0] for v in views) else None

    views = wait_for(agreed, "the members agree on vclock and accounts", timeout_s=CONVERGE_S + 1)
    took_s = checked_at[-1] - stopped  # when the check that found them agreeing began: reading them takes time too
    assert took_s <= CONVERGE_S + 0.5, f"converged {took_s:.2f} s after the clients stopped"
    vclock, accounts = views[0]
    for n, member in enumerate(members):
        member_id = rs.info(member)["id"]
        # every acknowledged UPDATE is one row of its member's origin, held everywhere
        assert vclock[member_id] - before.get(member_id, 0) == acknowledged[n], (member_id, vclock, acknowledged)
    assert [a[0] for a in accounts] == list(range(1, ACCOUNTS + 1))

    for member in members:
        member.stop()
        events = [json.loads(line) for line in member.log_path.read_text().splitlines() if line.startswith("{")]
        loud = [(e["event"], str(e.get("error", e.get("reason", "")))[:120]) for e in events if e.get("level") in ("warning", "error")]
        assert loud == [], f"{member.log_path.name}: {loud[:3]}"


def test_three_members_under_a_contended_workload_converge_at_once_with_quiet_logs(replicaset: ReplicaSet) -> None:
    run_contended(replicaset, duration_s=8.0)


@pytest.mark.deep
@pytest.mark.parametrize("run", range(3))
def test_three_members_under_a_contended_workload_run_after_run(replicaset_factory, run: int) -> None:
    run_contended(replicaset_factory(), duration_s=40.0)
