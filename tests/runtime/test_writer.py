"""The single writer: what it makes durable, and when (DESIGN 4.4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from replicaset.runtime.writer import Writer
from replicaset.storage.checkpoint import vclock_of
from tests.pagecache import PageCache
from tests.storage.enginekit import FakeClock, open_engine
from wal import GroupCommitPolicy, VClock, WalMode


def test_a_checkpoint_under_wal_mode_write_is_published_only_once_the_wal_holding_its_rows_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PageCache(monkeypatch)
    engine = open_engine(tmp_path, 1, FakeClock(), wal_mode=WalMode.WRITE)
    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False)

    async def main() -> Path:
        await writer.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        await writer.execute("INSERT INTO t VALUES (1)")
        return Path(await writer.checkpoint())

    checkpoint = trio.run(main)
    engine.close()
    cache.os_crash(tmp_path / "wal")
    engine = open_engine(tmp_path, 1, FakeClock())
    assert engine.wal.vclock == vclock_of(checkpoint) == VClock({1: 2})


@pytest.mark.parametrize("relaying", [True, False], ids=["a relay listens", "no relay"])
def test_under_wal_mode_write_relays_hear_only_of_rows_an_os_crash_cannot_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, relaying: bool
) -> None:
    """FINDINGS F1: a peer must never hold a row its origin can lose, or the origin reuses
    the LSN after an OS crash. Without a relay listening, `write` stays a write(2)."""
    cache = PageCache(monkeypatch)
    engine = open_engine(tmp_path, 1, FakeClock(), wal_mode=WalMode.WRITE)
    told: list[bool] = []

    def ship(records: list) -> None:
        told.append(VClock({r.origin: r.lsn for r in records}) <= engine.wal.synced_vclock)

    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False,
                    ship=ship, relaying=lambda: relaying)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run_flusher)
            await writer.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            await writer.execute("INSERT INTO t VALUES (1)")
            with trio.fail_after(10):
                while relaying and len(told) < 2:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()

    trio.run(main)
    engine.close()
    cache.os_crash(tmp_path / "wal")
    engine = open_engine(tmp_path, 1, FakeClock())
    if relaying:
        assert told == [True, True] and engine.wal.vclock == VClock({1: 2})
    else:
        assert told == [False, False] and engine.wal.vclock == VClock()
