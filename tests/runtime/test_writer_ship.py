"""What the writer hands the relays: every flushed row, once, in log order, whatever mix
of local writes and applied rows made the batches (a flush the writer did not see once
left a member's rows unrelayed), and what an applier learns when its flush fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from replicaset.runtime.writer import WriteFailed, Writer
from replicaset.storage import BatchKindError
from tests.storage.enginekit import FakeClock, open_engine, run, wal_records
from wal import GroupCommitPolicy, Record

# No group-commit flush of its own: a local batch stays open until something flushes it.
HOLD_OPEN = GroupCommitPolicy(max_batch_bytes=1 << 20, max_batch_count=1 << 20, max_delay_ms=60_000)


def _member_one(tmp_path: Path, **config) -> tuple:
    engine = open_engine(tmp_path / "m1", 1, FakeClock(), **config)
    run(engine, "CREATE TABLE t(id INTEGER PRIMARY KEY)")
    schema = wal_records(engine)
    shipped: list[list[Record] | None] = []
    writer = Writer(engine, group_commit=HOLD_OPEN, fsync=False, on_flush=shipped.append)
    return engine, writer, shipped, schema


def _rows_of_member_two(tmp_path: Path, schema: list[Record]) -> list[Record]:
    """One row of origin 2 over member 1's schema, as its relay would send it."""
    other = open_engine(tmp_path / "m2", 2, FakeClock())
    for record in schema:
        other.apply(record)
    other.flush()
    run(other, "INSERT INTO t(id) VALUES (1000)")
    return [r for r in wal_records(other) if r.origin == 2]


def test_local_rows_still_open_when_applied_rows_come_are_shipped_before_them(tmp_path: Path) -> None:
    engine, writer, shipped, schema = _member_one(tmp_path)
    theirs = _rows_of_member_two(tmp_path, schema)

    async def main() -> None:
        _, ticket = await writer.execute_nowait("INSERT INTO t(id) VALUES (1)", ())
        assert not ticket.settled, "held open by the group-commit delay"
        assert await writer.apply(theirs) == 1
        assert ticket.settled

    trio.run(main)
    flat = [(r.origin, r.lsn) for batch in shipped for r in batch]
    assert flat == [(1, 2), (2, 1)], "member 1's row was flushed and shipped before the applied one"
    assert [(r.origin, r.lsn) for r in wal_records(engine)] == [(1, 1), (1, 2), (2, 1)]


def test_a_copy_of_a_committed_row_is_dropped_without_flushing_the_open_batch(tmp_path: Path) -> None:
    """A quorum row comes by its COMMIT and again by each relay: once SQLite holds it, a
    copy changes nothing, and must not flush the local batch a group commit is holding
    open (it did, for every copy, which split the group commits of a busy member). A copy
    of a row that is only pending in the open batch still goes to the writer: that batch
    may yet be rolled back, and then the copy is what brings the row."""
    engine, writer, shipped, schema = _member_one(tmp_path)
    theirs = _rows_of_member_two(tmp_path, schema)

    async def main() -> None:
        assert await writer.apply(theirs) == 1
        _, ticket = await writer.execute_nowait("INSERT INTO t(id) VALUES (1)", ())
        assert await writer.apply(theirs) == 0
        assert not ticket.settled, "the copy left the local batch open"
        assert engine.batch_records == 1
        async with writer.token:
            await writer._flush_now()
        assert ticket.settled and ticket.error is None

    trio.run(main)
    assert [(r.origin, r.lsn) for r in wal_records(engine)] == [(1, 1), (2, 1), (1, 2)]


def test_the_engine_refuses_to_switch_batch_kinds_behind_the_writers_back(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "m1", 1, FakeClock())
    run(engine, "CREATE TABLE t(id INTEGER PRIMARY KEY)")
    other = open_engine(tmp_path / "m2", 2, FakeClock())
    other.apply(wal_records(engine)[0])
    other.flush()
    run(other, "INSERT INTO t(id) VALUES (7)")
    txn = engine.begin()
    engine.execute(txn, "INSERT INTO t(id) VALUES (1)")
    engine.commit(txn)
    with pytest.raises(BatchKindError, match="local batch is open"):
        engine.apply(wal_records(other)[-1])
    assert engine.batch_records == 1, "the local batch is still open: nothing was flushed on the side"


def test_an_applier_learns_that_the_flush_of_its_rows_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, writer, _, schema = _member_one(tmp_path)
    theirs = _rows_of_member_two(tmp_path, schema)

    def full_disk(records: list[Record]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(engine.wal, "append", full_disk)
    with pytest.raises(WriteFailed, match="No space left"):
        trio.run(writer.apply, theirs)
    assert engine.pending_vclock.get(2) == 0, "back at the durable vclock: the rows will come again"


def test_rows_applied_while_another_task_waits_for_the_writer_share_its_flush(tmp_path: Path) -> None:
    """Two tasks apply a row each (two COMMITs, or a COMMIT and an applier's frame): the
    first sees the second waiting for the writer and leaves the flush to it, so both rows
    reach the WAL and SQLite in one group commit, not one each (a participant flushed once
    per COMMIT, which cost it a WAL write and a SQLite commit per transaction)."""
    engine, writer, shipped, schema = _member_one(tmp_path)
    other = open_engine(tmp_path / "m2", 2, FakeClock())
    for record in schema:
        other.apply(record)
    other.flush()
    run(other, "INSERT INTO t(id) VALUES (1000)")
    run(other, "INSERT INTO t(id) VALUES (1001)")
    first, second = [r for r in wal_records(other) if r.origin == 2]
    applied: list[int] = []

    async def apply(record: Record) -> None:
        applied.append(await writer.apply([record]))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            async with writer.token:  # both queue for the writer, in this order
                nursery.start_soon(apply, first)
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(apply, second)
                await trio.testing.wait_all_tasks_blocked()

    trio.run(main)
    assert applied == [1, 1]
    assert [[(r.origin, r.lsn) for r in batch] for batch in shipped] == [[(2, first.lsn), (2, second.lsn)]]
    assert engine.vclock.get(2) == second.lsn
