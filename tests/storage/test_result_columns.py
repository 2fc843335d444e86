"""A result's columns are those of the schema its statement ran under, on the reader and on
the writer: a text run before a schema change is compiled again by SQLite, and its columns
must follow, with rows or without."""

from typing import Any

import pytest

from replicaset.storage import Engine, StatementResult
from tests.storage.enginekit import FakeClock, open_engine, run, ship

COLUMNS_BEFORE = [("id", "INTEGER"), ("name", "TEXT")]
ADDED = [*COLUMNS_BEFORE, ("colour", "TEXT")]
RENAMED = [("id", "INTEGER"), ("title", "TEXT")]


@pytest.fixture
def engine(tmp_path) -> Engine:
    e = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)")
    run(e, "CREATE TABLE empty(id INTEGER PRIMARY KEY, name TEXT)")
    run(e, "INSERT INTO t VALUES (1, 'one')")
    return e


def on_reader(engine: Engine, sql: str) -> StatementResult:
    result = engine.query(sql)
    assert result is not None, f"{sql!r} is a read"
    return result


def on_writer(engine: Engine, sql: str) -> StatementResult:
    """In a stream transaction, as a SELECT inside BEGIN ... COMMIT runs on the writer."""
    txn = engine.begin(explicit=True)
    result = engine.execute(txn, sql)
    engine.rollback(txn)
    return result


@pytest.mark.parametrize("path", [on_reader, on_writer], ids=["reader", "writer"])
@pytest.mark.parametrize(
    ("table", "rows_after"), [("t", [[1, "one", "red"]]), ("empty", [])], ids=["rows", "no rows"]
)
def test_select_star_run_before_add_column_names_the_new_column(
    engine: Engine, path: Any, table: str, rows_after: list[list[Any]]
) -> None:
    assert path(engine, f"SELECT * FROM {table}").columns == COLUMNS_BEFORE
    run(engine, f"ALTER TABLE {table} ADD COLUMN colour TEXT DEFAULT 'red'")
    result = path(engine, f"SELECT * FROM {table}")
    assert (result.columns, result.rows) == (ADDED, rows_after)


@pytest.mark.parametrize("path", [on_reader, on_writer], ids=["reader", "writer"])
def test_a_renamed_column_is_named_anew_though_the_count_is_the_same(engine: Engine, path: Any) -> None:
    path(engine, "SELECT * FROM t")
    run(engine, "ALTER TABLE t RENAME COLUMN name TO title")
    assert path(engine, "SELECT * FROM t").columns == RENAMED
    assert path(engine, "SELECT * FROM t WHERE id = 2").columns == RENAMED


def test_a_schema_change_that_arrived_by_replication_is_seen_by_the_reader(engine: Engine, tmp_path) -> None:
    replica = open_engine(tmp_path / "e2", 2, FakeClock())
    ship(engine, replica)
    assert on_reader(replica, "SELECT * FROM empty").columns == COLUMNS_BEFORE
    run(engine, "ALTER TABLE empty ADD COLUMN colour TEXT DEFAULT 'red'")
    ship(engine, replica)
    assert on_reader(replica, "SELECT * FROM empty").columns == ADDED


def test_the_last_statement_of_a_text_gives_the_columns_with_rows_or_without(engine: Engine) -> None:
    on_reader(engine, "SELECT * FROM t; SELECT * FROM empty")
    run(engine, "ALTER TABLE empty ADD COLUMN colour TEXT DEFAULT 'red'")
    result = on_reader(engine, "SELECT * FROM t; SELECT * FROM empty")
    assert (result.columns, result.rows) == (ADDED, [[1, "one"]])
    result = on_reader(engine, "SELECT * FROM empty; SELECT * FROM t")
    assert (result.columns, result.rows) == (COLUMNS_BEFORE, [[1, "one"]])


def test_prepare_describes_the_columns_added_since_the_readers_last_statement(engine: Engine) -> None:
    assert engine.describe("SELECT * FROM t").columns == COLUMNS_BEFORE
    run(engine, "ALTER TABLE t ADD COLUMN colour TEXT DEFAULT 'red'")
    assert engine.describe("SELECT * FROM t").columns == ADDED
