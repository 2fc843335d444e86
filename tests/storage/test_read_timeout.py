"""A client's read past `sql.statement_timeout_s` is stopped with a clear error and leaves
the engine serving (reads run on the event loop: one endless query would stop the member)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from replicaset.storage import StatementTimeout
from tests.storage.enginekit import FakeClock, close_all, open_engine, run, select

ENDLESS = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"


@pytest.fixture(autouse=True)
def _close() -> None:
    yield
    close_all()


def test_an_endless_read_is_stopped_at_the_limit(tmp_path: Path) -> None:
    engine = open_engine(tmp_path / "e", 1, FakeClock(), read_timeout_s=0.2)
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
    engine = open_engine(tmp_path / "e", 1, FakeClock(), read_timeout_s=5.0)
    bounded = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 300000) SELECT count(*) FROM r"
    assert engine.query(bounded).rows == [[300000]]
