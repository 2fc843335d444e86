"""An OS crash for tests: what each `os.fsync` made durable is recorded, and a crash cuts every
file of a directory back to it, as a power loss does to bytes still in the page cache."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


class PageCache:
    """Installed over `os.fsync` for one test; `os_crash` drops what no fsync covered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._durable_bytes: dict[int, int] = {}  # inode -> its size at its last fsync
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            real_fsync(fd)
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                self._durable_bytes[st.st_ino] = st.st_size

        monkeypatch.setattr(os, "fsync", fsync)

    def os_crash(self, directory: Path) -> None:
        """Cut every file in `directory` to the bytes its last fsync made durable (none if it
        was never fsynced). Closed files only: the process is gone."""
        for path in directory.iterdir():
            if path.is_file():
                st = path.stat()
                os.truncate(path, min(st.st_size, self._durable_bytes.get(st.st_ino, 0)))
