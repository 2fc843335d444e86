"""The rows a restore replays: WAL directories read as recovery reads them, merged into one
history, and that history in commit order (docs/restore.md, "What comes after the bound").

Theory of operation.
- Reading. A WAL is read whole, segment by segment (`read_wal`, which the audit's convergence
  check reads with too). A torn record at the end of the last segment ends the log, as
  recovery cuts it there (no client saw those rows acknowledged); a torn record in any other
  segment, a corrupt record followed by valid ones and a bad segment header are damage that
  recovery refuses to start on, and so does restore (`WalError`). Only where a row is and what
  orders it are kept, never its payload: rows are read back one by one as they are applied.
- Merging. Several WALs merge by (origin, lsn), apply-once as the writer admits rows (docs/design/README.md
  §4.3): the first copy read is kept, WALs in the order given, and every other copy must carry
  the same txn id and payload digest (one (origin, lsn) has one digest everywhere), or the
  WALs come from members that diverged and there is no one history to restore. Rows of
  origin 0 (local tables) are one member's own: they are taken from that member's WAL only.
- Commit order. A row's place is its commit HLC stamp (the payload's `h`). The stamp is the
  same on every member whatever order each logged the row in, increases with the LSN on its
  origin, and is above every stamp the origin had applied when it committed (the HLC's
  receive rule): a prefix of this order holds every row that a row in it depended on, the DDL
  row its data rows were written against included, so it is a state members could have held.
  Each origin is still taken in LSN order whatever its stamps say (a merge of per-origin
  queues), so a stamp out of order can never open a gap; a row whose payload does not decode
  has no stamp of its own and takes its predecessor's, so it stays right after it.
"""

from __future__ import annotations

import bisect
import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import msgpack
from xxhash import xxh3_64_intdigest

from replicaset.restore.errors import RestoreError
from wal import LOCAL_ORIGIN, Record, TruncatedRecord, VClock, WalCorruption, WalError, decode_record
from wal.segment import (
    Buffer,
    is_torn_segment_file,
    list_segments,
    map_segment,
    read_segment_header,
    read_segment_records,
)
from wal.vclock import VCLOCK_MAX

SEGMENTS_MAPPED_MAX = 8


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


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """Where one WAL row is, and what orders and names it."""

    origin: int
    lsn: int
    txn_id: int
    stamp: int | None
    """The commit stamp of the payload (`h`); None when the payload does not decode."""
    quorum_txn: int | None
    digest: int
    segment: Path
    offset: int


def _stamps(payload: bytes) -> tuple[int | None, int | None]:
    """The commit stamp and quorum txn id of a payload, None where it has none that decodes:
    applying the row will say what is wrong with it."""
    try:
        doc = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception:  # msgpack raises several unrelated types for garbage
        return None, None
    if not isinstance(doc, dict):
        return None, None
    stamp, quorum_txn = doc.get("h"), doc.get("q")
    return (stamp if isinstance(stamp, int) else None), (quorum_txn if isinstance(quorum_txn, int) else None)


def _start_vclock(segment: Path) -> VClock:
    with map_segment(segment) as buf:
        start, _ = read_segment_header(buf)
    return start


class History:
    """The rows of several WALs, each (origin, lsn) once, and their commit order."""

    def __init__(self) -> None:
        self._rows: dict[int, dict[int, Row]] = {}
        self._lines: dict[int, list[tuple[int, Row]]] | None = None
        self.copies = 0
        """Rows read again: from another WAL, or a second time from one."""
        self.warnings: list[str] = []

    def add_wal(self, wal_dir: Path, *, local_rows: bool) -> tuple[VClock, VClock]:
        """Read a WAL into the history and return where it starts and ends. `local_rows`
        takes its rows of origin 0: only for the WAL of the member whose local tables they are.
        Raises `WalError` for damage and `RestoreError` for a row that differs from a copy."""
        segments = list_segments(wal_dir)
        start = VClock()
        if segments and not is_torn_segment_file(segments[0]):
            start = _start_vclock(segments[0])
        end = start.copy()
        for segment, offset, record in read_wal(wal_dir, on_torn_tail=self._torn):
            if record.origin >= VCLOCK_MAX:
                raise WalCorruption(f"WAL segment {segment} has a record of origin {record.origin} at offset "
                                    f"{offset}, over the largest origin {VCLOCK_MAX - 1}")
            if record.lsn > end.get(record.origin):
                end.reset(record.origin, record.lsn)
            if record.origin != LOCAL_ORIGIN or local_rows:
                self._add(segment, offset, record)
        self._lines = None
        return start, end

    def _torn(self, why: str) -> None:
        self.warnings.append(f"{why}: that log ends there, as recovery cuts it")

    def _add(self, segment: Path, offset: int, record: Record) -> None:
        stamp, quorum_txn = _stamps(record.payload)
        row = Row(origin=record.origin, lsn=record.lsn, txn_id=record.txn_id, stamp=stamp, quorum_txn=quorum_txn,
                  digest=xxh3_64_intdigest(record.payload), segment=segment, offset=offset)
        rows = self._rows.setdefault(row.origin, {})
        held = rows.get(row.lsn)
        if held is None:
            rows[row.lsn] = row
            return
        self.copies += 1
        if (held.txn_id, held.digest) != (row.txn_id, row.digest):
            raise RestoreError(
                f"row {row.origin}:{row.lsn} is txn {held.txn_id} in {held.segment} but txn {row.txn_id} "
                f"(or other bytes) in {segment}: the members these WALs come from diverged (an LSN was "
                "reused); restore from the WALs of one side")

    def _timelines(self) -> dict[int, list[tuple[int, Row]]]:
        """Per origin, its rows in LSN order with the stamp that places each."""
        if self._lines is None:
            self._lines = {}
            for origin, rows in self._rows.items():
                line, stamp = [], 0
                for lsn in sorted(rows):
                    row = rows[lsn]
                    stamp = row.stamp if row.stamp is not None else stamp
                    line.append((stamp, row))
                self._lines[origin] = line
        return self._lines

    def origins(self) -> set[int]:
        return set(self._rows)

    def size(self) -> int:
        """How many distinct rows the history holds."""
        return sum(map(len, self._rows.values()))

    def stamp_at(self, origin: int, lsn: int) -> int | None:
        """The stamp that places row `origin:lsn`, None when no WAL given holds it."""
        line = self._timelines().get(origin, [])
        i = bisect.bisect_left(line, lsn, key=lambda entry: entry[1].lsn)
        return line[i][0] if i < len(line) and line[i][1].lsn == lsn else None

    def last_stamp(self) -> int | None:
        return max((line[-1][0] for line in self._timelines().values() if line), default=None)

    def find_txn(self, txn_id: int) -> Row | None:
        """A row of transaction `txn_id`: its WAL txn id, or its quorum transaction's id."""
        return next((row for rows in self._rows.values() for row in rows.values()
                     if txn_id in (row.txn_id, row.quorum_txn)), None)

    def extent(self, origin: int) -> str:
        """What the WALs hold of an origin, for messages."""
        rows = self._rows.get(origin)
        if not rows:
            return f"no WAL given holds a row of origin {origin}"
        return f"the WALs given hold origin {origin} from {origin}:{min(rows)} to {origin}:{max(rows)}"

    def cut(self, stamp: int) -> dict[int, int]:
        """Per origin with a row past `stamp`, the LSN before its first such row; an origin
        not listed has no row past it."""
        cut = {}
        for origin, line in self._timelines().items():
            beyond = next((row.lsn for placed, row in line if placed > stamp), None)
            if beyond is not None:
                cut[origin] = beyond - 1
        return cut

    def reach(self, base: VClock, cut: Mapping[int, int]) -> VClock:
        """Where a replay from `base` ends: per origin the cut, or its last row when the cut
        does not stop it, never below the base."""
        reached = base.copy()
        for origin, rows in self._rows.items():
            top = cut.get(origin, max(rows))
            if top > reached.get(origin):
                reached.reset(origin, top)
        return reached

    def missing(self, low: VClock, high: VClock) -> list[tuple[int, int, int]]:
        """`(origin, first, last)`: per origin, the first run of LSNs between the bounds that
        no WAL given holds."""
        gaps = []
        for origin, top in high.items():
            rows = self._rows.get(origin, {})
            lsn = low.get(origin) + 1
            while lsn <= top and lsn in rows:
                lsn += 1
            first = lsn
            while lsn <= top and lsn not in rows:
                lsn += 1
            if first <= top:
                gaps.append((origin, first, lsn - 1))
        return gaps

    def between(self, low: VClock, high: VClock) -> list[list[tuple[int, Row]]]:
        """Per origin, its placed rows with `low < lsn <= high`."""
        return [[(stamp, row) for stamp, row in line if low.get(origin) < row.lsn <= high.get(origin)]
                for origin, line in self._timelines().items()]

    def count(self, low: VClock, high: VClock) -> int:
        return sum(map(len, self.between(low, high)))

    def commit_order(self, low: VClock, high: VClock) -> Iterator[Row]:
        """The rows with `low < lsn <= high` in commit order; ties (a transaction's rows of
        origin 0 and of its origin share a stamp) go by origin."""
        merged = heapq.merge(*self.between(low, high), key=lambda entry: (entry[0], entry[1].origin))
        return (row for _, row in merged)


class RowReader:
    """Reads rows back from their segments, keeping the last few mapped: commit order moves
    between WALs, and a long restore must not hold every segment open."""

    def __init__(self) -> None:
        self._maps: OrderedDict[Path, tuple[ExitStack, Buffer]] = OrderedDict()

    def record(self, row: Row) -> Record:
        entry = self._maps.pop(row.segment, None)
        if entry is None:
            if len(self._maps) >= SEGMENTS_MAPPED_MAX:
                self._maps.popitem(last=False)[1][0].close()
            stack = ExitStack()
            entry = (stack, stack.enter_context(map_segment(row.segment)))
        self._maps[row.segment] = entry
        try:
            record, _ = decode_record(entry[1], row.offset)
        except WalError as exc:
            raise RestoreError(f"row {row.origin}:{row.lsn} no longer reads back from {row.segment}: {exc} "
                               "(was the WAL changed while restoring?)") from exc
        return record

    def close(self) -> None:
        while self._maps:
            self._maps.popitem()[1][0].close()

    def __enter__(self) -> RowReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
