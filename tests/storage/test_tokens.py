"""The tokenizer reads client SQL as SQLite does: a word inside a string, a quoted name or a
comment is not a keyword, and parameters get SQLite's numbers (SQLite itself is the
oracle where it can tell)."""

from __future__ import annotations

import apsw
import apsw.ext
import pytest

from replicaset.storage.errors import SqlError
from replicaset.storage.returning import Clause
from replicaset.storage.tokens import Kind, has_conflict_clause, parameter_numbers, tokenize

STATEMENTS = (
    "INSERT INTO t(a, b) VALUES (?, ?) RETURNING a, ?, :x, ?7, ?, :x, $y, @z, $y",
    "INSERT INTO t(a, b) VALUES (:x, 'it''s ?') /* ?9 :no */ RETURNING b -- ? :no\n, :x, ?",
    'INSERT INTO t("a ?", b) SELECT ?3, [b :no] FROM t WHERE `a``?` = ? RETURNING "RETURNING", ?',
    "INSERT INTO t(a, b) VALUES (x'00ff', 1.5e+3) RETURNING a->>'$.k', b || ?2, ?1",
)


@pytest.fixture
def conn() -> apsw.Connection:
    conn = apsw.Connection(":memory:")
    conn.execute('CREATE TABLE t(a, b, "a ?", "RETURNING", "b :no", "a`?")')
    return conn


@pytest.mark.parametrize("sql", STATEMENTS)
def test_tokens_rebuild_the_text_and_parameters_get_sqlites_numbers(conn: apsw.Connection, sql: str) -> None:
    tokens = tokenize(sql)
    assert "".join(t.text for t in tokens) == sql
    numbers = parameter_numbers(tokens)
    details = apsw.ext.query_info(conn, sql)
    assert max(numbers.values()) == details.bindings_count
    for index, number in numbers.items():
        text = tokens[index].text
        assert details.bindings_names[number - 1] == (None if text == "?" else text[1:])


def test_words_in_strings_quoted_names_and_comments_are_not_keywords() -> None:
    sql = "INSERT INTO t VALUES ('RETURNING', \"RETURNING\", [on conflict]) /* ON CONFLICT */ -- RETURNING"
    assert [t.text for t in tokenize(sql) if t.is_word("RETURNING")] == []
    assert not has_conflict_clause(tokenize(sql), top_level=True)
    assert {t.kind for t in tokenize(sql) if "RETURNING" in t.text} == {Kind.STRING, Kind.QUOTED, Kind.SPACE}


def test_conflict_clauses_of_an_upsert_and_of_a_constraint() -> None:
    upsert = "INSERT INTO t(a) VALUES (1) ON CONFLICT(a) DO NOTHING"
    assert has_conflict_clause(tokenize(upsert), top_level=True)
    constraint = "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT UNIQUE ON CONFLICT REPLACE)"
    assert has_conflict_clause(tokenize(constraint), top_level=False)
    assert not has_conflict_clause(tokenize(constraint), top_level=True), "inside the column list"
    assert not has_conflict_clause(tokenize("CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT UNIQUE)"), top_level=False)


def test_the_returning_clause_is_read_to_the_end_of_its_statement() -> None:
    clause = Clause.of(STATEMENTS[1] + " ;  ")
    assert clause.text == "b -- ? :no\n, ?1, ?2"
    assert clause.parameters == ((1, ":x"), (2, "?"))
    assert clause.values(("ex", "q"), 2) == ["ex", "q"]
    clause = Clause.of(STATEMENTS[0])
    assert clause.text == "a, ?1, ?2, ?3, ?4, ?2, ?5, ?6, ?5"
    assert clause.values(tuple(range(1, 11)), 10) == [3, 4, 7, 8, 9, 10]
    assert Clause.of("INSERT INTO t(a) VALUES (:x) RETURNING :x * 2").values({"x": 21}, 1) == [21]
    with pytest.raises(SqlError, match="cannot match the parameters"):
        clause.values(tuple(range(1, 11)), 9)
