"""The vector clock: origin id -> last LSN, Tarantool's `struct vclock`.

A vclock says which rows an instance holds: every row of origin `o` up to `vclock[o]`. Zero
entries are never stored, so two clocks that hold the same rows are equal however they were built.
"""

import enum
from collections.abc import Mapping

import msgpack

VCLOCK_MAX = 32
"""Origins are 0..31 as in Tarantool; 0 marks rows that are never replicated."""

LOCAL_ORIGIN = 0
"""Rows of local tables (Tarantool's convention): logged and recovered, never replicated,
so they do not count in the replicated vclock."""

LSN_MAX = 2**64 - 1
"""LSNs are stored as u64 in record headers."""


class Order(enum.Enum):
    """Result of `VClock.compare`, Tarantool's vclock_compare."""

    BEFORE = "before"
    AFTER = "after"
    EQUAL = "equal"
    CONCURRENT = "concurrent"


def _check_origin(origin: object) -> int:
    if not isinstance(origin, int) or isinstance(origin, bool) or not 0 <= origin < VCLOCK_MAX:
        raise ValueError(f"vclock origin must be an int in 0..{VCLOCK_MAX - 1}, got {origin!r}")
    return origin


def _check_lsn(lsn: object) -> int:
    if not isinstance(lsn, int) or isinstance(lsn, bool) or not 0 <= lsn <= LSN_MAX:
        raise ValueError(f"vclock lsn must be an int in 0..{LSN_MAX}, got {lsn!r}")
    return lsn


class VClock:
    """Mutable map origin -> LSN; `copy()` before handing one to code that may keep it."""

    __slots__ = ("_lsns",)
    __hash__ = None  # type: ignore[assignment]  # mutable: must not be a dict key

    def __init__(self, items: Mapping[int, int] | None = None) -> None:
        self._lsns: dict[int, int] = {}
        if items is not None and not isinstance(items, Mapping):
            # A peer's or a client's value: refused by its own type, not by AttributeError.
            raise TypeError(f"a vclock is a map of origin to lsn, got {type(items).__name__}")
        for origin, lsn in (items or {}).items():
            if _check_lsn(lsn):
                self._lsns[_check_origin(origin)] = lsn

    def copy(self) -> "VClock":
        clock = VClock()
        clock._lsns = dict(self._lsns)
        return clock

    def get(self, origin: int) -> int:
        return self._lsns.get(origin, 0)

    def follow(self, origin: int, lsn: int) -> None:
        """Advance one origin; refusing to go back is what keeps a replica from re-applying rows."""
        _check_origin(origin)
        _check_lsn(lsn)
        current = self._lsns.get(origin, 0)
        if lsn <= current:
            raise ValueError(
                f"vclock_follow: origin {origin} is at lsn {current}, refusing lsn {lsn}"
            )
        self._lsns[origin] = lsn

    def reset(self, origin: int, lsn: int) -> None:
        """Set one origin unconditionally, for recovery and rebuilds that start from known state."""
        _check_origin(origin)
        if _check_lsn(lsn):
            self._lsns[origin] = lsn
        else:
            self._lsns.pop(origin, None)

    @property
    def signature(self) -> int:
        """Sum of LSNs: grows with every row, so it orders segments of one log."""
        return sum(self._lsns.values())

    def compare(self, other: "VClock") -> Order:
        below = self <= other
        above = other <= self
        if below and above:
            return Order.EQUAL
        if below:
            return Order.BEFORE
        if above:
            return Order.AFTER
        return Order.CONCURRENT

    def merge(self, other: "VClock") -> "VClock":
        merged = self.copy()
        for origin, lsn in other._lsns.items():
            if lsn > merged._lsns.get(origin, 0):
                merged._lsns[origin] = lsn
        return merged

    def __le__(self, other: object) -> bool:
        """True when `other` covers self: it holds every row self holds."""
        if not isinstance(other, VClock):
            return NotImplemented
        theirs = other._lsns
        return all(lsn <= theirs.get(origin, 0) for origin, lsn in self._lsns.items())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VClock):
            return NotImplemented
        return self._lsns == other._lsns

    def covers(self, need: "Mapping[int, int] | VClock") -> bool:
        """Every row `need` counts is held here."""
        return covers(self._lsns, need)

    def replicated(self) -> "VClock":
        """Without origin 0, whose rows are never replicated."""
        clock = VClock()
        clock._lsns = {origin: lsn for origin, lsn in self._lsns.items() if origin != LOCAL_ORIGIN}
        return clock

    def items(self) -> list[tuple[int, int]]:
        return sorted(self._lsns.items())

    def to_dict(self) -> dict[int, int]:
        return dict(self.items())

    def __repr__(self) -> str:
        return repr(self.to_dict())

    def pack(self) -> bytes:
        return msgpack.packb(self.to_dict())

    @classmethod
    def unpack(cls, data: bytes) -> "VClock":
        """Decode a packed vclock; the bytes come from a peer or a disk, so check everything."""
        try:
            decoded = msgpack.unpackb(data, strict_map_key=False, max_map_len=VCLOCK_MAX)
        except (ValueError, msgpack.UnpackException) as exc:
            raise ValueError(f"packed vclock is not valid msgpack: {exc}") from exc
        if not isinstance(decoded, dict):
            raise ValueError(f"packed vclock must be a map, got {type(decoded).__name__}")
        return cls(decoded)


def covers(have: "Mapping[int, int] | VClock", need: "Mapping[int, int] | VClock") -> bool:
    """Every row `need` counts is in `have`: the one test behind a relay's sync, GC's
    consumers and the purge horizon (plain maps or vclocks alike)."""
    held = have._lsns if isinstance(have, VClock) else have
    return all(held.get(origin, 0) >= lsn for origin, lsn in need.items())
