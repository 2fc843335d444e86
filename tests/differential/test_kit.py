"""The kit itself, without a server: case files read as their authors mean them, and every
kind of difference between two answers is told, so that a passing differential run means
the sides agreed."""

from __future__ import annotations

import pytest

from tests.differential.generate import generated_case
from tests.differential.kit import (
    Answer,
    Expect,
    Statement,
    disagreement,
    open_reference,
    parse_case_text,
    reference_answer,
    reference_refused,
)

CASE = """-- a comment before anything
-- @keys-differ t.id
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);
CREATE TRIGGER t_log AFTER INSERT ON t BEGIN
  UPDATE t SET v = v || ';' WHERE id = new.id;
END;
-- @error
INSERT INTO t VALUES (NULL, 1),
  ('x', 2);
SELECT * FROM t;
"""


def test_a_case_file_reads_as_its_author_means_it() -> None:
    case = parse_case_text("sample", CASE)
    statements = [step[0] for step in case.steps]
    assert [len(step) for step in case.steps] == [1, 1, 1, 1]
    assert statements[1].sql.startswith("CREATE TRIGGER") and statements[1].sql.endswith("END;")
    assert [s.expect for s in statements] == [Expect.AGREE, Expect.AGREE, Expect.ERROR, Expect.AGREE]
    assert [s.where for s in statements] == ["sample:3", "sample:4", "sample:8", "sample:10"]
    assert case.keys_differ == {("t", "id")}


def test_an_unterminated_statement_is_refused_with_its_line() -> None:
    with pytest.raises(ValueError, match="sample:2"):
        parse_case_text("sample", "SELECT 1;\nSELECT 2\n")


def agree(sql: str = "SELECT 1") -> Statement:
    return Statement(sql=sql, expect=Expect.AGREE, where="here")


@pytest.mark.parametrize(("statement", "server", "sqlite", "told"), [
    (agree(), Answer(error="boom"), Answer(columns=["1"], rows=[[1]]), "only one side failed"),
    (agree(), Answer(columns=["1"], rows=[[1]]), Answer(error="boom"), "only one side failed"),
    (agree(), Answer(columns=["a"], rows=[[1]]), Answer(columns=["b"], rows=[[1]]), "columns"),
    (agree(), Answer(columns=["a"], rows=[[1.0]]), Answer(columns=["a"], rows=[[1]]), "rows"),
    (agree("SELECT a FROM t ORDER BY a"), Answer(columns=["a"], rows=[[2], [1]]), Answer(columns=["a"], rows=[[1], [2]]),
     "rows"),
    (agree("DELETE FROM t"), Answer(row_count=2), Answer(row_count=3), "row count"),
    (Statement(sql="SELECT 1", expect=Expect.ERROR, where="here"), Answer(columns=["1"], rows=[[1]]),
     Answer(columns=["1"], rows=[[1]]), "the case is wrong"),
    (Statement(sql="SELECT 1", expect=Expect.REFUSED, where="here"), Answer(columns=["1"], rows=[[1]]),
     Answer(columns=["1"], rows=[[1]]), "the gap closed"),
    (Statement(sql="SELECT 1", expect=Expect.REFUSED, where="here"), Answer(error="refused"),
     Answer(error="no such table"), "SQLite refused"),
])
def test_every_kind_of_difference_is_told(statement: Statement, server: Answer, sqlite: Answer, told: str) -> None:
    assert told in (disagreement(statement, server, sqlite) or "")


def test_rows_without_order_by_agree_in_any_order_and_equal_errors_agree() -> None:
    rows = Answer(columns=["a"], rows=[[1], ["x"], [None], [b"\x00"]])
    assert disagreement(agree("SELECT a FROM t"), rows, Answer(columns=["a"], rows=rows.rows[::-1])) is None
    assert disagreement(agree(), Answer(error="UNIQUE"), Answer(error="UNIQUE constraint failed")) is None


def test_the_reference_enforces_foreign_keys_and_undoes_a_refused_statement() -> None:
    conn = open_reference()
    reference_answer(conn, "CREATE TABLE p(id INTEGER PRIMARY KEY)")
    reference_answer(conn, "CREATE TABLE c(id INTEGER PRIMARY KEY, p INTEGER REFERENCES p(id))")
    assert "FOREIGN KEY" in (reference_answer(conn, "INSERT INTO c VALUES (1, 9)").error or "")
    assert reference_refused(conn, "CREATE TABLE no_key(v)").error is None
    assert reference_answer(conn, "SELECT name FROM sqlite_schema WHERE name = 'no_key'").rows == []
    assert reference_answer(conn, "SELECT * FROM p WHERE 0").columns == ["id"]


def test_a_seed_gives_the_same_case_and_another_seed_another() -> None:
    assert generated_case(7, 50) == generated_case(7, 50)
    assert generated_case(7, 50).statement_count == len(generated_case(7, 0).steps) + 50
    seven = [s.sql for step in generated_case(7, 50).steps for s in step]
    eight = [s.sql.replace("g8_", "g7_") for step in generated_case(8, 50).steps for s in step]
    assert seven != eight
