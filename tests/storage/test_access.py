"""`Engine.access`: the tables a client text reads and writes, compiled once per text and
schema (docs/access-control.md)."""

import pytest

from replicaset.storage import SqlError
from replicaset.storage.access import UNIVERSE
from tests.storage.enginekit import FakeClock, open_engine, run, select


@pytest.fixture
def engine(tmp_path):
    e = open_engine(tmp_path / "e1", 1, FakeClock())
    run(e, "CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT, balance INTEGER)")
    run(e, "CREATE TABLE audit(id INTEGER PRIMARY KEY, note TEXT)")
    run(e, "CREATE TABLE child(id INTEGER PRIMARY KEY, account INTEGER REFERENCES accounts(id) ON DELETE CASCADE)")
    return e


@pytest.mark.parametrize(
    ("sql", "reads", "writes"),
    [
        ("SELECT * FROM accounts", {"accounts"}, set()),
        ("SELECT count(*) FROM accounts", {"accounts"}, set()),
        ("SELECT 1", set(), set()),
        ("INSERT INTO accounts VALUES (1, 'a', 0)", set(), {"accounts"}),
        ("INSERT INTO audit SELECT id, owner FROM accounts", {"accounts"}, {"audit"}),
        # Tarantool too needs read for an UPDATE or a DELETE that looks rows up.
        ("UPDATE accounts SET balance = 1 WHERE id = 1", {"accounts"}, {"accounts"}),
        ("DELETE FROM accounts", set(), {"accounts", "child"}),  # the cascade writes child
        ("INSERT INTO child VALUES (1, 1)", set(), {"child"}),  # the key check reads for the constraint's creator
        ("PRAGMA table_info(accounts)", {"accounts"}, set()),
        ("PRAGMA user_version", {UNIVERSE}, set()),
        ("SELECT 1 FROM accounts; INSERT INTO audit VALUES (1, 'x')", {"accounts"}, {"audit"}),
    ],
)
def test_reads_and_writes(engine, sql, reads, writes) -> None:
    access = engine.access(sql)
    assert (set(access.reads), set(access.writes), access.ddl, access.opaque) == (reads, writes, None, False)


@pytest.mark.parametrize(
    ("sql", "verb", "reads"),
    [
        ("CREATE TABLE z(id INTEGER PRIMARY KEY)", "Create", set()),
        ("CREATE INDEX i ON accounts(owner)", "Create", set()),
        ("DROP TABLE audit", "Drop", set()),
        ("ALTER TABLE audit ADD COLUMN x", "Alter", set()),
        ("CREATE TABLE copy AS SELECT * FROM accounts", "Create", {"accounts"}),
    ],
)
def test_schema_changes_are_ddl(engine, sql, verb, reads) -> None:
    access = engine.access(sql)
    assert (access.ddl, set(access.reads), access.writes) == (verb, reads, ())
    assert select(engine, "SELECT count(*) FROM sqlite_schema WHERE name IN ('z', 'i', 'copy')") == [[0]], "never run"


def test_a_tail_naming_what_the_text_creates_is_opaque(engine) -> None:
    access = engine.access("CREATE TABLE n(id INTEGER PRIMARY KEY); INSERT INTO n VALUES (1)")
    assert access.ddl == "Create" and access.opaque


@pytest.mark.parametrize("sql", ["SELECT * FROM nowhere", "INSERT INTO audit VALUES (1, 'x'); SELECT * FROM nowhere"])
def test_a_text_that_does_not_compile_raises_as_running_it_would(engine, sql) -> None:
    with pytest.raises(SqlError, match="no such table: nowhere"):
        engine.access(sql)


def test_views_and_triggers_read_for_their_creator_but_their_writes_count(engine) -> None:
    run(engine, "CREATE VIEW rich AS SELECT owner FROM accounts WHERE balance > 100")
    assert set(engine.access("SELECT * FROM rich").reads) == {"rich"}
    before = engine.access("INSERT INTO accounts VALUES (2, 'b', 0)")
    assert before.writes == ("accounts",)
    run(engine, "CREATE TRIGGER log_insert AFTER INSERT ON accounts BEGIN "
                "INSERT INTO audit(note) SELECT owner FROM accounts WHERE id = new.id; END")
    after = engine.access("INSERT INTO accounts VALUES (2, 'b', 0)")
    assert after is not before, "a committed DDL empties the cache"
    assert (set(after.reads), set(after.writes)) == (set(), {"accounts", "audit"})


def test_an_entry_is_kept_with_its_verdicts_until_the_schema_moves(engine) -> None:
    access = engine.access("SELECT * FROM accounts")
    access.verdicts["bob"] = None
    assert engine.access("SELECT * FROM accounts") is access
    run(engine, "CREATE TABLE other(id INTEGER PRIMARY KEY)")
    assert engine.access("SELECT * FROM accounts").verdicts == {}
    assert engine.access("SELECT * FROM other").reads == ("other",), "the new table is known at once"
