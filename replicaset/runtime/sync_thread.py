"""A thread of its own for a store's fsyncs, for the life of the node.

Why not `trio.to_thread.run_sync`: on this kind of machine each call costs about 100-120
us of CPU (the thread cache's hand-off, naming the thread twice, the capacity limiter,
the cancel machinery), more than the fsync it carries, and a member syncs its WAL and
its metastore for every quorum transaction and every batch a relay waits for. One thread
that waits on a queue and wakes the event loop through its trio token costs about 70.
Like `to_thread.run_sync`, a call is not abandoned when its caller is cancelled: the
caller waits for the fsync it started (a store whose sync is in flight is between two
states). The thread ends after `IDLE_S` with nothing to do and starts again at the next
call, so an owner has nothing to close.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

IDLE_S = 10.0
T = TypeVar("T")
_Job = tuple[Callable[[], Any], trio.lowlevel.TrioToken, Callable[[Any, BaseException | None], None]]


class SyncThread:
    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()  # a call is queued only where a thread will take it
        self._running = False

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the thread, one call at a time in the order asked; its result,
        or its exception raised here."""
        done = trio.Event()
        result: list[Any] = []

        def deliver(value: Any, error: BaseException | None) -> None:
            result[:] = [value, error]
            done.set()

        with self._lock:
            self._jobs.put((lambda: fn(*args), trio.lowlevel.current_trio_token(), deliver))
            if not self._running:
                self._running = True
                threading.Thread(target=self._work, name=self._name, daemon=True).start()
        with trio.CancelScope(shield=True):
            await done.wait()
        value, error = result
        if error is not None:
            raise error
        return value

    def _work(self) -> None:
        while True:
            try:
                call, token, deliver = self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._running = False
                        return
                continue
            value, error = None, None
            try:
                value = call()
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller
                error = exc
            try:
                token.run_sync_soon(deliver, value, error)
            except trio.RunFinishedError:  # the loop is gone: nobody waits any more
                pass
