"""The restore point: a row (`--until-lsn`), a time (`--until-time`) or a transaction
(`--until-txn`), each resolved over the history to one commit stamp. A row is before the
bound when the stamp that places it is at or below that stamp, after it otherwise
(docs/restore.md, "What comes after the bound"): the row or transaction named is itself
before the bound, and a time takes every row committed in that millisecond or earlier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from replicaset.core.hlc import LOGICAL_MAX, NODE_MAX, PHYSICAL_MAX, pack_stamp, unpack_stamp
from replicaset.restore.errors import BoundNotReached, RestoreError
from replicaset.restore.logs import History
from wal.vclock import LSN_MAX, VCLOCK_MAX

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ROW = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")


def stamp_time(stamp: int) -> str:
    """The physical time of a stamp, ISO 8601 in UTC to the millisecond."""
    when = EPOCH + timedelta(milliseconds=unpack_stamp(stamp)[0])
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class UntilLsn:
    origin: int
    lsn: int

    def __str__(self) -> str:
        return f"until row {self.origin}:{self.lsn}"

    def stamp(self, history: History) -> int:
        stamp = history.stamp_at(self.origin, self.lsn)
        if stamp is None:
            raise BoundNotReached(f"row {self.origin}:{self.lsn} is in no WAL given ({history.extent(self.origin)})")
        return stamp


@dataclass(frozen=True, slots=True)
class UntilTime:
    ms: int

    def __str__(self) -> str:
        return f"until {stamp_time(self.last_stamp)}"

    @property
    def last_stamp(self) -> int:
        """The highest stamp of the millisecond: any node, any logical count."""
        return pack_stamp(self.ms, NODE_MAX, LOGICAL_MAX)

    def stamp(self, history: History) -> int:
        last = history.last_stamp()
        if last is None:
            raise BoundNotReached("the WALs given hold no row, so nothing shows what was committed by "
                                  f"{stamp_time(self.last_stamp)}")
        if last <= self.last_stamp:
            raise BoundNotReached(
                f"no row of the WALs given was committed after {stamp_time(self.last_stamp)}: they end at "
                f"{stamp_time(last)}, so nothing shows that they hold every row committed by then; give "
                "the WALs that go further, or restore without a bound to take all they hold")
        return self.last_stamp


@dataclass(frozen=True, slots=True)
class UntilTxn:
    txn_id: int

    def __str__(self) -> str:
        return f"until txn {self.txn_id}"

    def stamp(self, history: History) -> int:
        row = history.find_txn(self.txn_id)
        if row is None:
            raise BoundNotReached(f"no row of the WALs given belongs to txn {self.txn_id}")
        stamp = history.stamp_at(row.origin, row.lsn)
        assert stamp is not None, "a row of the history is placed"
        return stamp


Bound = UntilLsn | UntilTime | UntilTxn


def parse_until_lsn(text: str) -> UntilLsn:
    match = _ROW.match(text)
    if match is None:
        raise RestoreError(f"--until-lsn {text!r} is not ORIGIN:LSN (for example 2:150)")
    origin, lsn = int(match.group(1)), int(match.group(2))
    if not 0 <= origin < VCLOCK_MAX:
        raise RestoreError(f"--until-lsn {text!r}: origin {origin} is outside 0..{VCLOCK_MAX - 1}")
    if not 1 <= lsn <= LSN_MAX:
        raise RestoreError(f"--until-lsn {text!r}: LSN {lsn} is outside 1..{LSN_MAX}")
    return UntilLsn(origin, lsn)


def parse_until_time(text: str) -> UntilTime:
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise RestoreError(f"--until-time {text!r} is not an ISO 8601 time (for example 2024-05-01T12:00:00Z)") from None
    if when.tzinfo is None:
        raise RestoreError(f"--until-time {text!r} has no UTC offset: write {text}Z for UTC, or add the offset "
                           "of the time zone meant (for example +02:00)")
    ms = (when - EPOCH) // timedelta(milliseconds=1)
    if not 0 <= ms <= PHYSICAL_MAX:
        raise RestoreError(f"--until-time {text!r} is outside the times a commit stamp can hold")
    return UntilTime(ms)


def parse_until_txn(text: str) -> UntilTxn:
    try:
        txn_id = int(text.strip(), 0)
    except ValueError:
        raise RestoreError(f"--until-txn {text!r} is not a txn id (a decimal or 0x hexadecimal integer)") from None
    if not 0 < txn_id < 2**64:
        raise RestoreError(f"--until-txn {text!r} is outside the 64-bit txn ids")
    return UntilTxn(txn_id)
