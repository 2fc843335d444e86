"""Virtual tables on several members (replicaset.storage.virtual): FTS5 with external content
kept by the documented triggers, FTS5 with its own content, R*Tree. After concurrent writes
on every member and the rows shipped everywhere, a MATCH or range query answers the same on
every member, each module's own integrity check passes, and the table digests (the audit's
convergence check) agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.storage import Engine, SqlError
from tests.storage.enginekit import FakeClock, dml_records, changes, open_engine, run, select, ship

SCHEMA = (
    "CREATE TABLE docs(id INTEGER PRIMARY KEY, title TEXT UNIQUE, body TEXT)",
    "CREATE VIRTUAL TABLE docs_fts USING fts5(title, body, content='docs', content_rowid='id')",
    # SQLite's recipe for an external-content index (https://sqlite.org/fts5.html#external_content_tables)
    "CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN"
    " INSERT INTO docs_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
    "CREATE TRIGGER docs_ad AFTER DELETE ON docs BEGIN"
    " INSERT INTO docs_fts(docs_fts, rowid, title, body) VALUES ('delete', old.id, old.title, old.body); END",
    "CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN"
    " INSERT INTO docs_fts(docs_fts, rowid, title, body) VALUES ('delete', old.id, old.title, old.body);"
    " INSERT INTO docs_fts(rowid, title, body) VALUES (new.id, new.title, new.body); END",
    "CREATE VIRTUAL TABLE notes USING fts5(title, body)",
    "CREATE VIRTUAL TABLE geo USING rtree(id, minx, maxx, miny, maxy)",
)

QUERIES = (
    "SELECT rowid, title FROM docs_fts WHERE docs_fts MATCH 'hello' ORDER BY rowid",
    "SELECT rowid, title FROM docs_fts WHERE docs_fts MATCH 'moon OR again' ORDER BY rowid",
    "SELECT rowid, title, body FROM notes WHERE notes MATCH 'hello OR bye' ORDER BY rowid",
    "SELECT id FROM geo WHERE maxx >= 3 AND minx <= 25 ORDER BY id",
    "SELECT id, title, body FROM docs ORDER BY id",
)


@pytest.fixture
def members(tmp_path: Path) -> list[Engine]:
    clock = FakeClock()
    engines = [open_engine(tmp_path / f"m{i}", i, clock) for i in (1, 2, 3)]
    for sql in SCHEMA:
        run(engines[0], sql)
    for other in engines[1:]:
        ship(engines[0], other)
    return engines


def mesh(engines: list[Engine]) -> None:
    for source in engines:
        for target in engines:
            if target is not source:
                ship(source, target)


def answers(engine: Engine) -> list[list[list]]:
    return [select(engine, sql) for sql in QUERIES]


def check_indexes(engine: Engine) -> None:
    """FTS5's integrity check compares an external-content index with its content too."""
    conn = engine.connections.writer
    conn.execute("INSERT INTO docs_fts(docs_fts, rank) VALUES ('integrity-check', 1)")
    conn.execute("INSERT INTO notes(notes) VALUES ('integrity-check')")
    assert conn.execute("SELECT rtreecheck('geo')").fetchone() == ("ok",)


def test_queries_answer_the_same_on_every_member_after_concurrent_writes(members: list[Engine]) -> None:
    a, b, c = members
    run(a, "INSERT INTO docs(title, body) VALUES ('a1', 'hello world')", "INSERT INTO docs(title, body) VALUES ('a2', 'good bye')")
    run(b, "INSERT INTO docs(title, body) VALUES ('b1', 'hello there')")
    run(c, "INSERT INTO docs(id, title, body) VALUES (7, 'c1', 'over the moon')")
    run(a, "INSERT INTO notes(rowid, title, body) VALUES (1, 'n1', 'hello world')")
    run(b, "INSERT INTO notes(rowid, title, body) VALUES (2, 'n2', 'hello moon')")
    run(a, "INSERT INTO geo VALUES (1, 0, 10, 0, 10)")
    run(b, "INSERT INTO geo VALUES (2, 5, 15, 5, 15)")
    run(c, "INSERT INTO geo VALUES (3, 20, 30, 20, 30)")
    mesh(members)
    # Then updates and deletes of rows other members wrote.
    run(b, "UPDATE docs SET body = 'hello again' WHERE title = 'a2'")
    run(c, "DELETE FROM docs WHERE title = 'b1'")
    run(c, "UPDATE notes SET body = 'bye world' WHERE rowid = 1")
    run(a, "DELETE FROM notes WHERE rowid = 2")
    run(b, "UPDATE geo SET minx = 40, maxx = 50 WHERE id = 2")
    run(c, "DELETE FROM geo WHERE id = 1")
    mesh(members)
    expected = answers(a)
    assert expected[0] == [[select(a, "SELECT id FROM docs WHERE title = 'a1'")[0][0], "a1"],
                           [select(a, "SELECT id FROM docs WHERE title = 'a2'")[0][0], "a2"]]
    assert expected[2] == [[1, "n1", "bye world"]]
    assert expected[3] == [[3]], "geo 1 deleted, geo 2 moved out of the range"
    for engine in members:
        assert answers(engine) == expected
        check_indexes(engine)
        assert engine.table_digest() == a.table_digest()


def test_a_row_written_on_two_members_at_once_is_one_row_everywhere_index_included(members: list[Engine]) -> None:
    a, b, _ = members
    run(a, "INSERT INTO notes(rowid, title, body) VALUES (5, 'from a', 'apple')")
    run(b, "INSERT INTO notes(rowid, title, body) VALUES (5, 'from b', 'banana')")
    run(a, "INSERT INTO docs(id, title, body) VALUES (9, 'x', 'apple')")
    run(b, "INSERT INTO docs(id, title, body) VALUES (9, 'y', 'banana')")
    mesh(members)
    winner = select(a, "SELECT title FROM notes WHERE rowid = 5")
    for engine in members:
        assert select(engine, "SELECT title FROM notes WHERE rowid = 5") == winner
        # The loser's words are gone from the index, not only from the row.
        hits = {word: select(engine, "SELECT rowid FROM notes WHERE notes MATCH ?", (word,)) for word in ("apple", "banana")}
        assert sorted(hits.values()) == [[], [[5]]]
        docs_hits = [select(engine, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH ?", (w,)) for w in ("apple", "banana")]
        assert sorted(docs_hits) == [[], [[9]]]
        check_indexes(engine)
        assert engine.table_digest() == a.table_digest()


def test_unique_resolution_keeps_the_external_index_in_step(members: list[Engine]) -> None:
    """Two members take the same UNIQUE title: the loser waits latent (docs/design/README.md §4.2), moved by
    the apply path and the writer's resolution with triggers off; its words must leave the
    index with it, and come back when it does."""
    a, b, _ = members
    run(a, "INSERT INTO docs(id, title, body) VALUES (1, 'same', 'alpha')")
    run(b, "INSERT INTO docs(id, title, body) VALUES (2, 'same', 'beta')")
    mesh(members)
    visible = select(a, "SELECT id FROM docs")
    assert len(visible) == 1
    for engine in members:
        assert select(engine, "SELECT id FROM docs") == visible
        check_indexes(engine)
    run(a, ("UPDATE docs SET title = 'moved' WHERE id = ?", [visible[0][0]]))
    mesh(members)
    for engine in members:
        assert select(engine, "SELECT id, title FROM docs ORDER BY id") == select(a, "SELECT id, title FROM docs ORDER BY id")
        assert len(select(engine, "SELECT id FROM docs")) == 2, "the latent row is back"
        assert select(engine, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'alpha OR beta' ORDER BY rowid") == [[1], [2]]
        check_indexes(engine)
        assert engine.table_digest() == a.table_digest()


def test_only_the_rows_replicate_not_the_shadow_tables(members: list[Engine]) -> None:
    a = members[0]
    run(a, "INSERT INTO notes(rowid, title, body) VALUES (3, 't', 'words here')", "INSERT INTO geo VALUES (4, 1, 2, 3, 4)")
    run(a, "INSERT INTO docs(id, title, body) VALUES (4, 'd', 'more words')")
    rows = [row for record in dml_records(a) for row in changes(record)]
    assert [(table, op, key) for table, op, key, _, _ in rows] == [
        ("notes", "INSERT", "notes:3"), ("geo", "INSERT", "geo:4"), ("docs", "INSERT", "docs:4")]
    assert rows[0][4] == {"rowid": 3, "title": "t", "body": "words here"}
    assert rows[1][4] == {"id": 4, "minx": 1.0, "maxx": 2.0, "miny": 3.0, "maxy": 4.0}


def test_the_digest_sees_an_index_out_of_step_with_its_rows(members: list[Engine]) -> None:
    a, b, _ = members
    run(a, "INSERT INTO docs(id, title, body) VALUES (1, 't', 'hello')")
    mesh(members)
    assert a.table_digest() == b.table_digest()
    # A stray index entry written behind the engine's back (the apply connection is not defensive).
    b.connections.applier.execute("INSERT INTO docs_fts(rowid, title, body) VALUES (1, 't', 'bogus')")
    assert a.table_digest()["docs_fts"] != b.table_digest()["docs_fts"]
    assert a.table_digest()["docs"] == b.table_digest()["docs"]


@pytest.mark.parametrize(("statement", "error"), [
    ("CREATE VIRTUAL TABLE gone USING fts5(x, content='')", "contentless FTS5 table 'gone'"),
    ("CREATE VIRTUAL TABLE old USING fts4(x)", "module 'fts4', which does not replicate"),
    ("INSERT INTO notes_data(id, block) VALUES (99, x'00')", "shadow table of virtual table 'notes'.*write to 'notes'"),
    ("DELETE FROM geo_rowid", "shadow table of virtual table 'geo'"),
])
def test_what_cannot_replicate_is_refused_and_leaves_nothing(members: list[Engine], statement: str, error: str) -> None:
    a = members[0]
    before = select(a, "SELECT name FROM sqlite_schema ORDER BY name")
    with pytest.raises(SqlError, match=error):
        run(a, statement)
    assert select(a, "SELECT name FROM sqlite_schema ORDER BY name") == before


def test_a_quorum_write_to_virtual_tables_is_captured_then_applied_as_its_row(members: list[Engine]) -> None:
    a, b, _ = members
    txn = a.begin(explicit=True, quorum=True)
    a.execute(txn, "INSERT INTO notes(rowid, title, body) VALUES (8, 'q', 'quorum words')")
    a.execute(txn, "INSERT INTO docs(id, title, body) VALUES (8, 'q', 'quorum words')")
    captured = a.capture(txn)
    a.flush()
    assert select(a, "SELECT count(*) FROM notes WHERE notes MATCH 'quorum'") == [[0]], "captured, then rolled back"
    assert [(r.table, r.key) for r in captured.rows] == [("notes", "notes:8"), ("docs", "docs:8")]
    a.commit_captured(captured, txn_id=0x77, min_stamp=0)
    a.flush()
    ship(a, b)
    for engine in (a, b):
        assert select(engine, "SELECT rowid FROM notes WHERE notes MATCH 'quorum'") == [[8]]
        # The decided row reaches SQLite through the apply path, triggers off, on its writer too.
        assert select(engine, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'quorum'") == [[8]]
        check_indexes(engine)


def test_rtree_rows_carry_what_the_module_stores(members: list[Engine]) -> None:
    """R*Tree keeps 32-bit floats: the row read back, not the statement's values, replicates,
    so every member stores the same coordinates."""
    a, b, _ = members
    run(a, "INSERT INTO geo VALUES (1, 0.1, 0.30000001, 0, 1)")
    ship(a, b)
    assert select(a, "SELECT * FROM geo") == select(b, "SELECT * FROM geo") != [[1, 0.1, 0.30000001, 0.0, 1.0]]


def test_replace_on_a_content_table_is_refused_an_upsert_keeps_the_index(members: list[Engine]) -> None:
    """SQLite's REPLACE removes the old row without firing its DELETE trigger (recursive
    triggers are off), so the index of its writer would keep the old words while the
    appliers take them out: refused, naming the upsert that does the same correctly."""
    a, b, _ = members
    run(a, "INSERT INTO docs(id, title, body) VALUES (1, 't', 'old words')")
    for statement in ("INSERT OR REPLACE INTO docs(id, title, body) VALUES (1, 't', 'new words')",
                      "REPLACE INTO docs(id, title, body) VALUES (1, 't', 'new words')"):
        with pytest.raises(SqlError, match="use INSERT ... ON CONFLICT DO UPDATE"):
            run(a, statement)
    run(a, "INSERT INTO docs(id, title, body) VALUES (1, 't', 'new words')"
           " ON CONFLICT(id) DO UPDATE SET body = excluded.body")
    run(a, "INSERT OR REPLACE INTO notes(rowid, title, body) VALUES (1, 'n', 'own content replaces fine')")
    mesh(members)
    for engine in (a, b):
        assert select(engine, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'old'") == []
        assert select(engine, "SELECT rowid FROM docs_fts WHERE docs_fts MATCH 'new'") == [[1]]
        check_indexes(engine)
        assert engine.table_digest() == a.table_digest()
