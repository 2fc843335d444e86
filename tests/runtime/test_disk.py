"""The full-disk guard's states on a fake file system: FULL below the low-water mark with
the reserve released and one line logged, back once there is room for the reserve and
its margin, with no flapping between the two marks."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.disk import RESERVE_FILE, DiskFull, DiskGuard

RESERVE_BYTES, LOW_WATER_BYTES = 4096, 1024


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def error(self, event: str, **fields: object) -> None:
        self.lines.append(("error", event))

    def info(self, event: str, **fields: object) -> None:
        self.lines.append(("info", event))


def _guard(tmp_path: Path, free: list[int]) -> tuple[DiskGuard, _Log]:
    log = _Log()
    guard = DiskGuard(tmp_path, log, reserve_bytes=RESERVE_BYTES, low_water_bytes=LOW_WATER_BYTES,
                      free_bytes=lambda path: free[0])
    return guard, log


def test_full_below_the_low_water_mark_and_back_only_with_room_for_the_reserve(tmp_path: Path) -> None:
    free = [100_000]
    guard, log = _guard(tmp_path, free)
    guard.open()
    reserve = tmp_path / RESERVE_FILE
    assert reserve.stat().st_size == RESERVE_BYTES and not guard.full
    free[0] = LOW_WATER_BYTES - 1
    with pytest.raises(DiskFull) as refused:
        guard.check("WAL write")
    assert refused.value.code == ErrorCode.WAL_IO and "no space left on device: WAL write refused" in str(refused.value)
    assert not reserve.exists(), "the reserve's room goes to the work under way"
    for free[0] in (LOW_WATER_BYTES, RESERVE_BYTES, RESERVE_BYTES + LOW_WATER_BYTES - 1):
        assert guard.poll(), "between the marks it stays full"
    free[0] = RESERVE_BYTES + LOW_WATER_BYTES
    assert not guard.poll() and reserve.exists()
    guard.check("WAL write")
    assert log.lines == [("error", "disk_full"), ("info", "disk_space_back")], "one line per change, not per poll"


def test_at_start_a_reserve_found_is_room_to_start_full_in_and_none_with_no_room_refuses(tmp_path: Path) -> None:
    free = [0]
    (tmp_path / RESERVE_FILE).write_bytes(b"\0" * RESERVE_BYTES)
    guard, log = _guard(tmp_path, free)
    guard.open()
    assert guard.full and not (tmp_path / RESERVE_FILE).exists() and log.lines == [("error", "disk_full")]
    with pytest.raises(DiskFull, match="cannot start, 0 bytes free"):
        _guard(tmp_path, free)[0].open()
    free[0] = LOW_WATER_BYTES  # enough to open the stores, not to make a reserve: started, FULL
    fresh, fresh_log = _guard(tmp_path, free)
    fresh.open()
    assert fresh.full and not (tmp_path / RESERVE_FILE).exists() and fresh_log.lines == [("error", "disk_full")]
    free[0] = RESERVE_BYTES + LOW_WATER_BYTES
    assert not fresh.poll() and (tmp_path / RESERVE_FILE).exists()


def test_an_append_too_big_for_the_room_left_is_refused_alone(tmp_path: Path) -> None:
    free = [LOW_WATER_BYTES + 10_000]
    guard, log = _guard(tmp_path, free)
    guard.open()
    guard.check("WAL write", 2_000)
    with pytest.raises(DiskFull, match="WAL write of 5000 bytes refused"):
        guard.check("WAL write", 5_000)
    assert not guard.full and log.lines == [], "the member is not full: smaller writes go on"


def test_a_check_reads_the_free_space_once(tmp_path: Path) -> None:
    """Every WAL append is checked: one statvfs answers both whether the member is full
    and whether this append fits (it took two, a measurable share of a write's cost)."""
    readings: list[Path] = []
    guard = DiskGuard(tmp_path, _Log(), reserve_bytes=RESERVE_BYTES, low_water_bytes=LOW_WATER_BYTES,
                      free_bytes=lambda path: readings.append(path) or 100_000)
    guard.open()
    readings.clear()
    guard.check("WAL write", 2_000)
    assert len(readings) == 1
