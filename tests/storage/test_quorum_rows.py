"""A quorum transaction in the engine: its rows captured with the versions read and taken
back out, then written when decided as our own next row, which every member applies the
same way and whose txn id each member records with it (docs/design/README.md §4.5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.storage import DdlNeedsLock, Engine, SqlError
from replicaset.storage.keys import SCHEMA_KEY
from replicaset.storage.rows import DdlPayload, DmlPayload
from wal import RecordType
from tests.storage.enginekit import FakeClock, open_engine, run, select, ship, versions

TXN_ID = 0x1234_5678


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Engine, Engine]:
    clock = FakeClock()
    first = open_engine(tmp_path / "a", 1, clock)
    second = open_engine(tmp_path / "b", 2, clock)
    run(first, "CREATE TABLE acct(id INTEGER PRIMARY KEY, balance INTEGER)")
    run(first, "INSERT INTO acct VALUES (1, 100)")
    ship(first, second)
    return first, second


def capture(engine: Engine, *statements: str):
    """Capture, then flush the local batch the capture ran in, as the writer does before
    an apply batch."""
    txn = engine.begin(explicit=len(statements) > 1, quorum=True)
    for sql in statements:
        engine.execute(txn, sql)
    captured = engine.capture(txn)
    engine.flush()
    return captured


def test_capture_reads_the_versions_and_leaves_nothing_behind(pair: tuple[Engine, Engine]) -> None:
    first, _ = pair
    version = versions(first, "acct")["acct:1"]
    captured = capture(first, "UPDATE acct SET balance = balance - 30 WHERE id = 1", "INSERT INTO acct VALUES (2, 30)")
    assert captured.reads == {("acct", "acct:1"): version[:2], ("acct", "acct:2"): None}
    assert [r.new for r in captured.rows] == [{"id": 1, "balance": 70}, {"id": 2, "balance": 30}]
    assert select(first, "SELECT id, balance FROM acct") == [[1, 100]]
    assert first.vclock.get(1) == 2, "a captured transaction takes no LSN"


def test_decided_row_is_ours_next_and_every_member_records_its_txn(pair: tuple[Engine, Engine]) -> None:
    first, second = pair
    read_stamp = versions(first, "acct")["acct:1"][0]
    captured = capture(first, "UPDATE acct SET balance = 70 WHERE id = 1")
    record = first.commit_captured(captured, txn_id=TXN_ID, min_stamp=read_stamp)
    first.flush()
    assert (record.origin, record.lsn) == (1, 3)
    assert DmlPayload.unpack(record.payload).quorum_txn == TXN_ID
    assert record.txn_id > read_stamp
    assert first.flushed_quorum_rows == [(TXN_ID, 1, 3)]
    ship(first, second)
    assert second.flushed_quorum_rows == [(TXN_ID, 1, 3)]
    for engine in pair:
        assert select(engine, "SELECT balance FROM acct WHERE id = 1") == [[70]]
        assert engine.quorum_row(TXN_ID) == (1, 3)
        assert engine.stored_versions([("acct", "acct:1"), ("acct", "acct:9")]) == {("acct", "acct:1"): (record.txn_id, 1)}
    assert first.quorum_row(TXN_ID + 1) is None


def test_quorum_row_survives_a_restart_through_replay(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = open_engine(tmp_path / "a", 1, clock)
    run(engine, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    engine.commit_captured(capture(engine, "INSERT INTO t VALUES (1, 'x')"), txn_id=TXN_ID, min_stamp=0)
    engine.flush()
    engine.close()
    reopened = open_engine(tmp_path / "a", 1, clock)
    assert reopened.quorum_row(TXN_ID) == (1, 2)
    assert select(reopened, "SELECT v FROM t") == [["x"]]


@pytest.mark.parametrize(("statement", "error"), [
    ("CREATE INDEX scratch_id ON scratch(id)", "DDL statement on local tables"),
    ("INSERT INTO scratch VALUES (1)", "local to each member"),
])
def test_capture_refuses_what_a_quorum_cannot_carry(tmp_path: Path, statement: str, error: str) -> None:
    engine = open_engine(tmp_path / "a", 1, FakeClock(), local_tables=["scratch"])
    run(engine, "CREATE TABLE scratch(id INTEGER PRIMARY KEY)")
    with pytest.raises(SqlError, match=error):
        capture(engine, statement)
    assert select(engine, "SELECT name FROM sqlite_schema WHERE name = 'other'") == []
    assert select(engine, "SELECT count(*) FROM scratch") == [[0]]


# ------------------------------------------------------------------ DDL under the DDL lock


@pytest.fixture
def locked_pair(tmp_path: Path) -> tuple[Engine, Engine]:
    """Two members as the server opens them: replicated DDL only under the DDL lock."""
    clock = FakeClock()
    first = open_engine(tmp_path / "a", 1, clock, ddl_lock=True, local_tables={"scratch"})
    second = open_engine(tmp_path / "b", 2, clock, ddl_lock=True, local_tables={"scratch"})
    return first, second


def test_ddl_outside_the_lock_is_undone_and_local_ddl_is_not_held(locked_pair: tuple[Engine, Engine]) -> None:
    first, _ = locked_pair
    txn = first.begin()
    with pytest.raises(DdlNeedsLock, match="DDL lock"):
        first.execute(txn, "CREATE TABLE t(id INTEGER PRIMARY KEY)")
    first.rollback(txn)
    first.flush()
    assert select(first, "SELECT name FROM sqlite_schema WHERE name = 't'") == []
    run(first, "CREATE TABLE scratch(a)")
    assert first.vclock.get(0) == 1 and first.vclock.get(1) == 0
    txn = first.begin(quorum=True)
    first.execute(txn, "CREATE INDEX scratch_a ON scratch(a)")
    with pytest.raises(SqlError, match="local tables"):
        first.capture(txn)


def test_a_ddl_decided_under_the_lock_is_a_row_with_its_txn_everywhere(locked_pair: tuple[Engine, Engine]) -> None:
    """The DDL is captured with the schema id as the lock key's version, leaves nothing
    until decided, then is our next row; a peer applying it records the txn (which
    releases its intent) and reads the new schema id as the lock key's version."""
    first, second = locked_pair
    txn = first.begin(quorum=True)
    assert first.execute(txn, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)").row_count == 1, "as Tarantool says"
    captured = first.capture(txn)
    first.flush()
    assert captured.rows == () and captured.reads == {SCHEMA_KEY: None} and captured.ddl is not None
    assert select(first, "SELECT name FROM sqlite_schema WHERE name = 't'") == []
    assert first.stored_versions([SCHEMA_KEY]) == second.stored_versions([SCHEMA_KEY]) == {}
    record = first.commit_captured(captured, txn_id=TXN_ID, min_stamp=0)
    first.flush()
    assert (record.type, record.origin, record.lsn) == (RecordType.DDL, 1, 1)
    assert DdlPayload.unpack(record.payload).quorum_txn == TXN_ID
    assert first.flushed_quorum_rows == [(TXN_ID, 1, 1)] and first.quorum_row(TXN_ID) == (1, 1)
    ship(first, second)
    assert second.flushed_quorum_rows == [(TXN_ID, 1, 1)] and second.quorum_row(TXN_ID) == (1, 1)
    assert first.stored_versions([SCHEMA_KEY]) == second.stored_versions([SCHEMA_KEY]) == {SCHEMA_KEY: (1, 1)}
    txn = second.begin(quorum=True)
    second.execute(txn, "ALTER TABLE t ADD COLUMN w TEXT")
    assert second.capture(txn).reads == {SCHEMA_KEY: (1, 1)}
