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
