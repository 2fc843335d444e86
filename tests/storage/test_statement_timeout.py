"""A client's statement past `sql.statement_timeout_s` is stopped with a clear error and
leaves the engine serving (statements run on the event loop: one endless statement would
stop the member). A read stops alone; a write takes its batch with it (SQLite rolls back
the whole transaction of an interrupted write), and the engine hands its LSNs out again."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from replicaset.storage import BatchAbandoned, StatementTimeout
from tests.storage.enginekit import FakeClock, close_all, open_engine, run, select

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
ENDLESS_WRITE = ("INSERT INTO kv(k, v) WITH RECURSIVE r(x) AS (SELECT 1000 UNION ALL SELECT x + 1 FROM r) "
                 "SELECT x, 'flood' FROM r")


@pytest.fixture(autouse=True)
def _close() -> None:
    yield
    close_all()


def test_an_endless_read_is_stopped_at_the_limit(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), statement_timeout_s=0.2)
    run(engine, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    run(engine, "INSERT INTO kv VALUES (1, 'a')")
    started = time.monotonic()
    backstop = threading.Timer(10.0, engine.connections.reader.interrupt)  # bounds the test if the limit fails
    backstop.start()
    try:
        with pytest.raises(StatementTimeout, match=r"statement_timeout_s = 0.2 s"):
            engine.query(ENDLESS)
    finally:
        backstop.cancel()
    assert 0.2 <= time.monotonic() - started < 2.0
    assert engine.query("SELECT v FROM kv").rows == [["a"]], "the next read runs, with a fresh deadline"
    run(engine, "INSERT INTO kv VALUES (2, 'b')")
    assert select(engine, "SELECT count(*) FROM kv") == [[2]]


def test_a_read_under_the_limit_is_not_stopped(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), statement_timeout_s=5.0)
    bounded = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 300000) SELECT count(*) FROM r"
    assert engine.query(bounded).rows == [[300000]]


def test_an_endless_write_abandons_its_batch_and_its_lsns_are_handed_out_again(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), statement_timeout_s=0.2)
    run(engine, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    durable = engine.vclock.copy()
    queued = engine.begin()
    engine.execute(queued, "INSERT INTO kv VALUES (1, 'queued, never flushed')")
    engine.commit(queued)
    endless = engine.begin()
    backstop = threading.Timer(10.0, engine.connections.writer.interrupt)
    backstop.start()
    try:
        with pytest.raises(BatchAbandoned, match=r"statement_timeout_s = 0.2 s"):
            engine.execute(endless, ENDLESS_WRITE)
    finally:
        backstop.cancel()
    engine.check_invariants()
    assert engine.batch_kind is None, "the batch is gone with SQLite's transaction"
    assert select(engine, "SELECT count(*) FROM kv") == [[0]], "neither the flood nor the queued row remains"
    committed = run(engine, "INSERT INTO kv VALUES (2, 'after')")
    assert committed is not None and committed.records[0].lsn == durable.get(1) + 1, "the abandoned LSN is reused"
    engine.close()
    engine = open_engine(tmp_path / "e", 1, FakeClock())
    assert select(engine, "SELECT k, v FROM kv") == [[2, "after"]], "the WAL never held the abandoned batch"
    assert engine.vclock.get(1) == durable.get(1) + 1


def test_a_read_stopped_in_a_stream_transaction_leaves_the_transaction_usable(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), statement_timeout_s=0.2)
    run(engine, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    txn = engine.begin(explicit=True)
    engine.execute(txn, "INSERT INTO kv VALUES (1, 'a')")
    with pytest.raises(StatementTimeout) as stopped:
        engine.execute(txn, ENDLESS)
    assert not isinstance(stopped.value, BatchAbandoned)
    engine.execute(txn, "INSERT INTO kv VALUES (2, 'b')")
    engine.commit(txn)
    engine.flush()
    assert select(engine, "SELECT k FROM kv ORDER BY k") == [[1], [2]]


def test_the_node_s_own_statements_are_not_limited(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), statement_timeout_s=0.05)
    run(engine, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    txn = engine.begin()
    slow = ("INSERT INTO kv(k, v) SELECT 1, count(*) FROM "
            "(WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 1000000) SELECT x FROM r)")
    started = time.monotonic()
    engine.execute(txn, slow, trusted=True)
    assert time.monotonic() - started > 0.05, "the statement outlasts the limit it is not held to"
    engine.commit(txn)
    engine.flush()
    assert select(engine, "SELECT v FROM kv") == [["1000000"]]
