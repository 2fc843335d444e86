"""Hybrid logical clock and 64-bit transaction ids (Marmot v2 layout).

A stamp is one integer: 42 bits of physical milliseconds, 6 bits of node id, 16 bits of
logical counter, so stamps compare as integers and double as transaction ids. The clock
never goes back: it is seeded from the highest stamp the WAL and the row versions hold,
and every stamp received from a peer pushes it forward (the receive rule), so a local
stamp is always above every version already stored.

Marmot spin-waits when the logical counter overflows; a sans-IO clock cannot wait, so it
borrows the next millisecond instead. Stamps then run ahead of physical time by at most
one millisecond per 65,536 stamps, and catch up as soon as physical time passes them.
"""

from __future__ import annotations

PHYSICAL_BITS = 42
NODE_BITS = 6
LOGICAL_BITS = 16
NODE_MAX = (1 << NODE_BITS) - 1
LOGICAL_MAX = (1 << LOGICAL_BITS) - 1
PHYSICAL_MAX = (1 << PHYSICAL_BITS) - 1


def pack_stamp(physical_ms: int, node_id: int, logical: int) -> int:
    if not 0 <= physical_ms <= PHYSICAL_MAX:
        raise ValueError(f"physical time {physical_ms} ms does not fit in {PHYSICAL_BITS} bits")
    if not 0 <= node_id <= NODE_MAX:
        raise ValueError(f"node id {node_id} does not fit in {NODE_BITS} bits")
    if not 0 <= logical <= LOGICAL_MAX:
        raise ValueError(f"logical counter {logical} does not fit in {LOGICAL_BITS} bits")
    return (physical_ms << (NODE_BITS + LOGICAL_BITS)) | (node_id << LOGICAL_BITS) | logical


def unpack_stamp(stamp: int) -> tuple[int, int, int]:
    """Split a stamp into (physical_ms, node_id, logical)."""
    return (
        stamp >> (NODE_BITS + LOGICAL_BITS),
        (stamp >> LOGICAL_BITS) & NODE_MAX,
        stamp & LOGICAL_MAX,
    )


class HLC:
    """The clock of one node; physical time is passed in by the caller.

    Marmot's rules, plus one step they lack: the node bits sit above the logical counter,
    so a stamp of a higher node in the same millisecond cannot be passed by counting; when
    the receive rule (or a seed) leaves our next stamp at or below a stamp already seen,
    the clock borrows the next millisecond.
    """

    def __init__(self, node_id: int, *, last_stamp: int = 0) -> None:
        if not 0 <= node_id <= NODE_MAX:
            raise ValueError(f"node id {node_id} does not fit in {NODE_BITS} bits")
        self.node_id = node_id
        self._physical_ms, _, self._logical = unpack_stamp(last_stamp)
        self._pass(last_stamp)

    @property
    def last_stamp(self) -> int:
        return pack_stamp(self._physical_ms, self.node_id, self._logical)

    def now(self, physical_ms: int) -> int:
        """A new stamp, strictly above every stamp this clock issued or received."""
        if physical_ms > self._physical_ms:
            self._physical_ms, self._logical = physical_ms, 0
        else:
            self._tick()
        return self.last_stamp

    def receive(self, remote_stamp: int, physical_ms: int) -> None:
        """Advance past a stamp seen from elsewhere (a peer's row, a stored version)."""
        remote_ms, _, remote_logical = unpack_stamp(remote_stamp)
        wall = max(self._physical_ms, remote_ms, physical_ms)
        if wall == self._physical_ms == remote_ms:
            self._logical = max(self._logical, remote_logical)
            self._tick()
        elif wall == self._physical_ms:
            self._tick()
        elif wall == remote_ms:
            self._physical_ms, self._logical = remote_ms, remote_logical
            self._tick()
        else:
            self._physical_ms, self._logical = wall, 0
        self._pass(remote_stamp)

    def _pass(self, seen: int) -> None:
        """Make sure the current stamp is not below `seen`, whatever node issued it; the
        next `now()` then ticks strictly above it."""
        if self.last_stamp < seen:
            self._physical_ms, self._logical = (seen >> (NODE_BITS + LOGICAL_BITS)) + 1, 0

    def _tick(self) -> None:
        if self._logical < LOGICAL_MAX:
            self._logical += 1
        else:
            self._physical_ms += 1
            self._logical = 0
