"""The metastore's group sync: every caller returns only after a sync that started after
it asked, and callers waiting together share one."""

from __future__ import annotations

import threading

import pytest
import trio

from replicaset.runtime.environment import THREADS
from replicaset.runtime.group_sync import GroupSync


class SlowSync:
    """An fsync that takes a while, recording how many writes each one covered."""

    def __init__(self) -> None:
        self.writes = 0
        self.covered: list[int] = []
        self.release = threading.Event()

    def __call__(self) -> None:
        seen = self.writes
        self.release.wait(5)
        self.covered.append(seen)


def test_callers_waiting_together_share_one_sync_and_a_late_one_waits_for_the_next() -> None:
    disk = SlowSync()
    group = GroupSync(disk, THREADS)
    returned: list[tuple[int, int]] = []  # (caller, syncs made when it returned)

    async def write_and_wait(caller: int) -> None:
        disk.writes += 1
        mine = disk.writes
        await group.covering()
        assert disk.covered[-1] >= mine, "returned before a sync that covers its write"
        returned.append((caller, group.syncs))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write_and_wait, 0)
            await trio.sleep(0.05)  # caller 0's sync is under way, covering one write
            for caller in range(1, 8):
                nursery.start_soon(write_and_wait, caller)
            await trio.sleep(0.05)
            disk.release.set()

    trio.run(main)
    assert group.syncs == 2, "one sync for the first caller, one for the seven that came during it"
    assert disk.covered == [1, 8]
    assert sorted(returned) == [(0, 1)] + [(c, 2) for c in range(1, 8)]


def test_a_failed_sync_raises_in_the_caller_that_ran_it_and_the_next_caller_syncs_again() -> None:
    calls = []

    def failing_once() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the disk is gone")

    group = GroupSync(failing_once, THREADS)

    async def main() -> None:
        with pytest.raises(OSError, match="the disk is gone"):
            await group.covering()
        await group.covering()

    trio.run(main)
    assert len(calls) == 2 and group.syncs == 1
