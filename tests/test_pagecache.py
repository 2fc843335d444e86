"""The OS-crash helper itself: what it keeps and what it takes, file bytes and names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from replicaset.testing.pagecache import PageCache
from wal import fsync_path


def fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> PageCache:
    return PageCache(monkeypatch)


def test_bytes_after_the_last_fsync_of_a_file_are_lost(cache: PageCache, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"durable")
    fsync_file(tmp_path / "f")
    fsync_path(tmp_path)
    with open(tmp_path / "f", "ab") as f:
        f.write(b" written only")
    cache.os_crash(tmp_path)
    assert (tmp_path / "f").read_bytes() == b"durable"


def test_a_file_fsynced_in_a_directory_never_fsynced_is_lost(cache: PageCache, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    fsync_file(tmp_path / "f")
    cache.os_crash(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_name_created_after_the_directory_fsync_is_lost(cache: PageCache, tmp_path: Path) -> None:
    (tmp_path / "old").write_bytes(b"old")
    fsync_file(tmp_path / "old")
    fsync_path(tmp_path)
    (tmp_path / "new").write_bytes(b"new")
    fsync_file(tmp_path / "new")
    cache.os_crash(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]


def test_a_rename_over_a_file_is_undone_unless_the_directory_is_fsynced(cache: PageCache, tmp_path: Path) -> None:
    """write, fsync, rename: the rename is a change of the directory, like a creation."""
    (tmp_path / "f").write_bytes(b"old")
    fsync_file(tmp_path / "f")
    fsync_path(tmp_path)
    (tmp_path / "f.partial").write_bytes(b"new")
    fsync_file(tmp_path / "f.partial")
    os.replace(tmp_path / "f.partial", tmp_path / "f")
    cache.os_crash(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    assert (tmp_path / "f").read_bytes() == b"old"
    (tmp_path / "f.partial").write_bytes(b"new")
    fsync_file(tmp_path / "f.partial")
    os.replace(tmp_path / "f.partial", tmp_path / "f")
    fsync_path(tmp_path)
    cache.os_crash(tmp_path)
    assert (tmp_path / "f").read_bytes() == b"new"


def test_a_rename_away_and_an_unlink_are_undone_unless_the_directory_is_fsynced(cache: PageCache, tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(name.encode() * 3)
        fsync_file(tmp_path / name)
    fsync_path(tmp_path)
    os.rename(tmp_path / "a", tmp_path / "c")
    (tmp_path / "b").unlink()
    cache.os_crash(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"a": b"aaa", "b": b"bbb"}
    cache.os_crash(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == {"a": b"aaa", "b": b"bbb"}, "what survived stays"


def test_subdirectories_are_left_alone(cache: PageCache, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x")
    cache.os_crash(tmp_path)
    assert (tmp_path / "sub" / "f").read_bytes() == b"x"


def test_a_crash_image_is_what_a_crash_now_would_leave(cache: PageCache, tmp_path: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    (live / "f").write_bytes(b"durable")
    fsync_file(live / "f")
    fsync_path(live)
    with open(live / "f", "ab") as f:
        f.write(b" not yet")
    (live / "g").write_bytes(b"new name")
    fsync_file(live / "g")
    cache.crash_image(live, tmp_path / "image")
    assert {p.name: p.read_bytes() for p in (tmp_path / "image").iterdir()} == {"f": b"durable"}
    assert {p.name: p.read_bytes() for p in live.iterdir()} == {"f": b"durable not yet", "g": b"new name"}
