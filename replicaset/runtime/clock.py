"""The wall clock the runtime reads, in one place.

Time for the protocols (timeouts, ticks, silence) is trio's, which a test or the simulator
replaces with `trio.testing.MockClock`. What must be the date, not a duration, is read
here: HLC stamps, SWIM datagram stamps, the age of WAL segments and of decided transaction
records. A host reads it through the `WallClock` it is given, so a test can set it.
"""

from __future__ import annotations

import time
from typing import Protocol


class WallClock(Protocol):
    def now_ns(self) -> int:
        """Nanoseconds since the Unix epoch."""
        ...


class SystemClock:
    """The machine's clock."""

    def now_ns(self) -> int:
        return time.time_ns()


SYSTEM_CLOCK = SystemClock()


def now_ms(clock: WallClock) -> int:
    """Milliseconds since the Unix epoch, as HLC stamps and record ages count them."""
    return clock.now_ns() // 1_000_000
