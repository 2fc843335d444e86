"""Recovery: validate a log directory at open and rebuild what the log holds.

Theory of operation. Segments are read oldest first. Each must start exactly where the one
before it ended (its header vclock equals the running vclock: no hole, no overlap) and each
record must be the next LSN of its origin. Only the last segment may end in a torn record, the
trace of a crash mid-append that no client saw acknowledged; it is cut. Anything else (a bad
record with valid records after it, a torn non-last segment, a gap or a step back in LSNs) means
acknowledged rows are damaged: recovery refuses, because dropping them silently is worse than
stopping. The result seeds the Wal: its vclock, and the txn ids that seed the HLC and answer
SUBSCRIBE's split-brain check.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wal.errors import CorruptRecord, TruncatedRecord, WalCorruption
from wal.segment import (
    IN_PROGRESS_SUFFIX,
    Buffer,
    RecordScanner,
    TailKind,
    is_torn_segment_file,
    list_segments,
    map_segment,
    read_segment_header,
    segment_signature,
)
from wal.vclock import VCLOCK_MAX, VClock

LogFn = Callable[..., None]

_REFUSAL = "refusing to start: re-join this instance or restore its data directory"


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveredLog:
    segments: list[tuple[Path, VClock]]
    """(path, start vclock) of every segment, oldest first."""
    vclock: VClock
    """Per-origin last LSN, start vclocks included (empty when there is no segment)."""
    last_txn_id: dict[int, int]
    max_txn_id: int
    tail_header_end: int
    """Offset of the first record of the last segment (0 when there is no segment)."""
    tail_end: int
    """Offset after the last valid record of the last segment (0 when there is no segment)."""


def recover_directory(directory: Path, *, log: LogFn) -> RecoveredLog:
    _remove_in_progress(directory, log)
    paths = list_segments(directory)
    if paths and is_torn_segment_file(paths[-1]):
        torn = paths.pop()
        log(
            "wal_segment_removed",
            segment=str(torn),
            reason="torn header",
            bytes_dropped=torn.stat().st_size,
        )
        torn.unlink()
    replay = _Replay()
    segments: list[tuple[Path, VClock]] = []
    for index, path in enumerate(paths):
        start = replay.replay_segment(path, is_last=index == len(paths) - 1, log=log)
        segments.append((path, start))
    return RecoveredLog(
        segments=segments,
        vclock=replay.vclock,
        last_txn_id=replay.last_txn_id,
        max_txn_id=replay.max_txn_id,
        tail_header_end=replay.header_end,
        tail_end=replay.valid_end,
    )


def _remove_in_progress(directory: Path, log: LogFn) -> None:
    """A segment still named `.inprogress` was never part of the log: its append never returned."""
    for path in directory.glob("*" + IN_PROGRESS_SUFFIX):
        log(
            "wal_segment_removed",
            segment=str(path),
            reason="in progress",
            bytes_dropped=path.stat().st_size,
        )
        path.unlink()


class _Replay:
    """The running state of recovery across segments."""

    def __init__(self) -> None:
        self.vclock = VClock()
        self.started = False
        self.last_txn_id: dict[int, int] = {}
        self.max_txn_id = 0
        self.header_end = 0
        self.valid_end = 0

    def replay_segment(self, path: Path, *, is_last: bool, log: LogFn) -> VClock:
        with map_segment(path) as buf:
            start, self.header_end = self._read_start(path, buf)
            scanner = RecordScanner(buf, self.header_end)
            for record_offset, record in scanner:
                self._follow(path, record_offset, record.origin, record.lsn, record.txn_id)
            tail, next_valid_offset = scanner.tail()
            size = len(buf)
        self.valid_end = scanner.valid_end
        if tail is TailKind.CORRUPT:
            raise WalCorruption(
                f"WAL segment {path} has a corrupt record at offset {scanner.valid_end} followed "
                f"by valid records at offset {next_valid_offset}; {_REFUSAL}"
            )
        if tail is TailKind.TORN:
            if not is_last:
                raise WalCorruption(
                    f"WAL segment {path} ends in a torn record at offset {scanner.valid_end} but "
                    f"is not the last segment; {_REFUSAL}"
                )
            os.truncate(path, scanner.valid_end)
            log(
                "wal_tail_truncated",
                segment=str(path),
                offset=scanner.valid_end,
                bytes_dropped=size - scanner.valid_end,
            )
        return start

    def _read_start(self, path: Path, buf: Buffer) -> tuple[VClock, int]:
        try:
            start, offset = read_segment_header(buf)
        except (CorruptRecord, TruncatedRecord) as exc:
            raise WalCorruption(f"WAL segment {path} has a bad header: {exc}; {_REFUSAL}") from exc
        if start.signature != segment_signature(path):
            raise WalCorruption(
                f"WAL segment {path} starts at vclock {start} whose signature {start.signature} "
                f"does not match its name; {_REFUSAL}"
            )
        if not self.started:
            self.vclock = start.copy()
            self.started = True
        elif start != self.vclock:
            raise WalCorruption(
                f"WAL segment {path} starts at vclock {start} but the segments before it end at "
                f"{self.vclock} (a segment is missing or out of place); {_REFUSAL}"
            )
        return start, offset

    def _follow(self, path: Path, offset: int, origin: int, lsn: int, txn_id: int) -> None:
        if origin >= VCLOCK_MAX:
            raise WalCorruption(
                f"WAL segment {path} has a record of origin {origin} at offset {offset}, "
                f"over the largest origin {VCLOCK_MAX - 1}; {_REFUSAL}"
            )
        expected = self.vclock.get(origin) + 1
        if lsn != expected:
            raise WalCorruption(
                f"WAL segment {path} has origin {origin} lsn {lsn} at offset {offset} where lsn "
                f"{expected} was expected (LSNs go back or skip); {_REFUSAL}"
            )
        self.vclock.reset(origin, lsn)
        self.last_txn_id[origin] = txn_id
        self.max_txn_id = max(self.max_txn_id, txn_id)
