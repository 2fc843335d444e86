"""A SQLite commit that fails after the WAL append is fatal, and the WAL keeps the batch
for the restart to replay (docs/design/README.md §4.4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from replicaset.storage import Engine, EngineFatal
from replicaset.storage.checkpoint import vclock_of
from tests.storage.enginekit import EventLog, FakeClock, open_engine, run, select, wal_records

T = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)"
INSERT = "INSERT INTO t VALUES (1, 'one')"


def veto_the_batch_commit(engine: Engine) -> None:
    """Make the open batch's COMMIT fail inside SQLite: a commit hook that vetoes it turns
    the COMMIT into a rollback and the statement into an error, the path a commit that
    cannot write its pages takes too."""
    assert engine.batch is not None
    engine.batch.conn.set_commit_hook(lambda: True)


def open_local_batch(tmp_path: Path, engine: Engine) -> None:
    """A client transaction of our own, committed into the batch, not yet flushed."""
    run(engine, T)
    txn = engine.begin()
    engine.execute(txn, INSERT)
    engine.commit(txn)


def open_apply_batch(tmp_path: Path, engine: Engine) -> None:
    """A peer's rows (its DDL and an insert) applied into the batch, not yet flushed."""
    peer = open_engine(tmp_path / "peer", 2, FakeClock())
    run(peer, T)
    run(peer, INSERT)
    for record in wal_records(peer):
        assert engine.apply(record)


@pytest.mark.parametrize("open_batch", [open_local_batch, open_apply_batch], ids=["local", "apply"])
def test_a_failed_sqlite_commit_after_the_wal_append_is_fatal_and_the_restart_replays_the_batch(
    tmp_path: Path, open_batch: Callable[[Path, Engine], None]
) -> None:
    data_dir = tmp_path / "e1"
    engine = open_engine(data_dir, 1, FakeClock())
    open_batch(tmp_path, engine)
    committed = engine.vclock.copy()
    batch = engine.pending_vclock.copy()
    batch_rows = engine.batch_records
    veto_the_batch_commit(engine)

    with pytest.raises(EngineFatal, match="after the WAL append"):
        engine.flush()
    assert engine.wal.vclock == batch, "the WAL holds the batch"
    assert vclock_of(data_dir / "db.sqlite") == engine.vclock == committed, "SQLite does not"
    engine.close()

    log = EventLog()
    engine = open_engine(data_dir, 1, FakeClock(), log=log)
    assert [event["rows"] for event in log.named("wal_replayed")] == [batch_rows]
    assert engine.vclock == batch
    assert select(engine, "SELECT id, v FROM t") == [[1, "one"]]
