"""`Engine.describe`: a statement compiled for PREPARE, never run."""

import pytest

from replicaset.storage import SqlError
from tests.storage.enginekit import FakeClock, open_engine, run, select


@pytest.fixture
def engine(tmp_path):
    e = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, score REAL)")
    return e


def test_a_query_has_its_columns_and_its_parameters_in_tarantools_names(engine) -> None:
    shape = engine.describe("SELECT id, name, score * 2 AS double FROM t WHERE id = ? OR name = :name OR score > ?3")
    assert shape.columns == [("id", "INTEGER"), ("name", "TEXT"), ("double", None)]
    assert shape.parameters == ("?", ":name", "?3")
    assert not shape.is_empty and not shape.has_tail


def test_a_change_has_no_columns_and_is_not_run(engine) -> None:
    shape = engine.describe("INSERT INTO t(id, name) VALUES (@id, $name)")
    assert shape.columns == []
    assert shape.parameters == (":id", ":name"), "SQLite gives the names without their marker"
    assert select(engine, "SELECT count(*) FROM t") == [[0]]
    # Refused only when run (the reader has no authorizer), as Tarantool compiles only.
    assert engine.describe("BEGIN").columns == []


@pytest.mark.parametrize("sql", ["", "   ", ";", "-- nothing", "/* nothing */ ;"])
def test_a_text_without_a_statement_is_empty(engine, sql: str) -> None:
    assert engine.describe(sql).is_empty


@pytest.mark.parametrize(
    ("sql", "has_tail"),
    [
        ("SELECT 1;", False),
        ("SELECT 1; -- trailing comment", False),
        ("SELECT 1; ; /* x */ ;", False),
        ("SELECT 1; SELECT 2", True),
        ("SELECT 1; ; SELECT 2", True),
        ("CREATE TABLE u(id INTEGER PRIMARY KEY); INSERT INTO u VALUES (1)", True),
        ("SELECT 1; SELEKT", True),
    ],
)
def test_statements_after_the_first_are_told_from_blanks(engine, sql: str, has_tail: bool) -> None:
    assert engine.describe(sql).has_tail is has_tail


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("SELEKT 1", "syntax error"),
        ("SELECT nope FROM t", "no such column"),
        ("INSERT INTO u VALUES (1)", "no such table"),
    ],
)
def test_a_statement_that_does_not_compile_is_an_sql_error(engine, sql: str, message: str) -> None:
    with pytest.raises(SqlError) as exc:
        engine.describe(sql)
    assert message in str(exc.value)
    assert not str(exc.value).startswith("SQLError"), "SQLite's message, without apsw's prefix"


def test_a_table_created_after_the_reader_opened_is_seen(engine) -> None:
    assert engine.describe("SELECT id FROM t").columns == [("id", "INTEGER")]
    run(engine, "CREATE TABLE later(k TEXT PRIMARY KEY)")
    assert engine.describe("SELECT k FROM later").columns == [("k", "TEXT")]
