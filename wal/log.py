"""The log directory: group-commit appends, recovery at open, and reading from a vclock.

Theory of operation. The log is a sequence of segments; only the last one (the live segment) is
written, through one O_APPEND file descriptor. An append is all or nothing: it checks LSNs and
encodes every record before writing, writes the batch with one write (and one fsync under
`FSYNC`), and only then advances `vclock` and the live end offset. Readers map the live segment
only up to that end offset, so they never see an append in flight, and under `FSYNC` never see
bytes that are not durable. A failed write is cut off again with ftruncate, so the file ends
where the vclock says. A new segment is written whole (header and its first batch) under
`NAME.wal.inprogress`, made durable, then renamed into place: a process crash never leaves a
half-created segment, and a leftover `.inprogress` file is an append that never returned.
Under `WRITE` the log remembers which segments hold bytes not fsynced yet, so that `sync` can
make every appended row durable when a caller needs it whatever the mode.
"""

import contextlib
import dataclasses
import enum
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

from wal.errors import InvalidRecord, LsnOrderError, RowsUnavailable, WalClosed, WalWriteError
from wal.record import HEADER_SIZE, Record, encode_record
from wal.recovery import recover_directory
from wal.segment import (
    IN_PROGRESS_SUFFIX,
    read_segment_records,
    segment_name,
    write_segment_header,
)
from wal.vclock import VCLOCK_MAX, VClock

DEFAULT_MAX_SIZE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SyncPoint:
    """A snapshot of what one sync makes durable (`Wal.sync_point`)."""

    marks: dict[Path, int]
    directory: bool
    rolls: int
    vclock: VClock


class WalMode(str, enum.Enum):
    WRITE = "write"
    """write(2) per group commit: survives a process crash."""
    FSYNC = "fsync"
    """write(2) and fsync(2) per group commit: survives power loss."""


def _ignore_event(event: str, **fields: object) -> None:
    """The default `log` callback: the wal package has no logger of its own."""


class Wal:
    """A log directory open for appending; create it with `Wal.open`."""

    def __init__(
        self,
        *,
        directory: Path,
        mode: WalMode,
        max_size_bytes: int,
        max_record_bytes: int,
        segments: list[tuple[Path, VClock]],
        vclock: VClock,
        last_txn_id: dict[int, int],
        max_txn_id: int,
        fd: int,
        live_end: int,
        live_header_end: int,
        unsynced: list[Path],
    ) -> None:
        self._directory = directory
        self._mode = mode
        self._max_size_bytes = max_size_bytes
        self._max_record_bytes = max_record_bytes
        self._segments = segments
        self._vclock = vclock
        self._last_txn_id = last_txn_id
        self._max_txn_id = max_txn_id
        self._fd: int | None = fd
        # (path, end offset) in one attribute, so a reader in another thread sees a matching pair.
        self._live = (segments[-1][0], live_end)
        self._live_header_end = live_header_end
        # Segments that may hold bytes an OS crash can still take away -> the count of appends
        # when each was last written to (a sync forgets a segment only if none came since).
        self._unsynced = dict.fromkeys(unsynced, 0)
        self._appends = 0
        # Whether a segment was created (under WRITE) since the directory was last fsynced,
        # and how many were: a sync clears the flag only if no roll came since its snapshot.
        self._names_unsynced = bool(unsynced)
        self._rolls = 0
        # The vclock at the end of the durable prefix of the log (at its start when unknown).
        self._synced_vclock = segments[0][1].copy() if unsynced else vclock.copy()
        self._unusable_reason: str | None = None

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: WalMode = WalMode.WRITE,
        max_size_bytes: int = DEFAULT_MAX_SIZE_BYTES,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        start_vclock: VClock | None = None,
        log: Callable[..., None] | None = None,
    ) -> "Wal":
        """Open (creating if missing) and recover a log directory.

        `start_vclock` is where a log with no segment starts, e.g. the vclock of the checkpoint a
        joining instance received, so that the rows after it can be appended. For a log that has
        segments it must already be covered by the recovered vclock.
        """
        mode = WalMode(mode)
        if max_size_bytes <= 0:
            raise ValueError(f"max_size_bytes must be positive, got {max_size_bytes}")
        if max_record_bytes < HEADER_SIZE:
            raise ValueError(
                f"max_record_bytes must be at least {HEADER_SIZE}, got {max_record_bytes}"
            )
        directory = Path(path)
        directory.mkdir(parents=True, exist_ok=True)
        recovered = recover_directory(directory, log=log or _ignore_event)
        if recovered.segments:
            if start_vclock is not None and not start_vclock <= recovered.vclock:
                raise ValueError(
                    f"the WAL in {directory} ends at vclock {recovered.vclock}, "
                    f"which does not cover start_vclock {start_vclock}"
                )
            live_path = recovered.segments[-1][0]
            fd = os.open(live_path, os.O_WRONLY | os.O_APPEND)
            wal = cls(
                directory=directory,
                mode=mode,
                max_size_bytes=max_size_bytes,
                max_record_bytes=max_record_bytes,
                segments=list(recovered.segments),
                vclock=recovered.vclock,
                last_txn_id=recovered.last_txn_id,
                max_txn_id=recovered.max_txn_id,
                fd=fd,
                live_end=recovered.tail_end,
                live_header_end=recovered.tail_header_end,
                # Whatever a previous process left in the page cache is not known to be durable.
                unsynced=[path for path, _ in recovered.segments],
            )
            if mode is WalMode.FSYNC:
                # Once, so that under FSYNC every row in the log is durable from now on and
                # only appends, in whatever thread, touch what a sync would read.
                wal.sync()
            return wal
        start = start_vclock.copy() if start_vclock is not None else VClock()
        live_path, fd, header_end = _create_segment(directory, start, b"", mode)
        return cls(
            directory=directory,
            mode=mode,
            max_size_bytes=max_size_bytes,
            max_record_bytes=max_record_bytes,
            segments=[(live_path, start)],
            vclock=start.copy(),
            last_txn_id={},
            max_txn_id=0,
            fd=fd,
            live_end=header_end,
            live_header_end=header_end,
            unsynced=[] if mode is WalMode.FSYNC else [live_path],
        )

    @property
    def synced_vclock(self) -> VClock:
        """Where the durable prefix of the log ends: what an OS crash cannot take away. Equal
        to `vclock` under `FSYNC`; under `WRITE` it moves with `sync`."""
        return self._synced_vclock.copy()

    @property
    def vclock(self) -> VClock:
        """What is in the log: written under `WRITE`, fsynced under `FSYNC`."""
        return self._vclock.copy()

    @property
    def last_txn_id(self) -> dict[int, int]:
        """Per origin, the txn id of its last row, for SUBSCRIBE's split-brain check."""
        return dict(self._last_txn_id)

    @property
    def max_txn_id(self) -> int:
        """The highest txn id in the log, to seed the hybrid logical clock after a restart."""
        return self._max_txn_id

    def segments(self) -> list[tuple[Path, VClock]]:
        """(path, start vclock) of every segment, oldest first."""
        return [(path, start.copy()) for path, start in self._segments]

    def remove_oldest(self, names: Sequence[str]) -> list[Path]:
        """Remove the segments named, which must be the oldest of the log and not the live
        one (WAL GC decides which: `replicaset.core.gc`). The log then starts at the next
        segment's vclock; a reader already past them is unaffected, one that still needed
        them gets `RowsUnavailable`. Call it where no append runs (a roll adds a segment)."""
        count = len(names)
        oldest = [path.name for path, _ in self._segments[:count]]
        if list(names) != oldest or count >= len(self._segments):
            raise ValueError(f"only the oldest segments but the live one can go: asked {list(names)}, "
                             f"the log has {[path.name for path, _ in self._segments]}")
        removed = [path for path, _ in self._segments[:count]]
        self._segments = self._segments[count:]
        for path in removed:
            self._unsynced.pop(path, None)
            path.unlink(missing_ok=True)
        return removed

    def append(self, records: Sequence[Record]) -> None:
        """Write one group commit: every record with one write and at most one fsync, or none.

        LSNs are checked and records encoded before any byte is written, so a refused batch
        (`LsnOrderError`, `InvalidRecord`, `RecordTooLarge`) leaves the log as it was. A failed
        write is rolled back and raises `WalWriteError` with the vclock unchanged.
        """
        fd = self._writable_fd()
        if not records:
            return
        vclock = self._vclock.copy()
        for record in records:
            _check_next_lsn(vclock, record)
            vclock.reset(record.origin, record.lsn)
        batch = b"".join(
            encode_record(record, max_record_bytes=self._max_record_bytes) for record in records
        )
        _, live_end = self._live
        if live_end > self._live_header_end and live_end + len(batch) > self._max_size_bytes:
            self._roll(fd, batch)
        else:
            self._write_live(fd, batch)
        live_path, _ = self._live
        if self._mode is WalMode.WRITE:
            self._appends += 1
            self._unsynced[live_path] = self._appends
        self._vclock = vclock
        if self._mode is WalMode.FSYNC:
            self._synced_vclock = vclock.copy()
        for record in records:
            self._last_txn_id[record.origin] = record.txn_id
            self._max_txn_id = max(self._max_txn_id, record.txn_id)

    def sync(self) -> None:
        """Make every appended row durable (fsync), whatever the mode.

        Under `WRITE` some rows must still survive an OS crash before anyone relies on them:
        the rows a checkpoint copies, a `_cluster` registration, the rows a relay ships. Like
        `append`, it must not run concurrently with an append; `sync_point`, `fsync_point` and
        `synced` split it for a caller that lets appends go on during the fsyncs.
        """
        point = self.sync_point()
        if point is not None:
            self.fsync_point(point)
            self.synced(point)

    def sync_point(self) -> SyncPoint | None:
        """What a sync now must make durable; None when nothing was appended since the last.
        Call it where appends are made (it reads the log's state)."""
        self._writable_fd()  # closed, or refusing appends: raise as `append` would
        if not self._unsynced:
            return None
        return SyncPoint(
            marks=dict(self._unsynced), directory=self._names_unsynced, rolls=self._rolls, vclock=self._vclock.copy()
        )

    def fsync_point(self, point: SyncPoint) -> None:
        """The fsyncs of a sync point: its segments, then the directory if a segment was created
        (its name is not durable yet under `WRITE`). Any thread, appends may go on meanwhile. A
        failed fsync leaves the log refusing appends: the kernel may have dropped the pages."""
        try:
            for path in point.marks:
                fsync_path(path)
            if point.directory:
                fsync_path(self._directory)
        except OSError as exc:
            self._unusable_reason = f"fsync of the WAL failed: {exc}"
            raise WalWriteError(f"sync of the WAL in {self._directory} failed: {exc}") from exc

    def synced(self, point: SyncPoint) -> None:
        """Record that `point` is durable. Call it where appends are made."""
        for path, mark in point.marks.items():
            if self._unsynced.get(path) == mark:
                del self._unsynced[path]
        if self._rolls == point.rolls:
            self._names_unsynced = False
        self._synced_vclock = self._synced_vclock.merge(point.vclock)

    def read_from(self, vclock: VClock) -> Iterator[Record]:
        """Every record with `lsn > vclock.get(origin)`, in log order.

        Segments whose every row the vclock covers are not opened. The iterator ends at the end
        of the live segment as it is when the reader reaches it; call again from the vclock
        reached to follow later appends. Raises `RowsUnavailable` at once when the log starts
        after the vclock (its rows were collected or never here): streaming would leave a hole.
        """
        segments = list(self._segments)
        first_start = segments[0][1]
        if not first_start <= vclock:
            raise RowsUnavailable(
                f"the WAL starts at vclock {first_start}, which {vclock} does not reach: the rows "
                "between them were collected or never logged here"
            )
        first = max(i for i, (_, start) in enumerate(segments) if start <= vclock)
        return self._read_segments([path for path, _ in segments[first:]], vclock.copy())

    def _read_segments(self, paths: list[Path], vclock: VClock) -> Iterator[Record]:
        for path in paths:
            live_path, live_end = self._live
            end_offset = live_end if path == live_path else None
            try:
                records = read_segment_records(path, end_offset=end_offset)
                for _, record in records:
                    if record.lsn > vclock.get(record.origin):
                        yield record
            except FileNotFoundError as exc:
                raise RowsUnavailable(f"WAL segment {path.name} was collected while it was being read from {vclock}") from exc

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> "Wal":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _writable_fd(self) -> int:
        if self._fd is None:
            raise WalClosed(f"the WAL in {self._directory} is closed")
        if self._unusable_reason is not None:
            raise WalWriteError(
                f"the WAL in {self._directory} refuses appends: {self._unusable_reason}; "
                "restart the process to recover it"
            )
        return self._fd

    def _write_live(self, fd: int, batch: bytes) -> None:
        live_path, live_end = self._live
        try:
            _write_all(fd, batch)
            if self._mode is WalMode.FSYNC:
                os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, live_end)
            except OSError as rollback_exc:
                self._unusable_reason = (
                    f"cutting a failed append off {live_path} at offset {live_end} failed: "
                    f"{rollback_exc}"
                )
            raise WalWriteError(f"append to WAL segment {live_path} failed: {exc}") from exc
        self._live = (live_path, live_end + len(batch))

    def _roll(self, old_fd: int, batch: bytes) -> None:
        """Start a new segment with this batch as its first rows, named by the vclock before it."""
        start = self._vclock.copy()
        try:
            path, new_fd, header_end = _create_segment(self._directory, start, batch, self._mode)
        except OSError as exc:
            leftover = self._directory / segment_name(start.signature)
            if leftover.exists():
                self._unusable_reason = f"a failed segment creation left {leftover} behind"
            raise WalWriteError(f"creating WAL segment {leftover} failed: {exc}") from exc
        self._fd = new_fd
        self._live = (path, header_end + len(batch))
        self._live_header_end = header_end
        if self._mode is WalMode.WRITE:
            self._names_unsynced = True
            self._rolls += 1
        self._segments.append((path, start))
        # The old segment's bytes are written (and synced under FSYNC); a failing close of its
        # descriptor cannot take them back, and the batch is already in the log.
        with contextlib.suppress(OSError):
            os.close(old_fd)


def _check_next_lsn(vclock: VClock, record: Record) -> None:
    origin = record.origin
    if not isinstance(origin, int) or isinstance(origin, bool) or not 0 <= origin < VCLOCK_MAX:
        raise InvalidRecord(f"record origin must be an int in 0..{VCLOCK_MAX - 1}, got {origin!r}")
    expected = vclock.get(origin) + 1
    if record.lsn != expected:
        raise LsnOrderError(
            f"origin {origin}: lsn {record.lsn} appended where lsn {expected} is next "
            "(a gap or a reuse); nothing written"
        )


def _create_segment(
    directory: Path, start: VClock, batch: bytes, mode: WalMode
) -> tuple[Path, int, int]:
    """Write a segment whole under a temporary name, then rename it into the log.

    Returns its path, an O_APPEND descriptor on it, and the offset of its first record.
    """
    header = write_segment_header(start)
    name = segment_name(start.signature)
    path = directory / name
    temporary = directory / (Path(name).stem + IN_PROGRESS_SUFFIX)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    created = temporary
    try:
        _write_all(fd, header + batch)
        if mode is WalMode.FSYNC:
            os.fsync(fd)
        os.rename(temporary, path)
        created = path
        if mode is WalMode.FSYNC:
            fsync_path(directory)
    except OSError:
        os.close(fd)
        created.unlink(missing_ok=True)
        raise
    return path, fd, len(header)


def _write_all(fd: int, data: bytes) -> None:
    """One write(2) in the normal case; a short write (disk nearly full) continues with the rest."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_path(path: Path) -> None:
    """fsync a file by name, or a directory, which makes a created or renamed name in it
    durable (an fsync of the file alone does not cover its name)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
