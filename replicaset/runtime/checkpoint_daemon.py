"""The checkpoint daemon: a checkpoint every `checkpoint_interval` seconds (0: none).

`box.cfg{checkpoint_interval = ...}` reschedules it: the wait starts again from the change,
with the new interval, as Tarantool's daemon does (without its random offset: one member
alone is no thundering herd).
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import trio

from replicaset.config import Config
from replicaset.runtime.disk import DiskFull
from replicaset.runtime.writer import WriteFailed, Writer


class CheckpointNode(Protocol):
    """What the daemon needs of its member."""

    config: Config
    writer: Writer
    log: Any


class CheckpointDaemon:
    def __init__(self, node: CheckpointNode) -> None:
        self._node = node
        self._rescheduled = trio.Event()

    def reschedule(self) -> None:
        """The interval changed: wait it from now."""
        self._rescheduled.set()

    async def run(self) -> None:
        node = self._node
        while True:
            rescheduled = self._rescheduled = trio.Event()
            with trio.move_on_after(node.config.checkpoint_interval or math.inf):
                await rescheduled.wait()
            if rescheduled.is_set():
                continue
            try:
                await node.writer.checkpoint()
            except DiskFull:  # the guard logged the condition; the next interval tries again
                continue
            except WriteFailed as exc:
                node.log.warning("checkpoint_failed", error=str(exc))
