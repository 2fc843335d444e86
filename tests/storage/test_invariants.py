"""Engine.check_invariants (docs/storage.md, "Invariants"): they hold after every step of
every path through the engine, and each assertion fires on the state it guards, so that
none of them can pass vacuously."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from replicaset.storage import BatchKind, Engine, EngineFatal, GapError, SchemaDivergence, SchemaPending, SqlError
from replicaset.storage.batch import Batches
from tests.storage.enginekit import START_MS, FakeClock, cut_last_records, open_engine, run, select, ship, wal_records
from wal import VClock, WalMode, WalWriteError

T = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)"
NOTES = "CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT)"


def insert(i: int) -> str:
    return f"INSERT INTO t VALUES ({i}, 'v{i}')"


def fail_appends(monkeypatch: pytest.MonkeyPatch, engine: Engine) -> None:
    def disk_full(records: object) -> None:
        raise WalWriteError("append to WAL segment failed: [Errno 28] No space left on device")

    monkeypatch.setattr(engine.wal, "append", disk_full)


def veto_commits(engine: Engine) -> None:
    """The open batch's COMMIT fails inside SQLite, after the WAL append (a fatal flush)."""
    assert engine.batch is not None
    engine.batch.conn.set_commit_hook(lambda: True)


# ------------------------------------------------------------------ they hold


@pytest.mark.parametrize("wal_mode", [WalMode.WRITE, WalMode.FSYNC])
def test_local_writes_hold_them_at_every_step(tmp_path: Path, wal_mode: WalMode) -> None:
    engine = open_engine(tmp_path / "e1", 1, FakeClock(), wal_mode=wal_mode, local_tables={"notes"})
    engine.check_invariants()
    programs = [
        [T],
        [NOTES],
        [insert(1), "INSERT INTO notes(text) VALUES ('mine')"],
        ["INSERT INTO t(v) VALUES ('auto')"],
    ]
    for statements in programs:
        txn = engine.begin(explicit=len(statements) > 1)
        engine.check_invariants()
        for sql in statements:
            engine.execute(txn, sql)
            engine.check_invariants()
        engine.commit(txn)
        engine.check_invariants()
        engine.flush()
        engine.check_invariants()
    # Rows of local tables are logged under origin 0, and the vclock counts them as the WAL does.
    assert engine.vclock.get(0) == 2
    assert engine.vclock == engine.wal.vclock
    engine.wal.sync()
    engine.check_invariants()


def test_a_group_commit_of_several_transactions_holds_them(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e1", 1, FakeClock(), local_tables={"notes"})
    run(engine, T)
    run(engine, NOTES)
    for i in range(1, 4):
        txn = engine.begin()
        engine.execute(txn, insert(i) if i % 2 else f"INSERT INTO notes VALUES ({i}, 'n')")
        engine.commit(txn)
        engine.check_invariants()
    assert engine.pending_vclock != engine.vclock
    engine.flush()
    engine.check_invariants()


def test_rollbacks_and_refused_statements_hold_them(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e1", 1, FakeClock(), max_txn_bytes=200)
    run(engine, T)
    txn = engine.begin(explicit=True)
    engine.execute(txn, insert(1))
    with pytest.raises(SqlError):
        engine.execute(txn, insert(1))  # a duplicate key: the statement alone is undone
    engine.check_invariants()
    engine.rollback(txn)
    engine.check_invariants()

    txn = engine.begin()
    engine.execute(txn, "CREATE TABLE gone(id INTEGER PRIMARY KEY)")
    engine.check_invariants()
    engine.rollback(txn)  # the schema hash goes back with the DDL
    engine.check_invariants()

    txn = engine.begin()
    engine.execute(txn, "INSERT INTO t VALUES (2, ?)", ["x" * 500])
    with pytest.raises(SqlError, match="max_txn_bytes"):
        engine.commit(txn)
    engine.check_invariants()
    with pytest.raises(SqlError, match="every name of the rowid"):
        engine.execute(engine.begin(), "CREATE TABLE nokey(rowid, _rowid_, oid)")
    engine.check_invariants()
    engine.flush()
    engine.check_invariants()
    assert engine.vclock == VClock({1: 1})


def test_applying_rows_holds_them_whatever_each_row_turns_out_to_be(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, T)
    run(e1, insert(1))
    run(e1, insert(2))
    ddl, first, second = wal_records(e1)

    with pytest.raises(GapError):
        e2.apply(first)
    e2.check_invariants()
    for record in (ddl, first):
        assert e2.apply(record)
        e2.check_invariants()
    assert e2.apply(first) is False  # a copy held already
    e2.check_invariants()
    assert e2.skip(second)
    e2.check_invariants()
    e2.flush()
    e2.check_invariants()
    assert e2.vclock == e1.vclock

    # A row of member 2 written against member 1's schema reaches member 3 before that schema.
    e3 = open_engine(tmp_path / "e3", 3, clock)
    [row] = run(e2, insert(3)).records
    with pytest.raises(SchemaPending):
        e3.apply(row)
    e3.check_invariants()
    # A DDL row written against a schema member 3 does not have.
    run(e3, "CREATE TABLE other(id INTEGER PRIMARY KEY)")
    with pytest.raises(SchemaDivergence):
        e3.apply(ddl)
    e3.check_invariants()
    e3.flush()
    e3.check_invariants()


def test_a_peer_ddl_row_holds_them_while_its_batch_is_open(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, T)
    [ddl] = wal_records(e1)
    assert e2.apply(ddl)
    e2.check_invariants()  # the apply connection sees the new schema, the writer not yet
    e2.flush()
    e2.check_invariants()
    run(e2, "INSERT INTO t(v) VALUES ('auto')")  # the auto-id triggers were built again
    e2.check_invariants()


@pytest.mark.parametrize("kind", ["local", "local ddl", "apply"])
def test_a_failed_wal_append_holds_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    clock = FakeClock()
    engine = open_engine(tmp_path / "e1", 1, clock)
    peer = open_engine(tmp_path / "e2", 2, clock)
    run(engine, T)
    ship(engine, peer)
    run(peer, insert(1))
    fail_appends(monkeypatch, engine)
    if kind == "apply":
        assert engine.apply(wal_records(peer)[-1])
    else:
        txn = engine.begin()
        engine.execute(txn, insert(2) if kind == "local" else "CREATE TABLE u(id INTEGER PRIMARY KEY)")
        engine.commit(txn)
    engine.check_invariants()
    with pytest.raises(WalWriteError):
        engine.flush()
    engine.check_invariants()
    monkeypatch.undo()
    run(engine, insert(3))
    engine.check_invariants()


@pytest.mark.parametrize("kind", ["local", "apply"])
def test_a_fatal_flush_leaves_the_state_they_describe(tmp_path: Path, kind: str) -> None:
    clock = FakeClock()
    engine = open_engine(tmp_path / "e1", 1, clock)
    peer = open_engine(tmp_path / "e2", 2, clock)
    run(peer, T)
    if kind == "apply":
        [ddl] = wal_records(peer)
        assert engine.apply(ddl)
    else:
        run(engine, T)
        txn = engine.begin()
        engine.execute(txn, insert(1))
        engine.commit(txn)
    committed = engine.vclock.copy()
    veto_commits(engine)
    with pytest.raises(EngineFatal):
        engine.flush()
    engine.check_invariants()
    assert engine.vclock == committed
    assert engine.pending_vclock == engine.wal.vclock != committed


def test_checkpoints_hold_them(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e1", 1, FakeClock())
    run(engine, T)
    engine.checkpoint()
    engine.check_invariants()
    txn = engine.begin()
    engine.execute(txn, insert(1))
    engine.commit(txn)
    engine.checkpoint()  # made on a reader while a batch is open: it holds none of it
    engine.check_invariants()
    engine.flush()
    engine.check_invariants()


def test_every_way_of_opening_holds_them(tmp_path: Path) -> None:
    clock = FakeClock()
    data_dir = tmp_path / "e1"
    engine = open_engine(data_dir, 1, clock)
    engine.check_invariants()
    run(engine, T)
    engine.checkpoint()
    run(engine, insert(1))
    # The WAL holds a batch that SQLite never committed: the reopen replays it in batches
    # that are not logged again.
    txn = engine.begin()
    engine.execute(txn, insert(2))
    engine.wal.append(list(engine.commit(txn).records))
    engine.close()
    engine = open_engine(data_dir, 1, clock)
    engine.check_invariants()
    assert select(engine, "SELECT id FROM t") == [[1], [2]]
    records = wal_records(engine)
    engine.close()

    # SQLite ahead of the WAL (its last record was lost): the reopen rebuilds from the checkpoint.
    cut_last_records(data_dir, records, 1)
    engine = open_engine(data_dir, 1, FakeClock(start_ms=START_MS + 1_000))
    engine.check_invariants()
    assert engine.vclock == VClock({1: 2})


def test_the_start_up_fetch_of_our_own_rows_holds_them(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, T)
    ship(e1, e2)
    e1.close()
    e1 = open_engine(tmp_path / "e1b", 1, clock)
    for record in wal_records(e2):
        assert e1.apply(record, own_allowed=True)
        e1.check_invariants()
    e1.flush()
    e1.check_invariants()


# ------------------------------------------------------------------ each one fires


def idle(tmp_path: Path) -> Engine:
    """An engine with rows of its own, a local row and no open batch."""
    engine = open_engine(tmp_path / "e1", 1, FakeClock(), local_tables={"notes"})
    run(engine, T)
    run(engine, NOTES)
    run(engine, insert(1), "INSERT INTO notes VALUES (1, 'n')")
    return engine


def local_batch(tmp_path: Path) -> Engine:
    """An engine with one committed transaction queued in an open local batch."""
    engine = idle(tmp_path)
    txn = engine.begin()
    engine.execute(txn, insert(2))
    engine.commit(txn)
    return engine


def after_fatal_flush(tmp_path: Path) -> Engine:
    engine = local_batch(tmp_path)
    veto_commits(engine)
    with pytest.raises(EngineFatal):
        engine.flush()
    return engine


def wal_synced_beyond_its_end(engine: Engine) -> None:
    # No public way moves the durable prefix past the end: reach into the WAL.
    ahead = engine.wal.vclock
    ahead.follow(1, ahead.get(1) + 1)
    engine.wal._synced_vclock = ahead  # type: ignore[attr-defined]


def pending_behind_vclock(engine: Engine) -> None:
    engine.pending_vclock.reset(1, engine.vclock.get(1) - 1)


def both_clocks_behind_the_wal(engine: Engine) -> None:
    lsn = engine.vclock.get(0) - 1
    engine.vclock.reset(0, lsn)
    engine.pending_vclock.reset(0, lsn)


def pending_ahead_with_no_batch(engine: Engine) -> None:
    engine.pending_vclock.follow(1, engine.vclock.get(1) + 1)


def transaction_left_open(engine: Engine) -> None:
    engine.connections.writer.execute("BEGIN")


def batch_transaction_ended(engine: Engine) -> None:
    assert engine.batch is not None
    engine.batch.conn.execute("ROLLBACK")


def batch_of_the_wrong_kind(engine: Engine) -> None:
    assert engine.batch is not None
    engine.batch.kind = BatchKind.APPLY


def hole_in_the_batch(engine: Engine) -> None:
    assert engine.batch is not None
    record = engine.batch.records[0]
    engine.batch.records[0] = replace(record, lsn=record.lsn + 1)


def pending_beyond_the_batch(engine: Engine) -> None:
    engine.pending_vclock.follow(0, engine.pending_vclock.get(0) + 1)


def batch_opened_after_fatal(engine: Engine) -> None:
    engine.begin()


def pending_moved_after_fatal(engine: Engine) -> None:
    engine.pending_vclock.reset(1, engine.vclock.get(1))


def sqlite_vclock_changed_behind_the_engine(engine: Engine) -> None:
    engine.connections.writer.execute("UPDATE _rs_vclock SET lsn = lsn + 1 WHERE origin = 1")


def schema_changed_behind_the_engine(engine: Engine) -> None:
    engine.connections.writer.execute("CREATE TABLE sneaky(id INTEGER PRIMARY KEY)")


CORRUPTIONS: list[tuple[Callable[[Path], Engine], Callable[[Engine], None], str]] = [
    (idle, wal_synced_beyond_its_end, "durable prefix lies within the WAL"),
    (idle, pending_behind_vclock, "pending vclock counts every committed row"),
    (idle, both_clocks_behind_the_wal, "exactly the rows the WAL holds, origin 0 included"),
    (local_batch, both_clocks_behind_the_wal, "exactly the rows the WAL holds, origin 0 included"),
    (idle, pending_ahead_with_no_batch, "with no open batch, nothing is pending"),
    (idle, transaction_left_open, "open batch's connection only"),
    (local_batch, batch_transaction_ended, "open batch's connection only"),
    (local_batch, batch_of_the_wrong_kind, "connection of its kind"),
    (local_batch, hole_in_the_batch, "continues the committed vclock with no hole"),
    (local_batch, pending_beyond_the_batch, "committed one plus the open batch"),
    (after_fatal_flush, batch_opened_after_fatal, "nothing may open a batch after a fatal flush"),
    (after_fatal_flush, pending_moved_after_fatal, "after a fatal flush the pending vclock is the WAL's"),
    (idle, sqlite_vclock_changed_behind_the_engine, "the one SQLite committed with the rows"),
    (idle, schema_changed_behind_the_engine, "schema hash is that of the schema in force"),
]


@pytest.mark.parametrize(
    ("make", "corrupt", "message"),
    CORRUPTIONS,
    ids=[f"{make.__name__}-{corrupt.__name__}" for make, corrupt, _ in CORRUPTIONS],
)
def test_each_invariant_fires_on_the_state_it_guards(
    tmp_path: Path, make: Callable[[Path], Engine], corrupt: Callable[[Engine], None], message: str
) -> None:
    engine = make(tmp_path)
    engine.check_invariants()
    corrupt(engine)
    with pytest.raises(AssertionError, match=message):
        engine.check_invariants()


def test_every_assertion_has_a_state_that_fires_it() -> None:
    sources = inspect.getsource(Batches.check_invariants) + inspect.getsource(Engine.check_invariants)
    messages = re.findall(r'assert .*, "([^"]+)"$', sources, re.MULTILINE)
    assert len(messages) == 12
    for text in messages:
        assert any(fragment in text for _, _, fragment in CORRUPTIONS), f"nothing makes {text!r} fire"
