"""How the writer flushes: concurrent transactions share WAL appends within the group-commit
bounds, each client is answered only once its rows are in the WAL, and a failed SQLite
commit stops the writer instead of answering anyone (docs/design/README.md §4.4)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trio
import trio.testing

from replicaset.runtime.writer import Writer
from replicaset.storage import Engine, EngineFatal
from tests.storage.enginekit import FakeClock, changes, open_engine
from wal import GroupCommitPolicy, Record, RecordType

CLIENTS = 16
CREATE = "CREATE TABLE t(id INTEGER PRIMARY KEY)"
INSERT = "INSERT INTO t VALUES (?)"
UNBOUNDED_BYTES = 1 << 20
HANG_S = 60  # virtual seconds: a writer that never answers fails the run at once


@dataclass
class Appends:
    """Every `Wal.append` call of one engine, in order, with the ids its rows inserted."""

    batches: list[list[Record]] = field(default_factory=list)

    @classmethod
    def recording(cls, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Appends:
        appends = cls()
        real_append = engine.wal.append

        def append(records: list[Record]) -> None:
            real_append(records)
            appends.batches.append(list(records))

        monkeypatch.setattr(engine.wal, "append", append)
        return appends

    @property
    def sizes(self) -> list[int]:
        return [len(batch) for batch in self.batches]

    def ids(self) -> set[int]:
        return {
            new["id"]
            for batch in self.batches
            for record in batch
            if record.type == RecordType.DML
            for _table, _op, _key, _old, new in changes(record)
            if new is not None
        }


def run_clients(writer: Writer, client: Callable[[int], Awaitable[None]]) -> None:
    """Beside the flusher, create the table, then start every client at once; stop the
    flusher once the clients are done. A writer that never answers fails the run.

    Virtual time: a group-commit delay passes as soon as every task waits, and so does the
    hang guard. With `fsync=False` the writer runs no thread, so the clock never jumps while
    work is still under way."""

    async def main() -> None:
        with trio.fail_after(HANG_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(writer.run_flusher)
                await writer.execute(CREATE)
                async with trio.open_nursery() as clients:
                    for i in range(CLIENTS):
                        clients.start_soon(client, i)
                nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.parametrize(
    ("rows_max", "bytes_max", "delay_ms", "expected"),
    [
        # The last waiter (or the flusher) flushes what the others left in the batch.
        pytest.param(1024, UNBOUNDED_BYTES, 0, lambda sizes: len(sizes) < CLIENTS, id="shared"),
        pytest.param(4, UNBOUNDED_BYTES, 0, lambda sizes: len(sizes) < CLIENTS and max(sizes) <= 4, id="rows_max"),
        # Every transaction reaches a one-byte bound by itself: no sharing.
        pytest.param(1024, 1, 0, lambda sizes: sizes == [1] * CLIENTS, id="bytes_max"),
        # Nobody flushes at commit while a delay is set: the flusher takes all, once.
        pytest.param(1024, UNBOUNDED_BYTES, 5, lambda sizes: sizes == [CLIENTS], id="delay_ms"),
    ],
)
def test_concurrent_transactions_share_wal_appends_and_are_answered_once_in_the_wal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rows_max: int,
    bytes_max: int,
    delay_ms: int,
    expected: Callable[[list[int]], bool],
) -> None:
    engine = open_engine(tmp_path, 1, FakeClock())
    writer = Writer(engine, group_commit=GroupCommitPolicy(bytes_max, rows_max, delay_ms), fsync=False)
    appends = Appends.recording(engine, monkeypatch)
    in_wal_when_answered: dict[int, bool] = {}

    async def client(i: int) -> None:
        await writer.execute(INSERT, [i])
        in_wal_when_answered[i] = i in appends.ids()

    run_clients(writer, client)
    assert in_wal_when_answered == {i: True for i in range(CLIENTS)}
    sizes = appends.sizes[1:]  # after the CREATE TABLE's own append
    assert sum(sizes) == CLIENTS
    assert expected(sizes), sizes


def test_a_failed_sqlite_commit_stops_the_writer_and_answers_no_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine(tmp_path, 1, FakeClock())
    writer = Writer(engine, group_commit=GroupCommitPolicy(UNBOUNDED_BYTES, 1024, 0), fsync=False)
    appends = Appends.recording(engine, monkeypatch)
    outcomes: dict[int, str] = {}

    async def client(i: int) -> None:
        # Once any client started, every COMMIT of the writer's connection fails inside
        # SQLite: the hook vetoes it, SQLite rolls back and the statement raises.
        engine.connections.writer.set_commit_hook(lambda: True)
        try:
            await writer.execute(INSERT, [i])
        except EngineFatal:
            outcomes[i] = "fatal"
            raise
        outcomes[i] = "answered"

    with pytest.raises(BaseExceptionGroup) as stopped:
        run_clients(writer, client)
    _, others = stopped.value.split(EngineFatal)
    assert others is None, "the writer raises nothing but EngineFatal"
    assert isinstance(writer.fatal, EngineFatal)
    assert outcomes and set(outcomes.values()) == {"fatal"}, "no client is told its write succeeded"
    assert set(outcomes) <= appends.ids(), "the WAL holds every failed row: a restart replays it"
