"""Appends: one write and one fsync per group commit, refusals and failures leave nothing."""

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from replicaset.testing.pagecache import PageCache
from wal import (
    InvalidRecord,
    LsnOrderError,
    Record,
    RecordTooLarge,
    RecordType,
    VClock,
    Wal,
    WalClosed,
    WalMode,
    WalWriteError,
)


def dml(origin: int, lsn: int, payload: bytes = b"") -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=1000 + lsn, payload=payload)


def log_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    original: Callable[..., object] = getattr(os, name)

    def wrapper(*args: object) -> object:
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(os, name, wrapper)
    return calls


@pytest.mark.parametrize(("mode", "fsyncs"), [(WalMode.FSYNC, 1), (WalMode.WRITE, 0)])
def test_one_write_and_at_most_one_fsync_per_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: WalMode, fsyncs: int
) -> None:
    wal = Wal.open(tmp_path, mode=mode)
    fsync_calls = counting(monkeypatch, "fsync")
    write_calls = counting(monkeypatch, "write")
    for lsn in range(1, 6, 2):
        wal.append([dml(1, lsn, b"a" * 100), dml(1, lsn + 1, b"b" * 50), dml(2, (lsn + 1) // 2)])
    assert len(fsync_calls) == 3 * fsyncs
    assert len(write_calls) == 3
    assert wal.vclock == VClock({1: 6, 2: 3})


def test_rolling_append_under_fsync_syncs_the_segment_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = Wal.open(tmp_path, mode="fsync", max_size_bytes=100)
    wal.append([dml(1, 1, b"x" * 40)])
    fsync_calls = counting(monkeypatch, "fsync")
    write_calls = counting(monkeypatch, "write")
    wal.append([dml(1, 2, b"x" * 40)])
    assert len(wal.segments()) == 2
    assert (len(write_calls), len(fsync_calls)) == (1, 2)


def test_sync_under_write_makes_every_appended_row_survive_an_os_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PageCache(monkeypatch)
    wal = Wal.open(tmp_path, mode="write", max_size_bytes=100)
    wal.append([dml(1, 1, b"x" * 40)])
    wal.append([dml(1, 2, b"x" * 40)])  # a second segment, created under `write`
    assert len(wal.segments()) == 2
    wal.sync()
    fsync_calls = counting(monkeypatch, "fsync")
    wal.sync()
    assert fsync_calls == []  # nothing appended since the last sync
    wal.append([dml(1, 3, b"x" * 40)])  # written, not synced
    wal.close()
    cache.os_crash(tmp_path)
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == VClock({1: 2})


@pytest.mark.parametrize(
    "batch",
    [
        [dml(1, 5)],
        [dml(1, 4)],
        [dml(1, 3)],
        [dml(2, 2)],
        [dml(1, 6), dml(1, 8)],
        [dml(1, 6), dml(1, 6)],
        [dml(2, 1), dml(1, 6), dml(1, 7), dml(2, 3)],
    ],
    ids=["reuse", "back", "far-back", "gap-origin-2", "gap-in-batch", "reuse-in-batch", "late-gap"],
)
def test_lsn_gaps_and_reuse_write_nothing(tmp_path: Path, batch: list[Record]) -> None:
    wal = Wal.open(tmp_path)
    wal.append([dml(1, lsn) for lsn in range(1, 6)])
    before = log_bytes(tmp_path)
    with pytest.raises(LsnOrderError):
        wal.append(batch)
    assert log_bytes(tmp_path) == before
    assert wal.vclock == VClock({1: 5})
    wal.append([dml(1, 6)])
    assert wal.vclock == VClock({1: 6})


def test_invalid_and_oversize_records_write_nothing(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, max_record_bytes=64)
    wal.append([dml(1, 1, b"x" * 32)])
    before = log_bytes(tmp_path)
    with pytest.raises(RecordTooLarge):
        wal.append([dml(1, 2), dml(1, 3, b"x" * 33)])
    with pytest.raises(InvalidRecord):
        wal.append([dml(32, 1)])
    with pytest.raises(InvalidRecord):
        wal.append([Record(type=RecordType.DML, origin=1, lsn=2, txn_id=-1, payload=b"")])
    assert log_bytes(tmp_path) == before
    assert wal.vclock == VClock({1: 1})


def test_origin_zero_rows_are_logged(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        wal.append([dml(0, 1), dml(5, 1)])
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == VClock({0: 1, 5: 1})


def test_failed_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = Wal.open(tmp_path)
    wal.append([dml(1, 1, b"kept")])
    before = log_bytes(tmp_path)
    real_write = os.write
    calls: list[int] = []

    def half_then_enospc(fd: int, data: bytes) -> int:
        calls.append(1)
        if len(calls) == 1:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_enospc)
    with pytest.raises(WalWriteError, match="No space"):
        wal.append([dml(1, 2, b"lost" * 10)])
    monkeypatch.setattr(os, "write", real_write)
    assert log_bytes(tmp_path) == before
    assert wal.vclock == VClock({1: 1})
    wal.append([dml(1, 2, b"second")])
    wal.close()
    with Wal.open(tmp_path) as reopened:
        assert [r.payload for r in reopened.read_from(VClock())] == [b"kept", b"second"]


def test_failed_fsync_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = Wal.open(tmp_path, mode=WalMode.FSYNC)
    wal.append([dml(1, 1)])
    before = log_bytes(tmp_path)

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(WalWriteError):
        wal.append([dml(1, 2)])
    assert log_bytes(tmp_path) == before and wal.vclock == VClock({1: 1})


def test_failed_rollback_makes_the_wal_refuse_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = Wal.open(tmp_path)

    def failing(*args: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", failing)
    monkeypatch.setattr(os, "ftruncate", failing)
    with pytest.raises(WalWriteError):
        wal.append([dml(1, 1)])
    monkeypatch.undo()
    with pytest.raises(WalWriteError, match="refuses appends"):
        wal.append([dml(1, 1)])
    assert wal.vclock == VClock()


def test_failed_roll_leaves_no_segment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = Wal.open(tmp_path, max_size_bytes=80)
    wal.append([dml(1, 1, b"x" * 40)])
    before = log_bytes(tmp_path)

    def failing_rename(source: object, target: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "rename", failing_rename)
    with pytest.raises(WalWriteError):
        wal.append([dml(1, 2, b"y" * 40)])
    monkeypatch.undo()
    assert log_bytes(tmp_path) == before and wal.vclock == VClock({1: 1})
    wal.append([dml(1, 2, b"y" * 40)])
    assert len(wal.segments()) == 2


def test_txn_ids_follow_appends(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        wal.append([dml(1, 1), dml(2, 1)])
        wal.append([Record(type=RecordType.DDL, origin=1, lsn=2, txn_id=5, payload=b"")])
        assert wal.last_txn_id == {1: 5, 2: 1001}
        assert wal.max_txn_id == 1001


def test_closed_wal_refuses_appends(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        wal.append([])
    with pytest.raises(WalClosed):
        wal.append([dml(1, 1)])
    wal.close()


def test_open_validates_bounds_and_creates_the_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Wal.open(tmp_path, max_size_bytes=0)
    with pytest.raises(ValueError):
        Wal.open(tmp_path, max_record_bytes=31)
    with pytest.raises(ValueError):
        Wal.open(tmp_path, mode="sometimes")  # type: ignore[arg-type]
    with Wal.open(tmp_path / "a" / "wal") as wal:
        assert wal.vclock == VClock() and len(wal.segments()) == 1


def test_the_synced_vclock_ends_the_durable_prefix(tmp_path: Path) -> None:
    write = Wal.open(tmp_path / "w", mode=WalMode.WRITE)
    write.append([dml(1, 1), dml(1, 2)])
    assert write.synced_vclock == VClock() and write.vclock == VClock({1: 2})
    write.sync()
    assert write.synced_vclock == VClock({1: 2})
    write.close()
    fsync = Wal.open(tmp_path / "f", mode=WalMode.FSYNC)
    fsync.append([dml(2, 1)])
    assert fsync.synced_vclock == fsync.vclock == VClock({2: 1})
    fsync.close()
    for mode in WalMode:
        with Wal.open(tmp_path / "w", mode=mode) as again:
            assert again.synced_vclock == (VClock({1: 2}) if mode is WalMode.FSYNC else VClock())


def test_a_sync_fsyncs_the_directory_only_after_a_segment_was_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relays make the writer sync after every group commit: it must cost one fsync."""
    wal = Wal.open(tmp_path, mode="write", max_size_bytes=1000)
    wal.append([dml(1, 1, b"x" * 40)])
    wal.sync()
    fsync_calls = counting(monkeypatch, "fsync")
    wal.append([dml(1, 2, b"x" * 40)])
    wal.sync()
    assert len(fsync_calls) == 1, "the segment only: its name was durable already"
    wal.close()
