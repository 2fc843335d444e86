"""Tables with VIRTUAL generated columns replicate: capture reads their rows back by rowid,
since the preupdate hook cannot give their values (replicaset/storage/capture.py), and every
member computes the columns again."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.storage import Engine
from replicaset.storage.errors import SqlError
from tests.storage.enginekit import FakeClock, changes, dml_records, open_engine, run, select, ship

PEOPLE = ("CREATE TABLE people(id INTEGER PRIMARY KEY, first TEXT, last TEXT,"
          " full TEXT GENERATED ALWAYS AS (first || ' ' || last) VIRTUAL, n INT DEFAULT 0,"
          " loud TEXT AS (upper(first)) STORED)")


def pair(tmp_path: Path, *schema: str) -> tuple[Engine, Engine]:
    clock = FakeClock()
    e1, e2 = open_engine(tmp_path / "e1", 1, clock), open_engine(tmp_path / "e2", 2, clock)
    for sql in schema:
        run(e1, sql)
    ship(e1, e2)
    return e1, e2


def same(e1: Engine, e2: Engine, sql: str) -> list[list]:
    ship(e1, e2)
    ship(e2, e1)
    assert select(e1, sql) == select(e2, sql)
    assert e1.table_digest() == e2.table_digest()
    return select(e1, sql)


def test_inserts_updates_and_deletes_replicate_with_images_of_the_writable_columns(tmp_path: Path) -> None:
    e1, e2 = pair(tmp_path, PEOPLE)
    run(e1, "INSERT INTO people(id, first, last) VALUES (1, 'ann', 'lee'), (2, 'bob', 'ray'), (3, 'cy', 'x')")
    run(e1, "UPDATE people SET last = 'ho', n = n + 1 WHERE id <= 2")
    run(e1, "DELETE FROM people WHERE id = 3")
    assert same(e1, e2, "SELECT id, full, n, loud FROM people ORDER BY id") == [
        [1, "ann ho", 1, "ANN"], [2, "bob ho", 1, "BOB"]]
    inserted, updated, deleted = (changes(r) for r in dml_records(e1)[-3:])
    assert inserted[0] == ("people", "INSERT", "people:1", None, {"id": 1, "first": "ann", "last": "lee", "n": 0})
    assert updated[1] == ("people", "UPDATE", "people:2", {"id": 2, "first": "bob", "last": "ray", "n": 0},
                          {"id": 2, "first": "bob", "last": "ho", "n": 1})
    assert deleted == [("people", "DELETE", "people:3", {"id": 3, "first": "cy", "last": "x", "n": 0}, None)]


def test_a_key_moved_by_an_update_is_a_delete_and_an_insert(tmp_path: Path) -> None:
    e1, e2 = pair(tmp_path, PEOPLE)
    run(e1, "INSERT INTO people(id, first, last) VALUES (1, 'ann', 'lee'), (2, 'bob', 'ray')")
    run(e1, "UPDATE people SET id = id + 10")
    assert [op for _, op, *_ in changes(dml_records(e1)[-1])] == ["DELETE", "INSERT", "DELETE", "INSERT"]
    assert same(e1, e2, "SELECT id, full FROM people ORDER BY id") == [[11, "ann lee"], [12, "bob ray"]]


def test_assigned_keys_and_returning_of_a_virtual_column(tmp_path: Path) -> None:
    e1, e2 = pair(tmp_path, PEOPLE)
    txn = e1.begin()
    result = e1.execute(txn, "INSERT INTO people(first, last) VALUES ('ann', 'lee'), ('bob', 'ray')"
                             " RETURNING id, full, loud")
    e1.commit(txn)
    e1.flush()
    held = same(e1, e2, "SELECT id, full, loud FROM people ORDER BY id")
    assert result.rows == held and [full for _, full, _ in held] == ["ann lee", "bob ray"]
    assert all(row_id % 32 == 1 for row_id, _, _ in held), "ids are assigned in member 1's residue"
    assert result.autoincrement_ids == [row_id for row_id, _, _ in held]


def test_an_upsert_and_a_client_trigger_that_changes_the_row_it_fired_for(tmp_path: Path) -> None:
    e1, e2 = pair(tmp_path, PEOPLE, "CREATE UNIQUE INDEX people_first ON people(first)",
                  "CREATE TRIGGER people_count AFTER INSERT ON people BEGIN"
                  " UPDATE people SET n = n + 10 WHERE id = new.id; END")
    run(e1, "INSERT INTO people(id, first, last) VALUES (1, 'ann', 'lee')")
    run(e2, "INSERT INTO people(id, first, last) VALUES (5, 'ann', 'new') ON CONFLICT(first) DO UPDATE SET"
            " last = excluded.last")
    run(e1, "INSERT INTO people(first, last) VALUES ('cy', 'x')")
    held = same(e1, e2, "SELECT first, full, n FROM people ORDER BY first")
    assert held == [["ann", "ann new", 10], ["cy", "cy x", 10]]


def test_a_table_without_a_key_and_a_virtual_column(tmp_path: Path) -> None:
    e1, e2 = pair(tmp_path, "CREATE TABLE log(what TEXT, size INT AS (length(what)))")
    run(e1, "INSERT INTO log(what) VALUES ('a'), ('bbb')")
    run(e2, "INSERT INTO log(what) VALUES ('cc')")
    run(e1, "UPDATE log SET what = what || '!' WHERE size = 1")
    assert same(e1, e2, "SELECT rowid, what, size FROM log ORDER BY rowid")[0][1:] == ["a!", 2]


@pytest.mark.parametrize("create", [
    "CREATE TABLE w(id TEXT PRIMARY KEY, a INT, b INT AS (a + 1)) WITHOUT ROWID",
    "CREATE TABLE rowid_taken(rowid, _rowid_, oid, id TEXT PRIMARY KEY, b AS (id || 'x'))",
])
def test_virtual_columns_without_a_rowid_to_read_by_are_refused(tmp_path: Path, create: str) -> None:
    (e1, _) = pair(tmp_path)
    with pytest.raises(SqlError, match="declare them STORED"):
        run(e1, create)
    assert select(e1, "SELECT name FROM sqlite_schema WHERE name IN ('w', 'rowid_taken')") == []


def test_a_full_text_index_over_a_table_with_virtual_columns_is_refused(tmp_path: Path) -> None:
    (e1, _) = pair(tmp_path, "CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT, short AS (substr(body, 1, 3)))")
    with pytest.raises(SqlError, match="declare them STORED"):
        run(e1, "CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id')")
    assert select(e1, "SELECT name FROM sqlite_schema WHERE name LIKE 'docs_fts%'") == []
