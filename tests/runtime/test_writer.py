"""The single writer: what it makes durable, and when (docs/design/README.md §4.4)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.writer import CascadeRollback, Writer
from replicaset.storage import BatchAbandoned, SqlError
from replicaset.storage.checkpoint import vclock_of
from replicaset.testing.pagecache import PageCache
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


@pytest.mark.parametrize("asked", [True, False], ids=["a relay asks for a sync", "nobody asks"])
def test_under_wal_mode_write_a_sync_is_made_when_a_relay_asks_and_only_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, asked: bool
) -> None:
    """FINDINGS F1: a relay withholds our rows until they are durable and asks for the sync;
    the writer makes it and says how far the WAL is durable. Without a relay asking,
    `write` stays a write(2)."""
    cache = PageCache(monkeypatch)
    engine = open_engine(tmp_path, 1, FakeClock(), wal_mode=WalMode.WRITE)
    synced: list[VClock] = []
    synced_once = trio.Event()

    def on_synced(advanced: bool) -> None:
        assert advanced, "the rows were only written"
        synced.append(engine.wal.synced_vclock)
        synced_once.set()

    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False, on_synced=on_synced)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run_flusher)
            await writer.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            await writer.execute("INSERT INTO t VALUES (1)")
            if asked:
                writer.request_sync()
                writer.request_sync()  # one fsync for the requests made meanwhile
                # Real time: the fsync runs in a worker thread, and a MockClock would jump to this deadline meanwhile.
                with trio.fail_after(10):
                    await synced_once.wait()
                    await trio.testing.wait_all_tasks_blocked()  # a second sync would have begun by now
            nursery.cancel_scope.cancel()

    trio.run(main)
    engine.close()
    cache.os_crash(tmp_path / "wal")
    engine = open_engine(tmp_path, 1, FakeClock())
    if asked:
        assert synced == [VClock({1: 2})] and engine.wal.vclock == VClock({1: 2})
    else:
        assert synced == [] and engine.wal.vclock == VClock()


def test_a_write_stopped_at_the_time_limit_fails_the_transactions_of_its_group_commit(tmp_path: Path) -> None:
    """SQLite rolls back the whole batch of an interrupted write: the transactions queued
    in it were not durable, so they fail (ER_CASCADE_ROLLBACK, run them again) rather than
    being acknowledged; the writer then goes on."""
    engine = open_engine(tmp_path, 1, FakeClock(), statement_timeout_s=0.2)
    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 60_000), fsync=False)  # nothing flushes on its own
    endless = ("INSERT INTO t(id) WITH RECURSIVE r(x) AS (SELECT 10 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r")

    async def main() -> None:
        await writer.execute_trusted("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        _, queued = await writer.execute_nowait("INSERT INTO t VALUES (1)", ())
        assert not queued.settled, "the first transaction waits in the open batch"
        with pytest.raises(BatchAbandoned):
            await writer.execute_nowait(endless, ())
        with pytest.raises(CascadeRollback, match="run it again") as failed, trio.fail_after(5):
            await queued.wait()
        assert failed.value.code == ErrorCode.CASCADE_ROLLBACK
        await writer.execute_trusted("INSERT INTO t VALUES (2)")

    trio.run(main)
    assert engine.query("SELECT id FROM t").rows == [[2]]
    engine.check_invariants()


def test_a_write_decided_alone_is_settled_only_once_fsynced_under_wal_mode_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set of one answers a QUORUM write as the quorum would, durable (core.quorum.
    decides_alone); asked no, the statement is captured for the quorum and nothing is
    written here."""
    cache = PageCache(monkeypatch)
    engine = open_engine(tmp_path, 1, FakeClock(), wal_mode=WalMode.WRITE)
    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run_flusher)
            await writer.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            _, ticket = await writer.execute_quorum("INSERT INTO t VALUES (1)", (), alone=lambda: True)
            with trio.fail_after(10):  # real time: the fsync runs in a worker thread
                await ticket.wait()
            assert engine.wal.synced_vclock == VClock({1: 2})
            _, captured = await writer.execute_quorum("INSERT INTO t VALUES (2)", (), alone=lambda: False)
            assert [row.key for row in captured.rows] == ["t:2"]
            nursery.cancel_scope.cancel()

    trio.run(main)
    engine.close()
    cache.os_crash(tmp_path / "wal")
    engine = open_engine(tmp_path, 1, FakeClock())
    assert engine.wal.vclock == VClock({1: 2})
    assert engine.query("SELECT id FROM t").rows == [[1]]


def test_a_local_table_is_refused_to_a_quorum_write_decided_alone_as_to_any_quorum_write(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, 1, FakeClock(), local_tables={"scratch"})
    writer = Writer(engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=True)

    async def main() -> None:
        await writer.execute("CREATE TABLE scratch(v)")
        with pytest.raises(SqlError, match="local to each member"):
            await writer.execute_quorum("INSERT INTO scratch VALUES (1)", (), alone=lambda: True)

    trio.run(main)
    assert engine.query("SELECT count(*) FROM scratch").rows == [[0]]
