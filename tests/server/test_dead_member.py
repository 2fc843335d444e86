"""A member gone for good, and another instance answering at a member's address."""

from __future__ import annotations

import shutil
import time

from replicaset.testing.processes import start_instance
from tests.server.conftest import REPLICASET_UUID, wait_for
from tests.server.test_replicaset import rows, trio_set, upstream_of  # noqa: F401 (fixture)

CONNECT_TIMEOUT_S = 3  # FAST_CONFIG's replication_connect_timeout
START_SLACK_S = 2.0


def _takes_writes_soon(rs, member, value: int) -> None:
    started = time.monotonic()
    rs.wait_status(member, "running")
    assert time.monotonic() - started <= CONNECT_TIMEOUT_S + START_SLACK_S
    with member.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (?, 'after the loss')", [value])


def test_with_one_member_gone_for_good_the_others_restart_and_take_writes(trio_set) -> None:
    """The connect quorum is a majority of the registered members by default, and the
    fetch of our own rows after kill -9 does not wait for a member that does not answer."""
    rs, (first, second, third) = trio_set
    dead_uuid = rs.info(third)["uuid"]
    third.kill()
    second.stop()
    second.start()
    _takes_writes_soon(rs, second, 1)
    dead = wait_for(lambda: upstream_of(rs, second, 3, "disconnected"), "member 3 shown disconnected")
    assert dead["message"]
    second.kill()
    second.start()
    _takes_writes_soon(rs, second, 2)
    first.kill()
    first.start()
    _takes_writes_soon(rs, first, 3)
    rs.wait_converged([first, second])
    assert rows(first) == rows(second) == [[1, "after the loss", 0], [2, "after the loss", 0], [3, "after the loss", 0]]
    recovered = [e for e in first.log_events() if e["event"] == "recovery_done"]
    assert recovered and recovered[-1]["not_answered"] == [dead_uuid], recovered


def test_an_applier_follows_only_the_member_it_expects(trio_set) -> None:
    """Member 3 is wiped and joins again at the same address under a new UUID: it is
    member 4 now, and nobody's upstream for member 3 may follow it."""
    rs, (first, second, third) = trio_set
    old_uuid = rs.info(third)["uuid"]
    third.kill()
    shutil.rmtree(third.data_dir)
    third.proc, _ = start_instance(
        ["join", "--uuid", REPLICASET_UUID, "--peer", f"127.0.0.1:{first.port}",
         "--data-dir", str(third.data_dir), "--config", str(rs.config)],
        third.log_path, port=third.port,
    )
    assert rs.info(third)["id"] == 4
    new_uuid = rs.info(third)["uuid"]
    for member in (first, second):
        wait_for(lambda: upstream_of(rs, member, 4, "follow"), "the new member followed")
        def told_apart() -> dict | None:
            stale = upstream_of(rs, member, 3, "disconnected")
            return stale if stale and new_uuid in stale.get("message", "") else None

        stale = wait_for(told_apart, "member 3's upstream names the instance found at its address")
        assert f"is instance {new_uuid}, not {old_uuid}" in stale["message"], stale
        time.sleep(0.3)
        assert rs.info(member)["replication"][3]["upstream"]["status"] != "follow"
