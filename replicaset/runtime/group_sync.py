"""One fsync in a worker thread for every caller waiting meanwhile: the metastore's group
commit.

A PREPARED answer, and a coordinator's PENDING record, must be durable before they count.
Each used to sync in a thread of its own: one thread hand-off and one fsync per record,
which under concurrent transactions cost more event-loop time than the records. Now the
records are written unsynced in the loop, and `covering` waits for a sync that started
after the caller's write: the first waiter starts one, the others wait for it, or for the
next one if theirs came too late for it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from replicaset.runtime.environment import Workers


class GroupSync:
    def __init__(self, sync: Callable[[], None], workers: Workers) -> None:
        self._sync = sync
        self._thread = workers.serial("metastore sync")
        self._asked = 0  # callers so far, each numbered
        self._done = 0  # every caller up to this number is covered
        self._running = False
        self._finished = trio.Event()
        self.syncs = 0  # fsyncs made, for tests and the curious

    async def covering(self) -> None:
        """Until every write made before this call is durable. A failing sync raises in
        the caller that ran it (a metastore that cannot sync stops the member); the
        others wait for the next attempt."""
        self._asked += 1
        mine = self._asked
        while self._done < mine:
            if self._running:
                await self._finished.wait()
                continue
            self._running = True
            upto = self._asked
            try:
                await self._thread.run_sync(self._sync)
                self.syncs += 1
                self._done = upto
            finally:
                self._running = False
                finished, self._finished = self._finished, trio.Event()
                finished.set()
