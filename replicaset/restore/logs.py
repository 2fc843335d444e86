"""Reading WAL directories as recovery reads them, for the replays of restore and of the audit's
convergence check.

A WAL is read whole, segment by segment. A torn record at the end of the last segment ends the
log, as recovery cuts it there (no client saw those rows acknowledged); a torn record in any
other segment, a corrupt record followed by valid ones and a bad segment header are damage that
recovery refuses to start on (`WalError`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from wal import Record, TruncatedRecord, WalCorruption
from wal.segment import is_torn_segment_file, list_segments, read_segment_records


def read_wal(wal_dir: Path, *, on_torn_tail: Callable[[str], None] | None = None) -> Iterator[tuple[Path, int, Record]]:
    """`(segment, offset, record)` of every record of a WAL directory, in log order, as
    recovery reads it; `on_torn_tail` hears of the torn tail that ends the log, if any."""
    segments = list_segments(wal_dir)
    for path in segments:
        last = path == segments[-1]
        if last and is_torn_segment_file(path):
            if on_torn_tail is not None:
                on_torn_tail(f"WAL segment {path} has a torn header and no record (a crash while it was created)")
            return
        try:
            yield from ((path, offset, record) for offset, record in read_segment_records(path))
        except TruncatedRecord as exc:
            if not last:
                raise WalCorruption(f"{exc}, and it is not the last segment") from exc
            if on_torn_tail is not None:
                on_torn_tail(str(exc))
