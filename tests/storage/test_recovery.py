"""Durability and recovery: the state is the newest checkpoint plus the WAL (docs/design/README.md §4.4)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from replicaset.storage import EngineFatal
from replicaset.storage.checkpoint import vclock_of
from replicaset.testing.pagecache import PageCache
from tests.storage.enginekit import (
    START_MS,
    EventLog,
    FakeClock,
    cut_last_records,
    open_engine,
    run,
    select,
    ship,
    versions,
    wal_records,
)
from wal import VClock, Wal, WalMode, WalWriteError

T = "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)"


def insert(i: int) -> str:
    return f"INSERT INTO t VALUES ({i}, 'v{i}')"


def twin_digest(tmp_path: Path, statements: list[str]) -> dict[str, int]:
    """The digest of an engine that ran `statements` cleanly with the same clock readings."""
    twin = open_engine(tmp_path / "twin", 1, FakeClock())
    for sql in statements:
        run(twin, sql)
    digest = twin.table_digest()
    twin.close()
    return digest


# ------------------------------------------------------------------ clean restart


def test_reopen_keeps_vclock_contents_versions_and_schema(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock, local_tables={"scratch"})
    run(e1, T)
    run(e1, "CREATE TABLE scratch(note)")
    run(e1, insert(1), insert(2), "INSERT INTO scratch VALUES ('local')")
    run(e1, "UPDATE t SET v = 'changed' WHERE id = 1", "DELETE FROM t WHERE id = 2")
    before = (e1.vclock.copy(), e1.table_digest(), select(e1, "SELECT * FROM t"), versions(e1, "t"), e1.schema_id)
    e1.close()
    e1 = open_engine(tmp_path / "e1", 1, clock, local_tables={"scratch"})
    after = (e1.vclock.copy(), e1.table_digest(), select(e1, "SELECT * FROM t"), versions(e1, "t"), e1.schema_id)
    assert after == before
    assert e1.vclock == VClock({0: 2, 1: 3})
    assert select(e1, "SELECT * FROM scratch") == [["local"]]
    assert e1.pending_vclock == e1.vclock
    [record] = run(e1, insert(3)).records
    assert (record.origin, record.lsn) == (1, 4)


def test_after_reopen_with_a_clock_that_went_back_new_stamps_are_above_every_old_one(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(step_ms=0))  # many stamps in one millisecond
    run(e1, T)
    for i in range(5):
        run(e1, insert(i))
    used = max(r.txn_id for r in wal_records(e1))
    e1.close()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(start_ms=START_MS - 3_600_000))
    [record] = run(e1, "UPDATE t SET v = 'later' WHERE id = 0").records
    assert record.txn_id > used
    assert versions(e1, "t")["t:0"][0] == record.txn_id


def test_after_reopen_a_local_write_wins_over_the_peer_row_it_overwrites(tmp_path: Path) -> None:
    shared = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, shared)
    e2 = open_engine(tmp_path / "e2", 2, shared)
    run(e1, T)
    ship(e1, e2)
    peer_record = run(e2, insert(1)).records[0]  # the newest stamp e1 will hold
    ship(e2, e1)
    e1.close()
    ms_of_peer_row = peer_record.txn_id >> 22
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(start_ms=ms_of_peer_row, step_ms=0))
    [record] = run(e1, "UPDATE t SET v = 'after restart' WHERE id = 1").records
    assert record.txn_id > peer_record.txn_id
    ship(e1, e2)
    assert select(e2, "SELECT v FROM t") == [["after restart"]]


def test_reopen_keeps_issuing_unique_auto_ids(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    run(e1, T)
    txn = e1.begin()
    first = e1.execute(txn, "INSERT INTO t(v) VALUES ('a'), ('b')").autoincrement_ids
    e1.commit(txn)
    e1.flush()
    e1.close()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    txn = e1.begin()
    second = e1.execute(txn, "INSERT INTO t(v) VALUES ('c')").autoincrement_ids
    e1.commit(txn)
    e1.flush()
    assert len(second) == 1 and second[0] > max(first)
    assert len(select(e1, "SELECT id FROM t")) == 3


# ------------------------------------------------------------------ WAL ahead of SQLite


def test_rows_in_the_wal_whose_sqlite_commit_never_happened_are_replayed(tmp_path: Path) -> None:
    statements = [T, insert(1), insert(2), insert(3)]
    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log)
    run(e1, T)
    run(e1, insert(1))
    # a group commit of two transactions: the WAL append happens, the SQLite commit does not
    committed = []
    for sql in statements[2:]:
        txn = e1.begin()
        e1.execute(txn, sql)
        committed.extend(e1.commit(txn).records)
    e1.wal.append(committed)
    e1.close()  # the process dies: SQLite rolls the open transaction back

    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(start_ms=START_MS + 1_000), log=log)
    assert select(e1, "SELECT id FROM t") == [[1], [2], [3]]
    assert e1.vclock == VClock({1: 4})
    assert [f["rows"] for f in log.named("wal_replayed")] == [2]
    assert e1.table_digest() == twin_digest(tmp_path, statements)
    [record] = run(e1, insert(4)).records
    assert record.lsn == 5


def test_applied_peer_rows_in_the_wal_are_replayed(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, T)
    ship(e1, e2)
    rows = [run(e1, insert(i)).records[0] for i in (1, 2)]
    for record in rows:
        assert e2.apply(record)
    e2.wal.append(rows)  # the apply batch reached the WAL; SQLite never committed it
    e2.close()
    e2 = open_engine(tmp_path / "e2", 2, clock)
    assert e2.vclock == VClock({1: 3})
    assert e2.table_digest() == e1.table_digest()
    assert e2.apply(rows[0]) is False


def test_a_failed_wal_append_rolls_the_batch_back_and_the_lsn_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e1, T)
    run(e1, insert(1))
    before = (e1.table_digest(), e1.vclock.copy())

    def disk_full(records: object) -> None:
        raise WalWriteError("append to WAL segment failed: [Errno 28] No space left on device")

    monkeypatch.setattr(e1.wal, "append", disk_full)
    txn = e1.begin()
    e1.execute(txn, insert(2))
    assert e1.commit(txn).records[0].lsn == 3
    with pytest.raises(WalWriteError):
        e1.flush()
    assert (e1.table_digest(), e1.vclock) == before
    assert e1.pending_vclock == e1.vclock
    assert select(e1, "SELECT id FROM t") == [[1]]
    monkeypatch.undo()
    [record] = run(e1, insert(3)).records
    assert record.lsn == 3  # the failed transaction never consumed its LSN
    assert [r.lsn for r in wal_records(e1)] == [1, 2, 3]
    assert select(e1, "SELECT id FROM t") == [[1], [3]]


# ------------------------------------------------------------------ SQLite ahead of the WAL


def test_sqlite_ahead_of_the_wal_rebuilds_from_the_checkpoint_and_the_wal(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e1, T)
    run(e1, insert(1))
    run(e1, insert(2))
    checkpoint = e1.checkpoint()
    run(e1, insert(3))
    run(e1, insert(4))
    records = wal_records(e1)
    e1.close()
    cut_last_records(tmp_path / "e1", records, 1)

    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(start_ms=START_MS + 1_000), log=log)
    assert log.named("sqlite_ahead_of_wal") == [
        {"sqlite_vclock": {1: 5}, "wal_vclock": {1: 4}, "dropped": {1: 1}}
    ]
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [str(checkpoint)]
    assert select(e1, "SELECT id FROM t") == [[1], [2], [3]]
    assert e1.vclock == VClock({1: 4})
    assert e1.table_digest() == twin_digest(tmp_path, [T, insert(1), insert(2), insert(3)])
    [record] = run(e1, insert(5)).records
    assert record.lsn == 5


def stale_copy(db: Path) -> dict[str, bytes]:
    """The database's files as they are now (SQLite's own WAL included)."""
    return {suffix: Path(str(db) + suffix).read_bytes() for suffix in ("", "-wal") if Path(str(db) + suffix).exists()}


def put_back(db: Path, files: dict[str, bytes]) -> None:
    """The database as `stale_copy` found it: an OS crash that took its later commits."""
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    for suffix, data in files.items():
        Path(str(db) + suffix).write_bytes(data)


def test_sqlite_behind_the_wal_start_after_gc_rebuilds_from_the_checkpoint(tmp_path: Path) -> None:
    """FINDINGS F3: GC removed the segments below the checkpoint, then an OS crash took
    SQLite's last commits (synchronous=NORMAL) back below the log's start. Replaying the log
    alone would leave a hole; the checkpoint GC kept the log for is the base."""
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), wal_max_size_bytes=65536)
    run(e1, T)
    run(e1, insert(1))
    stale = stale_copy(tmp_path / "e1" / "db.sqlite")  # what the OS crash will leave: {1: 2}
    for i in range(2, 400):
        run(e1, f"INSERT INTO t VALUES ({i}, '{'x' * 300}')")
    checkpoint = e1.checkpoint()
    run(e1, insert(1000))
    segments = e1.wal.segments()
    below = [path.name for (path, _), (_, following) in zip(segments, segments[1:]) if following <= vclock_of(checkpoint)]
    assert below, "the log rolled past the checkpoint"
    e1.wal.remove_oldest(below)
    end = e1.vclock.copy()
    e1.close()
    put_back(tmp_path / "e1" / "db.sqlite", stale)

    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(start_ms=START_MS + 1_000), log=log, wal_max_size_bytes=65536)
    [behind] = log.named("sqlite_behind_wal_start")
    assert behind["sqlite_vclock"] == {1: 2} and behind["wal_start"][1] > 2
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [str(checkpoint)]
    assert e1.vclock == end
    assert select(e1, "SELECT count(*) FROM t") == [[400]]


def test_sqlite_behind_the_wal_start_with_no_checkpoint_is_refused_and_keeps_the_database(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), wal_max_size_bytes=65536)
    run(e1, T)
    stale = stale_copy(tmp_path / "e1" / "db.sqlite")
    for i in range(1, 400):
        run(e1, f"INSERT INTO t VALUES ({i}, '{'x' * 300}')")
    first = e1.wal.segments()[0][0].name
    e1.wal.remove_oldest([first])  # only a hand, or a bug, removes a segment with no checkpoint
    e1.close()
    put_back(tmp_path / "e1" / "db.sqlite", stale)
    with pytest.raises(EngineFatal, match="outside the WAL and no checkpoint"):
        open_engine(tmp_path / "e1", 1, FakeClock(), wal_max_size_bytes=65536)
    kept = apsw.Connection(str(tmp_path / "e1" / "db.sqlite"))
    assert kept.execute("SELECT count(*) FROM t").fetchall() == [(0,)], "the database is left for the operator"
    kept.close()


def test_rows_of_our_own_origin_lost_in_a_crash_are_fetched_back_from_a_peer(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, T)
    run(e1, insert(1))
    e1.checkpoint()
    run(e1, insert(2))
    ship(e1, e2)  # e2 holds 1:3, which e1 is about to lose
    records = wal_records(e1)
    e1.close()
    cut_last_records(tmp_path / "e1", records, 1)
    e1 = open_engine(tmp_path / "e1", 1, clock)
    assert e1.vclock == VClock({1: 2})
    # an ordinary apply drops rows of our own origin; the start-up fetch admits them
    assert ship(e2, e1) == 0
    fetched = [e1.apply(r, own_allowed=True) for r in wal_records(e2)]
    e1.flush()
    assert fetched.count(True) == 1
    assert e1.vclock == e2.vclock == VClock({1: 3})
    assert e1.table_digest() == e2.table_digest()
    [record] = run(e1, insert(3)).records
    assert record.lsn == 4
    assert record.txn_id > records[-1].txn_id


def test_a_checkpoint_beyond_the_wal_is_set_aside_and_never_becomes_a_base(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), checkpoint_count=5)
    run(e1, T)
    run(e1, insert(1))
    older = e1.checkpoint()  # {1: 2}
    run(e1, insert(2))
    run(e1, insert(3))
    newer = e1.checkpoint()  # {1: 4}: beyond the WAL once its tail is lost
    records = wal_records(e1)
    e1.close()
    # No OS crash does this since the checkpoint syncs the WAL (F2); a disk that lied, or a
    # checkpoint made by an older version, still can.
    cut_last_records(tmp_path / "e1", records, 2)
    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log, checkpoint_count=5)
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [str(older)]
    assert log.named("sqlite_ahead_of_wal")[0]["dropped"] == {1: 2}
    assert select(e1, "SELECT id FROM t") == [[1]]
    assert e1.vclock == VClock({1: 2})
    [set_aside] = log.named("checkpoint_set_aside")
    assert (set_aside["vclock"], set_aside["wal_vclock"]) == ({1: 4}, {1: 2})
    assert not newer.exists() and Path(set_aside["path"]).exists()
    assert e1.checkpoints() == [(older, VClock({1: 2}))]

    # New transactions take LSNs 3 to 5 again; SQLite gets ahead of the WAL once more, whose
    # end {1: 4} now covers the old checkpoint: it must not be the base of the rebuild.
    for i in (20, 30, 40):
        run(e1, insert(i))
    records = wal_records(e1)
    e1.close()
    cut_last_records(tmp_path / "e1", records, 1)
    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log, checkpoint_count=5)
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [str(older)]
    assert select(e1, "SELECT id FROM t") == [[1], [20], [30]]


def test_rows_a_checkpoint_holds_survive_an_os_crash_under_wal_mode_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PageCache(monkeypatch)
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), wal_mode=WalMode.WRITE)
    run(e1, T)
    run(e1, insert(1))
    run(e1, insert(2))
    checkpoint = e1.checkpoint()
    run(e1, insert(3))  # after the checkpoint: an OS crash may take it from the WAL
    e1.close()
    cache.os_crash(tmp_path / "e1" / "wal")  # SQLite kept everything: it is ahead

    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log)
    assert e1.wal.vclock == vclock_of(checkpoint) == VClock({1: 3})
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [str(checkpoint)]
    assert select(e1, "SELECT id FROM t") == [[1], [2]]
    assert e1.table_digest() == twin_digest(tmp_path, [T, insert(1), insert(2)])


def test_rebuild_without_a_checkpoint_replays_the_whole_wal(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e1, T)
    run(e1, insert(1))
    run(e1, insert(2))
    records = wal_records(e1)
    e1.close()
    cut_last_records(tmp_path / "e1", records, 1)
    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log)
    assert log.named("sqlite_ahead_of_wal")[0]["dropped"] == {1: 1}
    assert [f["checkpoint"] for f in log.named("rebuild_from_checkpoint")] == [None]
    assert select(e1, "SELECT id FROM t") == [[1]]
    assert e1.table_digest() == twin_digest(tmp_path, [T, insert(1)])


def test_rebuild_refuses_to_start_when_no_checkpoint_joins_the_wal(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), wal_max_size_bytes=400)
    run(e1, T)
    for i in range(10):
        run(e1, insert(i))
    segments = [path for path, _ in e1.wal.segments()]
    records = wal_records(e1)
    e1.close()
    assert len(segments) >= 2
    segments[0].unlink()  # collected, and there is no checkpoint to start from
    cut_last_records(tmp_path / "e1", records, 1)
    with pytest.raises(EngineFatal, match="restore or re-join"):
        open_engine(tmp_path / "e1", 1, FakeClock(), wal_max_size_bytes=400)


# ------------------------------------------------------------------ checkpoints


def snapshot_rows(path: Path, sql: str) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_checkpoints_are_named_by_signature_hold_their_vclock_and_the_newest_are_kept(tmp_path: Path) -> None:
    log = EventLog()
    e1 = open_engine(tmp_path / "e1", 1, FakeClock(), log=log, checkpoint_count=2)
    run(e1, T)
    made = []
    for i in range(3):
        run(e1, insert(i))
        path = e1.checkpoint()
        made.append((path, e1.vclock.copy(), select(e1, "SELECT * FROM t")))
    assert [p.name for p, _, _ in made] == [f"{vc.signature:020d}.snap" for _, vc, _ in made]
    assert not made[0][0].exists()
    assert [(p, vc) for p, vc in e1.checkpoints()] == [(p, vc) for p, vc, _ in made[1:]]
    for path, vclock, rows in made[1:]:
        assert vclock_of(path) == vclock
        assert [list(r) for r in snapshot_rows(path, "SELECT * FROM t ORDER BY id")] == rows
    assert [f["path"] for f in log.named("checkpoint_removed")] == [str(made[0][0])]


def test_a_checkpoint_holds_only_flushed_rows_and_its_vclock_matches_them(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e1, T)
    run(e1, insert(1))
    txn = e1.begin()
    e1.execute(txn, insert(2))
    e1.commit(txn)  # queued, not yet durable
    path = e1.checkpoint()
    e1.flush()
    assert vclock_of(path) == VClock({1: 2})
    assert snapshot_rows(path, "SELECT id FROM t") == [(1,)]
    assert snapshot_rows(path, "SELECT key FROM _rs_version WHERE tbl = 't'") == [("t:1",)]


def test_a_checkpoint_can_seed_a_new_member(tmp_path: Path) -> None:
    clock = FakeClock()
    e1 = open_engine(tmp_path / "e1", 1, clock)
    run(e1, T)
    run(e1, insert(1), insert(2))
    path = e1.checkpoint()
    run(e1, "UPDATE t SET v = 'after' WHERE id = 1")
    joiner_dir = tmp_path / "e2"
    joiner_dir.mkdir()
    (joiner_dir / "db.sqlite").write_bytes(path.read_bytes())
    # the joiner's WAL starts where the checkpoint ends
    Wal.open(joiner_dir / "wal", start_vclock=vclock_of(path)).close()
    e2 = open_engine(joiner_dir, 2, clock)
    assert e2.vclock == vclock_of(path)
    ship(e1, e2)
    assert e2.table_digest() == e1.table_digest()
    assert e2.vclock == e1.vclock


def test_a_leftover_partial_checkpoint_is_removed_at_open(tmp_path: Path) -> None:
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e1, T)
    e1.close()
    partial = tmp_path / "e1" / "snap" / "1234.snap.partial"
    partial.write_bytes(b"half a checkpoint")
    e1 = open_engine(tmp_path / "e1", 1, FakeClock())
    assert not partial.exists()
    assert e1.checkpoints() == []
