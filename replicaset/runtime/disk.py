"""A full disk: writes are refused with a clear error, everything else goes on.

Theory of operation. Tarantool answers ENOSPC on its WAL by rolling the transaction back
(ER_WAL_IO) and keeps serving. Here three stores share the data directory, and two of them
cannot simply be told "no": a SQLite COMMIT that fails after our WAL append leaves the WAL
ahead of SQLite (only a restart reconciles them), and RocksDB refuses every write after one
failed write until it is reopened (rocksdict has no `DB::Resume`), while decisions and
intent releases of transactions already under way must still be written. So the guard
refuses new work *before* the disk is full, and keeps room for the work under way:

- a reserve file (`disk.reserve`, CockroachDB's "ballast") is made at start where there is
  room for it;
- the free space of the data directory's file system is read (statvfs, microseconds)
  before each WAL append, each quorum transaction begun or prepared, each checkpoint, and
  every `POLL_S`; below `low_water_bytes` the member is FULL: the reserve is deleted, one
  error line is logged, and new writes are refused (`DiskFull`, ER_WAL_IO, naming "no space
  left on device"), so what is under way finishes in the room the reserve leaves;
- a WAL append is also refused alone, with no change of state, when what it and SQLite's
  copy of it would take (`BATCH_SPACE_FACTOR` times its payload) does not fit above the
  low-water mark: a big group commit must not find the disk full at its SQLite commit;
- once free space reaches `reserve_bytes + low_water_bytes` the reserve is made again, one
  line says so, and writes are taken again; the gap between the two marks keeps the state
  from flapping at the edge.

What the reserve cannot cover (a disk filled past it while a write is in flight) still
fails in the store that meets it, with that store's own answer (docs/decisions.md, "Full
disk").
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from replicaset.runtime.writer import WriteFailed

RESERVE_FILE = "disk.reserve"
RESERVE_BYTES = 4 * 1024 * 1024
LOW_WATER_BYTES = 1024 * 1024
POLL_S = 0.5
# Room a WAL append of N payload bytes needs before it is made: the WAL's copy, SQLite's
# (its own WAL, then the database at its checkpoint), and the row versions and indexes;
# an estimate, which the reserve backs.
BATCH_SPACE_FACTOR = 4


class DiskFull(WriteFailed):
    """The data directory's file system is (nearly) full: the write was refused before it
    reached any store, nothing of it remains, and it may be sent again once space is freed."""


def statvfs_free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding `path`."""
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


class DiskGuard:
    """One per member, over its data directory (the WAL, SQLite, the metastore and the
    checkpoints share its file system; a store moved elsewhere by a link is not watched)."""

    def __init__(self, data_dir: Path, log: Any, *, reserve_bytes: int = RESERVE_BYTES,
                 low_water_bytes: int = LOW_WATER_BYTES,
                 free_bytes: Callable[[Path], int] = statvfs_free_bytes) -> None:
        self.data_dir = data_dir
        self.reserve_path = data_dir / RESERVE_FILE
        self.reserve_bytes = reserve_bytes
        self.low_water_bytes = low_water_bytes
        self.full = False
        self._lock = threading.Lock()
        self._log = log
        self._free_bytes = free_bytes

    def open(self) -> None:
        """At start, before any store opens: make the reserve where there is room for it.
        A member stopped on a full disk finds its reserve and starts FULL in the room it
        leaves (reads served, writes refused); one that finds no reserve and no room to
        make it starts FULL too (it was FULL when it stopped, or the disk is as good as
        full), unless not even `low_water_bytes` are free: then it raises `DiskFull`, since
        opening the stores writes."""
        free = self._free_bytes(self.data_dir)
        if not self.reserve_path.exists():
            if free < self.low_water_bytes:
                raise DiskFull(f"no space left on device: cannot start, {free} bytes free on the file system of "
                               f"{self.data_dir}; free at least {self.low_water_bytes} bytes and start again")
            if free < self.reserve_bytes + self.low_water_bytes or not self._make_reserve():
                with self._lock:  # between the marks with no reserve: FULL, as before the stop
                    self._trip(free, released=False)
        self.poll()

    def poll(self) -> bool:
        """Read the free space and move between the states; True while FULL. Under
        `wal_mode = fsync` the writer's check runs in a worker thread, beside the event
        loop's: the lock keeps a change of state, and its line, to one of them."""
        with self._lock:
            return self._poll(self._free_bytes(self.data_dir))

    def _poll(self, free: int) -> bool:
        if not self.full and free < self.low_water_bytes:
            released = self.reserve_path.exists()
            self.reserve_path.unlink(missing_ok=True)
            self._trip(free, released=released)
        elif self.full and free >= self.reserve_bytes + self.low_water_bytes and self._make_reserve():
            self.full = False
            self._log.info("disk_space_back", data_dir=str(self.data_dir), free_bytes=free)
        return self.full

    def _trip(self, free: int, *, released: bool) -> None:
        self.full = True
        self._log.error("disk_full", data_dir=str(self.data_dir), free_bytes=free, reserve_released=released,
                        resumes_at_free_bytes=self.reserve_bytes + self.low_water_bytes)

    def check(self, what: str, payload_bytes: int = 0) -> None:
        """Raise `DiskFull` naming `what` while the disk is full, or when a WAL append of
        `payload_bytes` (a group commit, up to `wal.group_commit_bytes_max`) would leave
        less than the low-water mark once SQLite holds it too: that batch alone is refused,
        since the SQLite commit after its append must not be the write that meets ENOSPC."""
        free = self._free_bytes(self.data_dir)  # one reading for both questions: a statvfs per WAL append
        with self._lock:
            full = self._poll(free)
        if full:
            raise DiskFull(f"no space left on device: {what} refused, the file system of {self.data_dir} is full; "
                           f"nothing was written, retry once space is freed")
        needed = BATCH_SPACE_FACTOR * payload_bytes
        if payload_bytes and free < self.low_water_bytes + needed:
            raise DiskFull(f"no space left on device: {what} of {payload_bytes} bytes refused, the file system of "
                           f"{self.data_dir} has too little room for it; nothing was written, retry once space is "
                           f"freed, or in smaller transactions")

    async def run(self) -> None:
        """Notice space coming back (and going) with no write to ask."""
        while True:
            await trio.sleep(POLL_S)
            self.poll()

    def _make_reserve(self) -> bool:
        """The reserve file at its full size; False, with nothing left behind, when the
        space went meanwhile."""
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _allocate(fd, self.reserve_bytes)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.reserve_path.unlink(missing_ok=True)
            return False
        return True


def _allocate(fd: int, size_bytes: int) -> None:
    """Blocks of the file system for `size_bytes`, taken now. Where fallocate is not offered
    (ZFS before 2.2, some FUSE), the bytes are written, random ones, which a compressing
    file system cannot shrink; on a copy-on-write file system the reserve is a best effort."""
    try:
        os.posix_fallocate(fd, 0, size_bytes)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise
    written = 0
    while written < size_bytes:
        written += os.write(fd, os.urandom(min(1 << 20, size_bytes - written)))
