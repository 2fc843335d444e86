"""An OS crash for tests and the simulator: what each `os.fsync` made durable is recorded,
and a crash takes a directory back to it, as a power loss does to what was still only in
the page cache.

Two things are durable separately, as on Linux filesystems:
- a file's bytes: those it held when an fsync of the file began (none if never fsynced);
- a directory's entries (its names, and which file each names): those it held when an fsync
  of the directory began. A name created, renamed or unlinked since is undone by a crash: a
  new name is gone, a file renamed over an old one leaves the old one under its name, with
  the old one's durable bytes, and an unlinked name comes back.
A directory never fsynced while the cache was installed has no durable entry. Only regular
files are modelled; subdirectories are left as they are.
"""

from __future__ import annotations

import os
import stat
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

Inode = tuple[int, int]  # (st_dev, st_ino)


class Patcher(Protocol):
    """What installs the page cache over `os.fsync` and takes it off again: a test's
    `monkeypatch`, or `Patch`."""

    def setattr(self, target: Any, name: str, value: Any) -> None: ...


class Patch:
    """A `Patcher` outside pytest (a tool's run), undone by `undo`."""

    def __init__(self) -> None:
        self._saved: list[tuple[Any, str, Any]] = []

    def setattr(self, target: Any, name: str, value: Any) -> None:
        self._saved.append((target, name, getattr(target, name)))
        setattr(target, name, value)

    def undo(self) -> None:
        while self._saved:
            target, name, value = self._saved.pop()
            setattr(target, name, value)


class PageCache:
    """Installed over `os.fsync` for one test; `os_crash` drops what no fsync covered."""

    def __init__(self, monkeypatch: Patcher) -> None:
        self._durable_bytes: dict[Inode, int] = {}  # a file -> its size when its last fsync began
        self._durable_names: dict[Inode, dict[str, Inode]] = {}  # a directory -> name -> file
        # A descriptor on every file a durable name points to, so that the file outlives an
        # unlink or a rename over it and a crash can bring it back.
        self._kept: dict[Inode, int] = {}
        weakref.finalize(self, _close_all, self._kept)
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            # Measured before the fsync: what changes while it runs may not be covered.
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            names = self._entries(fd) if stat.S_ISDIR(st.st_mode) else None
            real_fsync(fd)
            if stat.S_ISREG(st.st_mode):
                self._keep(inode, lambda: os.dup(fd))  # its inode number is never reused
                self._durable_bytes[inode] = st.st_size
            elif names is not None:
                self._durable_names[inode] = names

        monkeypatch.setattr(os, "fsync", fsync)

    def os_crash(self, directory: Path) -> None:
        """Take `directory` back to its durable entries, and cut each of its files to the
        bytes its last fsync made durable. Closed files only: the process is gone."""
        st = directory.stat()
        durable = self._durable_names.get((st.st_dev, st.st_ino), {})
        now = self._current(directory)
        for name, inode in now.items():
            if durable.get(name) != inode:
                (directory / name).unlink()  # created, or renamed over a durable name, since
        for name, inode in durable.items():
            path = directory / name
            size = self._durable_bytes.get(inode, 0)
            if now.get(name) == inode:
                os.truncate(path, min(path.stat().st_size, size))
            else:  # renamed away or unlinked since: the durable file comes back under its name
                path.write_bytes(os.pread(self._kept[inode], size, 0))
        # What survived is on the disk: the next crash starts from it.
        fd = os.open(directory, os.O_RDONLY)
        try:
            self._durable_names[(st.st_dev, st.st_ino)] = names = self._entries(fd)
        finally:
            os.close(fd)
        for name, inode in names.items():
            self._durable_bytes[inode] = (directory / name).stat().st_size

    def crash_image(self, directory: Path, into: Path) -> None:
        """Write to the new directory `into` what an OS crash now would leave of `directory`
        (its durable names, each with its durable bytes), leaving `directory` as it is: for
        checking, while a test runs, what a crash at that moment would keep."""
        st = directory.stat()
        into.mkdir()
        for name, inode in self._durable_names.get((st.st_dev, st.st_ino), {}).items():
            (into / name).write_bytes(os.pread(self._kept[inode], self._durable_bytes.get(inode, 0), 0))

    def _entries(self, dir_fd: int) -> dict[str, Inode]:
        names: dict[str, Inode] = {}
        for name in os.listdir(dir_fd):
            try:
                if not stat.S_ISREG(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                    continue
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
            except FileNotFoundError:  # unlinked meanwhile: not durable under that name
                continue
            st = os.fstat(fd)
            inode = (st.st_dev, st.st_ino)
            names[name] = inode
            if not self._keep(inode, lambda: fd):
                os.close(fd)
        return names

    def _keep(self, inode: Inode, open_fd: Callable[[], int]) -> bool:
        """Hold a descriptor on the file, once; whether `open_fd`'s was kept."""
        if inode in self._kept:
            return False
        self._kept[inode] = open_fd()
        return True

    @staticmethod
    def _current(directory: Path) -> dict[str, Inode]:
        entries = {}
        for path in directory.iterdir():
            st = path.lstat()
            if stat.S_ISREG(st.st_mode):
                entries[path.name] = (st.st_dev, st.st_ino)
        return entries


def _close_all(kept: dict[Inode, int]) -> None:
    for fd in kept.values():
        os.close(fd)
    kept.clear()
