"""Stream transactions between their statements (replicaset.storage.transactions): the rows
wait outside SQLite, are written again as they were before the next statement, and a key
another transaction committed meanwhile makes the transaction conflict, with nothing of
it left. Each test drives the engine as `Writer.stream_execute` and `commit_stream` do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from replicaset.storage import Captured, Engine, SqlError, StatementResult, TxnConflict
from tests.storage.enginekit import FakeClock, changes, dml_records, open_engine, run, select, ship
from tests.storage.test_virtual_tables import SCHEMA as FTS_SCHEMA


class Stream:
    """One stream transaction on `engine`, statement by statement."""

    def __init__(self, engine: Engine, *, quorum: bool = False) -> None:
        self.engine = engine
        self.quorum = quorum
        self.captured: Captured | None = None

    def execute(self, sql: str, binds: Any = ()) -> StatementResult:
        txn = self.engine.resume(self.captured, quorum=self.quorum)
        try:
            result = self.engine.execute(txn, sql, binds)
        except SqlError:
            self.engine.rollback(txn)
            raise
        self.captured = self.engine.capture(txn)
        return result

    def commit(self) -> None:
        txn = self.engine.resume(self.captured, quorum=False)
        self.engine.commit(txn)
        self.engine.flush()


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    engine = open_engine(tmp_path / "a", 1, FakeClock(), local_tables=["scratch"])
    for ddl in ("CREATE TABLE acc(id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, owner TEXT UNIQUE)",
                "CREATE TABLE audit(id INTEGER PRIMARY KEY, acc INTEGER, delta INTEGER)",
                "CREATE TRIGGER acc_au AFTER UPDATE ON acc BEGIN"
                " INSERT INTO audit(acc, delta) VALUES (new.id, new.balance - old.balance); END",
                "CREATE TABLE scratch(k INTEGER PRIMARY KEY, v TEXT)"):
        run(engine, ddl)
    run(engine, "INSERT INTO acc VALUES (1, 100, 'ann'), (2, 0, 'bob')")
    return engine


def test_a_stream_sees_its_own_rows_leaves_none_in_sqlite_between_statements_and_commits_them_once(
        engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("UPDATE acc SET balance = balance - 30 WHERE id = 1")
    stream.execute("UPDATE acc SET balance = balance + 30 WHERE id = 2")
    inside = stream.execute("SELECT id, balance FROM acc ORDER BY id")
    assert inside.rows == [[1, 70], [2, 30]]
    engine.flush()
    assert select(engine, "SELECT id, balance FROM acc ORDER BY id") == [[1, 100], [2, 0]]
    assert select(engine, "SELECT count(*) FROM audit") == [[0]]
    stream.commit()
    assert select(engine, "SELECT id, balance FROM acc ORDER BY id") == [[1, 70], [2, 30]]
    # The trigger ran once per UPDATE: its rows are written again with triggers off.
    assert select(engine, "SELECT acc, delta FROM audit ORDER BY id") == [[1, -30], [2, 30]]
    last = dml_records(engine)[-1]
    assert [(table, op) for table, op, *_ in changes(last)] == [
        ("acc", "UPDATE"), ("audit", "INSERT"), ("acc", "UPDATE"), ("audit", "INSERT")]


def test_another_transaction_may_write_between_two_statements_of_a_stream(engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("UPDATE acc SET balance = 1 WHERE id = 1")
    run(engine, "UPDATE acc SET balance = 5 WHERE id = 2")
    stream.execute("INSERT INTO acc VALUES (3, 3, 'cy')")
    stream.commit()
    assert select(engine, "SELECT id, balance FROM acc ORDER BY id") == [[1, 1], [2, 5], [3, 3]]


@pytest.mark.parametrize("meanwhile", [
    "UPDATE acc SET balance = 7 WHERE id = 1",
    "DELETE FROM acc WHERE id = 1",
])
def test_a_row_the_stream_wrote_and_another_committed_since_conflicts_and_leaves_nothing(
        engine: Engine, meanwhile: str) -> None:
    stream = Stream(engine)
    stream.execute("UPDATE acc SET balance = 1 WHERE id = 1")
    run(engine, meanwhile)
    before = select(engine, "SELECT id, balance FROM acc ORDER BY id")
    with pytest.raises(TxnConflict, match="row .* of table 'acc' was changed by another transaction"):
        stream.execute("SELECT 1")
    with pytest.raises(TxnConflict):
        stream.commit()
    engine.flush()
    assert select(engine, "SELECT id, balance FROM acc ORDER BY id") == before
    assert select(engine, "SELECT count(*) FROM audit") == [[1 if meanwhile.startswith("UPDATE") else 0]]


def test_a_key_the_stream_inserted_and_another_inserted_since_conflicts(engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("INSERT INTO acc VALUES (9, 1, 'stream')")
    run(engine, "INSERT INTO acc VALUES (9, 2, 'other')")
    with pytest.raises(TxnConflict):
        stream.commit()
    assert select(engine, "SELECT balance, owner FROM acc WHERE id = 9") == [[2, "other"]]


def test_a_unique_value_taken_meanwhile_conflicts(engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("INSERT INTO acc VALUES (8, 1, 'dan')")
    run(engine, "INSERT INTO acc VALUES (9, 2, 'dan')")
    with pytest.raises(TxnConflict, match="cannot be written again"):
        stream.execute("SELECT 1")
    assert select(engine, "SELECT id FROM acc WHERE owner = 'dan'") == [[9]]


def test_a_local_row_changed_meanwhile_conflicts_though_local_rows_have_no_version(engine: Engine) -> None:
    run(engine, "INSERT INTO scratch VALUES (1, 'a')")
    stream = Stream(engine)
    stream.execute("UPDATE scratch SET v = 'stream' WHERE k = 1")
    run(engine, "UPDATE scratch SET v = 'other' WHERE k = 1")
    with pytest.raises(TxnConflict, match="local table 'scratch'"):
        stream.commit()
    assert select(engine, "SELECT v FROM scratch") == [["other"]]


def test_a_local_row_left_alone_meanwhile_commits(engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("INSERT INTO scratch VALUES (1, 'a')")
    stream.execute("UPDATE scratch SET v = 'b' WHERE k = 1")
    run(engine, "INSERT INTO scratch VALUES (2, 'other')")
    stream.commit()
    assert select(engine, "SELECT k, v FROM scratch ORDER BY k") == [[1, "b"], [2, "other"]]


def test_a_failed_statement_leaves_the_stream_as_it_was(engine: Engine) -> None:
    stream = Stream(engine)
    stream.execute("UPDATE acc SET balance = 1 WHERE id = 1")
    with pytest.raises(SqlError, match="UNIQUE"):
        stream.execute("UPDATE acc SET owner = 'bob' WHERE id = 1")
    assert stream.execute("SELECT balance, owner FROM acc WHERE id = 1").rows == [[1, "ann"]]
    stream.commit()
    assert select(engine, "SELECT balance, owner FROM acc WHERE id = 1") == [[1, "ann"]]


def test_a_quorum_stream_refuses_a_local_table_at_the_statement_that_writes_it(engine: Engine) -> None:
    stream = Stream(engine, quorum=True)
    stream.execute("UPDATE acc SET balance = 1 WHERE id = 1")
    with pytest.raises(SqlError, match="local to each member"):
        stream.execute("INSERT INTO scratch VALUES (1, 'x')")
    assert [row.key for row in stream.captured.rows if row.table != "audit"] == ["acc:1"]


def test_an_external_content_index_follows_rows_written_again(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = open_engine(tmp_path / "a", 1, clock)
    peer = open_engine(tmp_path / "b", 2, clock)
    for sql in FTS_SCHEMA:
        run(engine, sql)
    ship(engine, peer)
    stream = Stream(engine)
    stream.execute("INSERT INTO docs(id, title, body) VALUES (1, 'one', 'hello world')")
    stream.execute("INSERT INTO docs(id, title, body) VALUES (2, 'two', 'hello moon')")
    stream.execute("UPDATE docs SET body = 'bye world' WHERE id = 1")
    assert stream.execute("SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'hello' ORDER BY rowid").rows == [[2]]
    stream.commit()
    ship(engine, peer)
    for member in (engine, peer):
        assert select(member, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'hello'") == [[2]]
        assert select(member, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'bye'") == [[1]]
    run(engine, "INSERT INTO docs_fts(docs_fts) VALUES ('integrity-check')")


def test_a_table_read_and_written_by_another_since_makes_the_stream_conflict(engine: Engine) -> None:
    """Read, then write what was read: another transaction's write of the table between
    the two would be lost, so the stream conflicts, as it waited for the writer before."""
    stream = Stream(engine)
    assert stream.execute("SELECT balance FROM acc WHERE id = 1").rows == [[100]]
    run(engine, "UPDATE acc SET balance = 10 WHERE id = 1")
    with pytest.raises(TxnConflict, match="table 'acc' was written by another transaction since this one read it"):
        stream.execute("UPDATE acc SET balance = ? WHERE id = 1", (100 - 30,))
    assert select(engine, "SELECT balance FROM acc WHERE id = 1") == [[10]]


def test_a_table_read_and_left_alone_meanwhile_commits(engine: Engine) -> None:
    stream = Stream(engine)
    assert stream.execute("SELECT balance FROM acc WHERE id = 1").rows == [[100]]
    run(engine, "INSERT INTO scratch VALUES (1, 'elsewhere')")
    stream.execute("UPDATE acc SET balance = ? WHERE id = 1", (100 - 30,))
    stream.commit()
    assert select(engine, "SELECT balance FROM acc WHERE id = 1") == [[70]]


def test_a_stream_may_read_a_temp_table_but_not_write_it(engine: Engine) -> None:
    """A TEMP table's rows are not captured: written in a stream, they would be gone at its
    next statement."""
    run(engine, "CREATE TEMP TABLE tmp(a)")
    run(engine, "INSERT INTO tmp VALUES (1)")
    stream = Stream(engine)
    assert stream.execute("SELECT a FROM tmp").rows == [[1]]
    with pytest.raises(SqlError, match="cannot write TEMP tables"):
        stream.execute("INSERT INTO tmp VALUES (2)")
    assert stream.execute("SELECT a FROM tmp").rows == [[1]]


def test_a_read_of_what_only_the_writer_knows_conflicts_with_any_write_since(engine: Engine) -> None:
    """A statement naming a TEMP table cannot be looked at elsewhere to learn what it read:
    it counts as a read of every table."""
    run(engine, "CREATE TEMP TABLE tmp(a)")
    stream = Stream(engine)
    stream.execute("SELECT count(*) FROM tmp JOIN acc")
    run(engine, "INSERT INTO scratch VALUES (1, 'anywhere')")
    with pytest.raises(TxnConflict, match="since this one read a TEMP table"):
        stream.execute("UPDATE acc SET balance = 0 WHERE id = 2")


DEFERRED = ("CREATE TABLE head(id INTEGER PRIMARY KEY)",
            "CREATE TABLE line(id INTEGER PRIMARY KEY, head INTEGER REFERENCES head(id) DEFERRABLE INITIALLY DEFERRED)")


@pytest.mark.parametrize("quorum", [False, True], ids=["one", "quorum"])
def test_a_deferred_foreign_key_is_checked_at_the_end_of_its_transaction_as_sqlite_checks_it_at_commit(
        tmp_path: Path, quorum: bool) -> None:
    """SQLite checks a DEFERRABLE INITIALLY DEFERRED key at COMMIT, which for the engine is the
    batch's, after the WAL append: a violation there stopped the member. It is refused at
    the end of the client's transaction instead, and a stream may still resolve it later."""
    engine = open_engine(tmp_path, 1, FakeClock())
    for sql in DEFERRED:
        run(engine, sql)
    txn = engine.begin(quorum=quorum)
    engine.execute(txn, "INSERT INTO line VALUES (1, 7)")
    with pytest.raises(SqlError, match="FOREIGN KEY constraint failed"):
        engine.capture(txn) if quorum else engine.commit(txn)
    engine.flush()
    stream = Stream(engine, quorum=quorum)
    stream.execute("INSERT INTO line VALUES (2, 8)")
    if quorum:
        with pytest.raises(SqlError, match="FOREIGN KEY constraint failed"):
            engine.check_deferred(stream.captured)
    else:
        with pytest.raises(SqlError, match="FOREIGN KEY constraint failed"):
            stream.commit()
    engine.flush()
    resolved = Stream(engine, quorum=quorum)
    resolved.execute("INSERT INTO line VALUES (3, 9)")
    resolved.execute("INSERT INTO head VALUES (9)")
    if quorum:
        engine.check_deferred(resolved.captured)  # decided by the quorum from here
    else:
        resolved.commit()
    engine.flush()
    assert select(engine, "SELECT id, head FROM line") == ([] if quorum else [[3, 9]])
