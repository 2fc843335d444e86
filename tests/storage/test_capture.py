"""Capture: every committed client change becomes exactly the WAL rows that reproduce it
(docs/design/README.md §4.1, 4.6 and §5), and refused or failed statements leave nothing behind."""

from pathlib import Path

import pytest

from replicaset.storage import Engine, SqlError
from replicaset.storage.rows import DmlPayload
from tests.storage.enginekit import (
    FakeClock,
    b64,
    changes,
    ddl,
    dml_records,
    open_engine,
    run,
    select,
    ship,
    versions,
    wal_records,
)
from wal import RecordType, VClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(tmp_path: Path, clock: FakeClock) -> Engine:
    e = open_engine(tmp_path / "e1", 1, clock, local_tables={"scratch"})
    run(e, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT UNIQUE, n INTEGER DEFAULT 0)")
    return e


def only_record(committed):
    assert committed is not None
    [record] = committed.records
    return record


# ------------------------------------------------------------------ the basic operations


def test_insert_is_captured_with_its_full_new_image(engine: Engine) -> None:
    record = only_record(run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann'), (2, 'bob')"))
    assert (record.type, record.origin, record.lsn) == (RecordType.DML, 1, 2)
    assert changes(record) == [
        ("t", "INSERT", "t:1", None, {"id": 1, "name": "ann", "n": 0}),
        ("t", "INSERT", "t:2", None, {"id": 2, "name": "bob", "n": 0}),
    ]


def test_update_is_captured_with_full_old_and_new_images(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5)")
    record = only_record(run(engine, "UPDATE t SET n = n + 1 WHERE id = 1"))
    assert changes(record) == [
        ("t", "UPDATE", "t:1", {"id": 1, "name": "ann", "n": 5}, {"id": 1, "name": "ann", "n": 6}),
    ]


def test_delete_is_captured_with_its_full_old_image(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5), (2, 'bob', 6)")
    record = only_record(run(engine, "DELETE FROM t WHERE id = 2"))
    assert changes(record) == [("t", "DELETE", "t:2", {"id": 2, "name": "bob", "n": 6}, None)]


def test_delete_of_every_row_is_captured_row_by_row(engine: Engine) -> None:
    # `DELETE FROM t` without WHERE may take SQLite's truncate shortcut, which skips hooks
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5), (2, 'bob', 6)")
    record = only_record(run(engine, "DELETE FROM t"))
    assert [(op, key) for _, op, key, _, _ in changes(record)] == [("DELETE", "t:1"), ("DELETE", "t:2")]


def test_primary_key_update_is_a_delete_of_the_old_key_and_an_insert_of_the_new(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5)")
    record = only_record(run(engine, "UPDATE t SET id = 10 WHERE id = 1"))
    assert changes(record) == [
        ("t", "DELETE", "t:1", {"id": 1, "name": "ann", "n": 5}, None),
        ("t", "INSERT", "t:10", None, {"id": 10, "name": "ann", "n": 5}),
    ]
    assert versions(engine, "t")["t:1"][2] == 1  # a tombstone for the old key
    assert versions(engine, "t")["t:10"][2] == 0


def test_insert_or_replace_of_an_existing_key_is_a_delete_and_an_insert(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5)")
    record = only_record(run(engine, "INSERT OR REPLACE INTO t VALUES (1, 'ann2', 7)"))
    assert changes(record) == [
        ("t", "DELETE", "t:1", {"id": 1, "name": "ann", "n": 5}, None),
        ("t", "INSERT", "t:1", None, {"id": 1, "name": "ann2", "n": 7}),
    ]


def test_insert_or_replace_that_evicts_a_row_on_a_unique_column_captures_the_eviction(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5)")
    record = only_record(run(engine, "INSERT OR REPLACE INTO t VALUES (2, 'ann', 7)"))
    assert changes(record) == [
        ("t", "DELETE", "t:1", {"id": 1, "name": "ann", "n": 5}, None),
        ("t", "INSERT", "t:2", None, {"id": 2, "name": "ann", "n": 7}),
    ]
    assert select(engine, "SELECT * FROM t") == [[2, "ann", 7]]


def test_update_or_replace_onto_an_existing_key_captures_the_evicted_row(engine: Engine) -> None:
    run(engine, "INSERT INTO t VALUES (1, 'ann', 5), (2, 'bob', 6)")
    record = only_record(run(engine, "UPDATE OR REPLACE t SET id = 2 WHERE id = 1"))
    assert changes(record) == [
        ("t", "DELETE", "t:2", {"id": 2, "name": "bob", "n": 6}, None),
        ("t", "DELETE", "t:1", {"id": 1, "name": "ann", "n": 5}, None),
        ("t", "INSERT", "t:2", None, {"id": 2, "name": "ann", "n": 5}),
    ]
    assert select(engine, "SELECT * FROM t") == [[2, "ann", 5]]


def test_rows_written_by_a_trigger_are_captured_in_the_same_record(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, "CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT)")
    run(e1, "CREATE TABLE audit(seq INTEGER PRIMARY KEY, item_id INTEGER, what TEXT)")
    run(
        e1,
        "CREATE TRIGGER item_audit AFTER INSERT ON item BEGIN"
        " INSERT INTO audit(seq, item_id, what) VALUES (new.id * 100, new.id, 'created'); END",
    )
    record = only_record(run(e1, "INSERT INTO item VALUES (7, 'lamp')"))
    assert changes(record) == [
        ("item", "INSERT", "item:7", None, {"id": 7, "name": "lamp"}),
        ("audit", "INSERT", "audit:700", None, {"seq": 700, "item_id": 7, "what": "created"}),
    ]
    # the member applying it runs no trigger: the audit row arrives once, from the record
    ship(e1, e2)
    assert select(e2, "SELECT * FROM audit") == [[700, 7, "created"]]
    assert e2.table_digest() == e1.table_digest()


def test_foreign_key_cascades_are_captured(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, "CREATE TABLE parent(id INTEGER PRIMARY KEY)")
    run(
        e1,
        "CREATE TABLE child(id INTEGER PRIMARY KEY,"
        " parent_id INTEGER REFERENCES parent(id) ON DELETE CASCADE ON UPDATE CASCADE)",
    )
    run(e1, "INSERT INTO parent VALUES (1), (2)", "INSERT INTO child VALUES (10, 1), (11, 1), (20, 2)")
    record = only_record(run(e1, "DELETE FROM parent WHERE id = 1"))
    assert changes(record) == [
        ("parent", "DELETE", "parent:1", {"id": 1}, None),
        ("child", "DELETE", "child:10", {"id": 10, "parent_id": 1}, None),
        ("child", "DELETE", "child:11", {"id": 11, "parent_id": 1}, None),
    ]
    record = only_record(run(e1, "UPDATE parent SET id = 3 WHERE id = 2"))
    assert ("child", "UPDATE", "child:20", {"id": 20, "parent_id": 2}, {"id": 20, "parent_id": 3}) in changes(record)
    # the applying member has foreign keys off: only the captured rows change it
    ship(e1, e2)
    assert select(e2, "SELECT * FROM child") == [[20, 3]]
    assert e2.table_digest() == e1.table_digest()


def test_a_foreign_key_violation_is_refused_on_the_writer(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    run(e1, "CREATE TABLE parent(id INTEGER PRIMARY KEY)")
    run(e1, "CREATE TABLE child(id INTEGER PRIMARY KEY, parent_id INTEGER REFERENCES parent(id))")
    txn = e1.begin()
    with pytest.raises(SqlError, match="FOREIGN KEY"):
        e1.execute(txn, "INSERT INTO child VALUES (1, 99)")
    assert e1.commit(txn) is None
    e1.flush()
    assert select(e1, "SELECT * FROM child") == []


def test_drop_table_whose_cascade_changes_another_table_is_refused(tmp_path: Path, clock: FakeClock) -> None:
    """The DDL row replays as written on peers, where foreign keys are off: a cascade into
    another table would happen on the origin only. So such a DROP is refused, and the set
    stays convergent; deleting the parent rows first (captured as rows) then works."""
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, "CREATE TABLE parent(id TEXT PRIMARY KEY)")
    run(e1, "CREATE TABLE child(id INTEGER PRIMARY KEY, parent_id TEXT REFERENCES parent(id) ON DELETE CASCADE)")
    run(e1, "INSERT INTO parent VALUES ('a')", "INSERT INTO child VALUES (10, 'a')")
    ship(e1, e2)
    with pytest.raises(SqlError, match="also changes rows"):
        run(e1, "DROP TABLE parent")
    assert select(e1, "SELECT * FROM child") == [[10, "a"]]
    run(e1, "DELETE FROM parent")
    run(e1, "DROP TABLE parent")
    ship(e1, e2)
    assert select(e2, "SELECT * FROM child") == select(e1, "SELECT * FROM child") == []
    assert e2.table_digest() == e1.table_digest()


# ------------------------------------------------------------------ key shapes


def test_without_rowid_composite_key_table_is_captured_by_column_name(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    run(e1, "CREATE TABLE w(region TEXT, customer INTEGER, total REAL, PRIMARY KEY (region, customer)) WITHOUT ROWID")
    key = "w:c:" + b64(1) + ":" + b64("eu")  # columns sorted by name: customer, region
    new_key = "w:c:" + b64(2) + ":" + b64("eu")
    assert changes(only_record(run(e1, "INSERT INTO w VALUES ('eu', 1, 9.5)"))) == [
        ("w", "INSERT", key, None, {"region": "eu", "customer": 1, "total": 9.5}),
    ]
    assert changes(only_record(run(e1, "UPDATE w SET total = 10.0"))) == [
        ("w", "UPDATE", key, {"region": "eu", "customer": 1, "total": 9.5}, {"region": "eu", "customer": 1, "total": 10.0}),
    ]
    assert changes(only_record(run(e1, "UPDATE w SET customer = 2"))) == [
        ("w", "DELETE", key, {"region": "eu", "customer": 1, "total": 10.0}, None),
        ("w", "INSERT", new_key, None, {"region": "eu", "customer": 2, "total": 10.0}),
    ]
    assert changes(only_record(run(e1, "DELETE FROM w"))) == [
        ("w", "DELETE", new_key, {"region": "eu", "customer": 2, "total": 10.0}, None),
    ]


@pytest.mark.parametrize(
    ("create", "value", "key"),
    [
        ("CREATE TABLE k(id TEXT PRIMARY KEY, v)", "x", "k:b64:" + b64("x")),
        ("CREATE TABLE k(id BLOB PRIMARY KEY, v)", b"\x00\x01", "k:b64:" + b64(b"\x00\x01")),
        ("CREATE TABLE k(id REAL PRIMARY KEY, v)", 1.5, "k:b64:" + b64(1.5)),
        ("CREATE TABLE k(id INTEGER PRIMARY KEY, v) ", 3, "k:3"),
        ("CREATE TABLE k(id INTEGER NOT NULL PRIMARY KEY, v) WITHOUT ROWID", 3, "k:3"),
    ],
    ids=["text", "blob", "real", "integer", "integer-without-rowid"],
)
def test_every_operation_on_every_key_shape_is_captured(
    tmp_path: Path, clock: FakeClock, create: str, value: object, key: str
) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, create)
    assert changes(only_record(run(e1, ("INSERT INTO k VALUES (?, 'a')", [value])))) == [
        ("k", "INSERT", key, None, {"id": value, "v": "a"}),
    ]
    assert changes(only_record(run(e1, ("UPDATE k SET v = 'b' WHERE id IS ?", [value])))) == [
        ("k", "UPDATE", key, {"id": value, "v": "a"}, {"id": value, "v": "b"}),
    ]
    ship(e1, e2)
    assert select(e2, "SELECT id, v FROM k") == [[value, "b"]]
    assert changes(only_record(run(e1, ("DELETE FROM k WHERE id IS ?", [value])))) == [
        ("k", "DELETE", key, {"id": value, "v": "b"}, None),
    ]
    ship(e1, e2)
    assert select(e2, "SELECT id, v FROM k") == []
    assert versions(e2, "k") == versions(e1, "k")
    assert versions(e1, "k")[key][2] == 1


@pytest.mark.parametrize(
    ("create", "seed", "statement"),
    [
        ("CREATE TABLE k(id TEXT PRIMARY KEY, v)", None, "INSERT INTO k VALUES (NULL, 'a')"),
        ("CREATE TABLE k(a TEXT, b INT, v, PRIMARY KEY (a, b))", None, "INSERT INTO k VALUES ('x', NULL, 'a')"),
        ("CREATE TABLE k(id TEXT PRIMARY KEY, v)", "INSERT INTO k VALUES ('x', 'a')", "UPDATE k SET id = NULL"),
        ("CREATE TABLE k(id TEXT PRIMARY KEY, v)", "INSERT INTO k VALUES ('x', 'a')",
         "INSERT OR REPLACE INTO k VALUES (NULL, 'b')"),
    ],
    ids=["insert", "composite", "update", "insert-or-replace"],
)
def test_a_null_primary_key_value_is_refused_and_nothing_is_written(
    tmp_path: Path, clock: FakeClock, create: str, seed: str | None, statement: str
) -> None:
    """SQLite lets a rowid table's declared key be NULL; such a row has no key that means
    the same row on every member, so the write is refused, naming the table."""
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, create)
    if seed is not None:
        run(e1, seed)
    ship(e1, e2)
    rows_before, vclock_before = select(e1, "SELECT * FROM k"), e1.vclock
    with pytest.raises(SqlError, match="a NULL primary-key value in table 'k' cannot be replicated"):
        run(e1, statement)
    assert select(e1, "SELECT * FROM k") == rows_before == ([] if seed is None else [["x", "a"]])
    assert e1.vclock == vclock_before
    assert ship(e1, e2) == 0
    run(e1, "INSERT INTO k VALUES ('y', 2, 'c')" if "b INT" in create else "INSERT INTO k VALUES ('y', 'c')")
    assert ship(e1, e2) == 1, "the engine takes writes after the refusal"
    assert e1.table_digest() == e2.table_digest()


@pytest.mark.parametrize("kind", ["VIRTUAL", "STORED"])
@pytest.mark.parametrize("key_type", ["INTEGER", "TEXT"])
def test_tables_with_generated_columns_take_writes_and_replicate(
    tmp_path: Path, clock: FakeClock, kind: str, key_type: str
) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, f"CREATE TABLE g(id {key_type} PRIMARY KEY, a INT, twice INT GENERATED ALWAYS AS (a * 2) {kind}, c TEXT)")
    run(e1, "INSERT INTO g(id, a, c) VALUES ('7', 5, 'x')")
    run(e1, "UPDATE g SET a = 6")
    ship(e1, e2)
    assert select(e1, "SELECT a, twice, c FROM g") == [[6, 12, "x"]]
    assert select(e2, "SELECT * FROM g") == select(e1, "SELECT * FROM g")
    assert e2.table_digest() == e1.table_digest()


# ------------------------------------------------------------------ failures leave nothing


def test_a_failed_statement_leaves_nothing_captured_and_nothing_in_the_table(engine: Engine) -> None:
    txn = engine.begin(explicit=True)
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    with pytest.raises(SqlError, match="UNIQUE"):
        engine.execute(txn, "INSERT INTO t(id, name) VALUES (2, 'bob'), (3, 'ann')")
    committed = engine.commit(txn)
    engine.flush()
    assert changes(only_record(committed)) == [("t", "INSERT", "t:1", None, {"id": 1, "name": "ann", "n": 0})]
    assert select(engine, "SELECT id FROM t") == [[1]]
    assert set(versions(engine, "t")) == {"t:1"}


def test_the_transaction_continues_after_a_failed_statement(engine: Engine) -> None:
    txn = engine.begin(explicit=True)
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    with pytest.raises(SqlError, match="UNIQUE"):
        engine.execute(txn, "INSERT INTO t(id, name) VALUES (2, 'bob'), (3, 'ann')")
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (4, 'cid')")
    committed = engine.commit(txn)
    engine.flush()
    assert [key for _, _, key, _, _ in changes(only_record(committed))] == ["t:1", "t:4"]
    assert select(engine, "SELECT id FROM t") == [[1], [4]]


def test_the_engine_keeps_taking_writes_after_a_failed_statement(engine: Engine) -> None:
    run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    txn = engine.begin()
    with pytest.raises(SqlError, match="UNIQUE"):
        engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'again')")
    engine.rollback(txn)
    engine.flush()
    run(engine, "INSERT INTO t(id, name) VALUES (2, 'bob')")
    assert select(engine, "SELECT id FROM t") == [[1], [2]]


def test_an_autocommit_transaction_never_logs_rows_the_table_does_not_hold(engine: Engine) -> None:
    txn = engine.begin()
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    with pytest.raises(SqlError):
        engine.execute(txn, "INSERT INTO t(id, name) VALUES (2, 'ann')")
    committed = engine.commit(txn)
    engine.flush()
    logged = {key for r in (committed.records if committed else ()) for _, _, key, _, _ in changes(r)}
    held = {f"t:{i}" for (i,) in select(engine, "SELECT id FROM t")}
    assert logged == held


def test_a_statement_that_changes_nothing_produces_no_record_and_no_lsn(engine: Engine) -> None:
    before = (engine.vclock.copy(), len(wal_records(engine)))
    assert run(engine, "UPDATE t SET n = 1 WHERE id = 999", "DELETE FROM t WHERE id = 998") is None
    assert run(engine, "SELECT count(*) FROM t") is None
    assert (engine.vclock, len(wal_records(engine))) == before
    committed = run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    assert only_record(committed).lsn == before[0].get(1) + 1


def test_rollback_leaves_nothing(engine: Engine) -> None:
    txn = engine.begin(explicit=True)
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    engine.rollback(txn)
    engine.flush()
    assert select(engine, "SELECT * FROM t") == []
    assert versions(engine, "t") == {}
    assert engine.vclock == VClock({1: 1})
    assert only_record(run(engine, "INSERT INTO t(id, name) VALUES (2, 'bob')")).lsn == 2


def test_readers_see_a_commit_only_after_flush(engine: Engine) -> None:
    txn = engine.begin()
    engine.execute(txn, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    committed = engine.commit(txn)
    assert committed is not None and engine.pending_vclock == VClock({1: 2})
    assert select(engine, "SELECT * FROM t") == []
    assert engine.vclock == VClock({1: 1})
    engine.flush()
    assert select(engine, "SELECT id FROM t") == [[1]]
    assert engine.vclock == VClock({1: 2})


# ------------------------------------------------------------------ local and temp tables


def test_local_table_rows_get_origin_0_and_leave_the_instance_lsn_alone(engine: Engine) -> None:
    ddl_committed = run(engine, "CREATE TABLE scratch(note TEXT)")  # no primary key: fine, it is local
    assert [(r.type, r.origin) for r in ddl_committed.records] == [(RecordType.DDL, 0)]
    record = only_record(run(engine, "INSERT INTO scratch VALUES ('x')"))
    assert (record.origin, record.lsn) == (0, 2)
    assert [(t, op) for t, op, *_ in changes(record)] == [("scratch", "INSERT")]
    assert engine.vclock.get(1) == 1
    # a transaction touching both gets one record of each origin, and only ours advances our LSN
    committed = run(engine, "INSERT INTO scratch VALUES ('y')", "INSERT INTO t(id, name) VALUES (1, 'ann')")
    assert sorted((r.origin, r.lsn) for r in committed.records) == [(0, 3), (1, 2)]
    assert engine.vclock == VClock({0: 3, 1: 2})
    assert "scratch" not in engine.table_digest()
    assert versions(engine, "scratch") == {}


def test_a_read_of_a_temp_table_is_left_to_the_writer_which_holds_it(engine: Engine) -> None:
    """TEMP tables live on the writer connection; the reader has none: a read of one is
    handed back (None) for the writer to run, and a table missing everywhere stays an error."""
    run(engine, "CREATE TEMP TABLE tmp(a)")
    run(engine, "INSERT INTO tmp VALUES (1)")
    assert engine.query("SELECT a FROM tmp") is None
    assert engine.query("SELECT a FROM temp.tmp") is None
    txn = engine.begin()
    assert engine.execute(txn, "SELECT a FROM tmp").rows == [[1]]
    engine.rollback(txn)
    with pytest.raises(SqlError, match="no such table: nowhere"):
        engine.query("SELECT * FROM nowhere")


def test_temp_tables_produce_nothing(engine: Engine) -> None:
    before = (engine.vclock.copy(), len(wal_records(engine)))
    assert run(engine, "CREATE TEMP TABLE tmp(a)") is None
    assert run(engine, "INSERT INTO tmp VALUES (1), (2)") is None
    assert run(engine, "UPDATE tmp SET a = a + 1") is None
    assert run(engine, "DELETE FROM tmp WHERE a = 2") is None
    assert (engine.vclock, len(wal_records(engine))) == before


# ------------------------------------------------------------------ refused statements


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("BEGIN", "transaction control"),
        ("COMMIT", "transaction control"),
        ("ROLLBACK", "transaction control"),
        ("SAVEPOINT sp", "transaction control"),
        ("RELEASE sp", "transaction control"),
        # The engine's own statements, which it runs from the statement cache (not authorized
        # again there): the same text from a client is refused by its text.
        ("SAVEPOINT rs_txn", "transaction control"),
        ("RELEASE rs_txn", "transaction control"),
        ("ROLLBACK TO rs_stmt", "transaction control"),
        ("  /* x */ release rs_stmt;", "transaction control"),
        ("BEGIN IMMEDIATE", "transaction control"),
        ("END", "transaction control"),
        ("INSERT OR ROLLBACK INTO t(id, name) VALUES (1, 'x')", "ROLLBACK as a conflict resolution"),
        ("CREATE TABLE r(id INTEGER PRIMARY KEY ON CONFLICT ROLLBACK)", "ROLLBACK as a conflict resolution"),
        ("CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT RAISE(ROLLBACK, 'no'); END",
         "ROLLBACK as a conflict resolution"),
        ("CREATE TEMP TRIGGER mine BEFORE INSERT ON main.t BEGIN SELECT 1; END", "TEMP triggers"),
        ("CREATE TRIGGER rs_auto_9 AFTER INSERT ON t BEGIN SELECT 1; END", "the engine's"),
        ("SELECT rs_next_id('t')", "function rs_next_id is the engine's own"),
        ("INSERT INTO t(id, name) VALUES (rs_next_id('t'), 'x')", "function rs_next_id is the engine's own"),
        ("ATTACH DATABASE ':memory:' AS other", "ATTACH"),
        ("DETACH DATABASE other", "DETACH"),
        ("VACUUM", "VACUUM"),
        ("CREATE TABLE copied AS SELECT * FROM t", "AS SELECT is refused"),
        ("PRAGMA foreign_keys = OFF", "PRAGMA foreign_keys"),
        ("PRAGMA foreign_keys(0)", "PRAGMA foreign_keys"),
        ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
        ("INSERT INTO _rs_vclock VALUES (9, 9)", "_rs_vclock"),
        ("DELETE FROM _rs_version", "_rs_version"),
        ("UPDATE _rs_meta SET value = 1", "_rs_meta"),
        ("DROP TABLE _rs_version", "_rs_version"),
        ("CREATE INDEX x ON _rs_version(hlc)", "_rs_version"),
    ],
)
def test_refused_statements_raise_a_clear_sql_error_and_change_nothing(
    engine: Engine, sql: str, message: str
) -> None:
    run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    digest, vclock = engine.table_digest(), engine.vclock.copy()
    txn = engine.begin()
    with pytest.raises(SqlError, match=message):
        engine.execute(txn, sql)
    assert engine.commit(txn) is None
    engine.flush()
    assert (engine.table_digest(), engine.vclock) == (digest, vclock)
    assert select(engine, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name = 't'") == [["t"]]
    assert select(engine, "SELECT count(*) FROM _rs_vclock") == [[1]]


@pytest.mark.parametrize(
    "sql", ["VACUUM", "BEGIN", "SAVEPOINT sp", "PRAGMA foreign_keys = OFF", "DELETE FROM _rs_version"]
)
def test_the_engine_keeps_working_after_a_refused_statement(engine: Engine, sql: str) -> None:
    txn = engine.begin()
    with pytest.raises(SqlError):
        engine.execute(txn, sql)
    engine.rollback(txn)
    engine.flush()
    committed = run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    assert only_record(committed).lsn == 2
    assert select(engine, "SELECT id FROM t") == [[1]]


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("/* tidy up */ ALTER TABLE t RENAME TO t2", ["my t", "t2"]),
        ("-- tidy up\nALTER TABLE t RENAME COLUMN n TO m", ["my t", "t"]),
        ('ALTER TABLE "my t" RENAME TO t3', ["t", "t3"]),
        ("alter   table\n t\n  drop column n", ["my t", "t"]),
    ],
)
def test_rename_and_drop_column_run_as_ddl_rows_however_they_are_written(
        engine: Engine, sql: str, tables: list[str]) -> None:
    """Refused until issue 36: now a DDL row like any other (docs/decisions.md, "Renames
    and dropped columns follow the schema id")."""
    run(engine, 'CREATE TABLE "my t"(id INTEGER PRIMARY KEY)')
    committed = run(engine, sql)
    assert ddl(only_record(committed)).sql == sql
    assert select(engine, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE '\\_rs\\_%' "
                          "ESCAPE '\\' ORDER BY name") == [[t] for t in tables]


def test_reading_pragmas_are_allowed(engine: Engine) -> None:
    txn = engine.begin()
    assert engine.execute(txn, "PRAGMA foreign_keys").rows == [[1]]
    engine.rollback(txn)


def test_reading_pragma_with_an_argument_is_allowed(engine: Engine) -> None:
    txn = engine.begin()
    result = engine.execute(txn, "PRAGMA table_info(t)")
    engine.rollback(txn)
    assert [row[1] for row in result.rows] == ["id", "name", "n"]


# ------------------------------------------------------------------ DDL


def test_ddl_is_one_record_with_the_sql_as_written_and_the_schema_hashes(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    first = only_record(run(e1, "CREATE TABLE a(id INTEGER PRIMARY KEY)"))
    sql = "CREATE INDEX IF NOT EXISTS a_id ON a(id)"
    second = only_record(run(e1, sql))
    third = only_record(run(e1, "ALTER TABLE a ADD COLUMN note TEXT DEFAULT 'none'"))
    payloads = [ddl(r) for r in (first, second, third)]
    assert [(r.type, r.origin, r.lsn) for r in (first, second, third)] == [(RecordType.DDL, 1, i) for i in (1, 2, 3)]
    assert payloads[1].sql == sql
    assert payloads[0].hash_before != payloads[0].hash_after
    assert payloads[1].hash_before == payloads[0].hash_after
    assert payloads[2].hash_before == payloads[1].hash_after
    assert len({p.hash_after for p in payloads}) == 3
    assert [p.hlc for p in payloads] == [r.txn_id for r in (first, second, third)]
    # data rows carry the schema id: the (origin, lsn) of the last DDL
    data = only_record(run(e1, "INSERT INTO a(id) VALUES (1)"))
    assert DmlPayload.unpack(data.payload).schema_id == (1, 3)
    assert changes(data) == [("a", "INSERT", "a:1", None, {"id": 1, "note": "none"})]


def test_a_ddl_statement_must_be_alone_in_its_transaction(engine: Engine) -> None:
    txn = engine.begin()
    engine.execute(txn, "CREATE TABLE b(id INTEGER PRIMARY KEY)")
    with pytest.raises(SqlError, match="alone"):
        engine.execute(txn, "INSERT INTO b VALUES (1)")
    engine.commit(txn)
    engine.flush()
    txn = engine.begin(explicit=True)
    with pytest.raises(SqlError, match="alone"):
        engine.execute(txn, "CREATE TABLE c(id INTEGER PRIMARY KEY)")
    engine.rollback(txn)


def test_rows_written_before_a_ddl_in_the_same_transaction_reach_peers(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, "CREATE TABLE t(id TEXT PRIMARY KEY, v)")
    ship(e1, e2)
    txn = e1.begin()
    e1.execute(txn, "INSERT INTO t VALUES ('a', 1)")
    try:
        e1.execute(txn, "CREATE TABLE u(id TEXT PRIMARY KEY)")
    except SqlError:
        e1.rollback(txn)  # refusing the mix is a fine answer too
    else:
        e1.commit(txn)
    e1.flush()
    ship(e1, e2)
    assert select(e2, "SELECT * FROM t") == select(e1, "SELECT * FROM t")
    assert e2.table_digest() == e1.table_digest()


def test_create_view_is_accepted_and_replicated(tmp_path: Path, clock: FakeClock, engine: Engine) -> None:
    peer = open_engine(tmp_path / "e2", 2, clock)
    run(engine, "CREATE VIEW named AS SELECT id, name FROM t WHERE name IS NOT NULL")
    ship(engine, peer)
    assert select(peer, "SELECT name FROM sqlite_schema WHERE type = 'view'") == [["named"]]


def test_local_tables_may_skip_the_primary_key_and_are_logged_as_origin_0(engine: Engine) -> None:
    record = only_record(run(engine, "CREATE TABLE scratch(a, b)"))
    assert (record.type, record.origin) == (RecordType.DDL, 0)
    assert engine.vclock == VClock({0: 1, 1: 1})


# ------------------------------------------------------------------ auto ids


def test_auto_ids_of_two_members_never_collide(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, "CREATE TABLE t(id INTEGER PRIMARY KEY, who TEXT)")
    ship(e1, e2)
    returned: dict[str, list[int]] = {"e1": [], "e2": []}
    for round_ in range(4):
        for name, e in (("e1", e1), ("e2", e2)):
            txn = e.begin()
            result = e.execute(txn, "INSERT INTO t(who) VALUES (?), (?)", (name, name))
            committed = e.commit(txn)
            e.flush()
            assert result.row_count == 2
            assert len(result.autoincrement_ids) == 2
            logged = [new["id"] for _, op, _, _, new in changes(only_record(committed))]
            assert logged == result.autoincrement_ids
            returned[name] += result.autoincrement_ids
        if round_ % 2:
            ship(e1, e2)
            ship(e2, e1)
    ship(e1, e2)
    ship(e2, e1)
    all_ids = returned["e1"] + returned["e2"]
    assert len(set(all_ids)) == len(all_ids) == 16
    assert all(0 < i < 2**53 for i in all_ids)
    assert select(e1, "SELECT id, who FROM t ORDER BY id") == select(e2, "SELECT id, who FROM t ORDER BY id")
    assert len(select(e1, "SELECT id FROM t")) == 16
    assert e1.table_digest() == e2.table_digest()


def test_an_explicit_id_is_kept(engine: Engine) -> None:
    txn = engine.begin()
    result = engine.execute(txn, "INSERT INTO t(id, name) VALUES (12345, 'ann')")
    engine.commit(txn)
    engine.flush()
    assert result.autoincrement_ids == []
    assert select(engine, "SELECT id FROM t") == [[12345]]


def test_auto_id_exhaustion_is_refused(engine: Engine) -> None:
    run(engine, ("INSERT INTO t(id, name) VALUES (?, 'top')", [2**53 - 1]))
    txn = engine.begin()
    with pytest.raises(SqlError, match="exhausted"):
        engine.execute(txn, "INSERT INTO t(name) VALUES ('more')")
    assert engine.commit(txn) is None
    engine.flush()
    assert select(engine, "SELECT count(*) FROM t") == [[1]]


def test_a_multi_row_insert_failing_on_auto_id_exhaustion_logs_nothing(engine: Engine) -> None:
    run(engine, ("INSERT INTO t(id, name) VALUES (?, 'top')", [2**53 - 40]))
    txn = engine.begin()
    with pytest.raises(SqlError, match="exhausted"):
        engine.execute(txn, "INSERT INTO t(name) VALUES ('fits'), ('does not')")
    committed = engine.commit(txn)
    engine.flush()
    assert committed is None
    assert select(engine, "SELECT name FROM t") == [["top"]]


def test_a_row_left_without_a_key_that_collides_takes_the_statements_way_out(engine: Engine) -> None:
    """As in plain SQLite: the upsert updates the row it collides with, OR IGNORE and DO
    NOTHING skip it, a plain INSERT fails; only rows inserted are counted and reported."""
    run(engine, "INSERT INTO t(id, name, n) VALUES (1, 'ann', 1)")
    txn = engine.begin()
    upsert = engine.execute(txn, "INSERT INTO t(name, n) VALUES ('ann', 5), ('bob', 2)"
                                 " ON CONFLICT(name) DO UPDATE SET n = n + excluded.n")
    record = only_record(engine.commit(txn))
    engine.flush()
    [bob] = upsert.autoincrement_ids
    assert upsert.row_count == 2
    assert changes(record) == [
        ("t", "UPDATE", "t:1", {"id": 1, "name": "ann", "n": 1}, {"id": 1, "name": "ann", "n": 6}),
        ("t", "INSERT", f"t:{bob}", None, {"id": bob, "name": "bob", "n": 2}),
    ]
    skips = ("INSERT OR IGNORE INTO t(name) VALUES ('ann')", "INSERT INTO t(name) VALUES ('bob') ON CONFLICT DO NOTHING")
    for sql in skips:
        txn = engine.begin()
        skipped = engine.execute(txn, sql)
        assert engine.commit(txn) is None
        assert (skipped.row_count, skipped.autoincrement_ids) == (0, [])
    txn = engine.begin()
    with pytest.raises(SqlError, match="UNIQUE constraint failed: t.name"):
        engine.execute(txn, "INSERT INTO t(name) VALUES ('cat'), ('ann')")
    assert engine.commit(txn) is None
    engine.flush()
    assert select(engine, "SELECT id, name, n FROM t ORDER BY id") == [[1, "ann", 6], [bob, "bob", 2]]


def test_a_row_that_would_get_a_key_of_sqlites_choosing_is_refused(engine: Engine) -> None:
    """A constraint on the key that our id fails and SQLite's would pass: the client's
    insert would go through with SQLite's rowid, which another member may give too."""
    run(engine, "CREATE TABLE ck(id INTEGER PRIMARY KEY CHECK (id < 20), name TEXT)")
    txn = engine.begin()
    with pytest.raises(SqlError, match="SQLite's choosing"):
        engine.execute(txn, "INSERT INTO ck(name) VALUES ('x')")
    assert engine.commit(txn) is None
    engine.flush()
    assert select(engine, "SELECT count(*) FROM ck") == [[0]]


def test_or_replace_with_an_upsert_is_refused_where_the_assigned_row_would_replace(engine: Engine) -> None:
    """SQLite takes the upsert's branch for its target; the trigger's insert inherits OR
    REPLACE and would replace the row instead."""
    run(engine, "INSERT INTO t(id, name, n) VALUES (1, 'ann', 1)")
    sql = "INSERT OR REPLACE INTO t(name, n) VALUES (?, 2) ON CONFLICT(name) DO UPDATE SET n = 3"
    txn = engine.begin()
    with pytest.raises(SqlError, match="ON CONFLICT clause"):
        engine.execute(txn, sql, ["ann"])
    assert engine.commit(txn) is None
    run(engine, (sql, ["bob"]))
    assert select(engine, "SELECT name, n FROM t ORDER BY id") == [["ann", 1], ["bob", 2]]


# ------------------------------------------------------------------ max_txn_bytes


def test_an_oversize_transaction_is_refused_and_nothing_is_written(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock, max_txn_bytes=4096)
    run(e1, "CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
    txn = e1.begin(explicit=True)
    e1.execute(txn, "INSERT INTO t VALUES (1, ?)", ("x" * 3000,))
    e1.execute(txn, "INSERT INTO t VALUES (2, ?)", ("y" * 3000,))
    with pytest.raises(SqlError, match="max_txn_bytes"):
        e1.commit(txn)
    e1.flush()
    assert select(e1, "SELECT count(*) FROM t") == [[0]]
    assert versions(e1, "t") == {}
    assert e1.vclock == VClock({1: 1}) and e1.pending_vclock == VClock({1: 1})
    assert len(wal_records(e1)) == 1
    # a transaction within the bound still goes through, with the next LSN
    assert only_record(run(e1, ("INSERT INTO t VALUES (3, ?)", ["z" * 3000]))).lsn == 2


# ------------------------------------------------------------------ versions


def test_every_captured_row_gets_the_transaction_version(engine: Engine) -> None:
    committed = run(
        engine,
        "INSERT INTO t(id, name) VALUES (1, 'ann'), (2, 'bob')",
        "DELETE FROM t WHERE id = 2",
        explicit=True,
    )
    stamp = only_record(committed).txn_id
    assert versions(engine, "t") == {"t:1": (stamp, 1, 0), "t:2": (stamp, 1, 1)}
    later = only_record(run(engine, "UPDATE t SET n = 9")).txn_id
    assert later > stamp
    assert versions(engine, "t")["t:1"] == (later, 1, 0)


def test_wal_holds_exactly_the_committed_records(engine: Engine) -> None:
    committed = [run(engine, f"INSERT INTO t(id, name) VALUES ({i}, 'n{i}')") for i in range(1, 4)]
    logged = dml_records(engine)
    assert logged == [only_record(c) for c in committed]
    assert [r.lsn for r in logged] == [2, 3, 4]
    assert [r.txn_id for r in logged] == sorted(r.txn_id for r in logged)


def test_a_conflict_resolved_by_rollback_cannot_undo_the_transactions_queued_before_it(engine: Engine) -> None:
    """Transactions committed into a group stay queued in one SQLite transaction until the
    flush: a statement whose conflict resolution is ROLLBACK would undo them all. It is
    refused, and the queued ones reach the WAL and the table."""
    run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    queued = engine.begin()
    engine.execute(queued, "INSERT INTO t(id, name) VALUES (2, 'bob')")
    engine.commit(queued)
    txn = engine.begin()
    with pytest.raises(SqlError, match="ROLLBACK as a conflict resolution"):
        engine.execute(txn, "INSERT OR ROLLBACK INTO t(id, name) VALUES (1, 'again')")
    engine.rollback(txn)
    engine.flush()
    assert select(engine, "SELECT id, name FROM t ORDER BY id") == [[1, "ann"], [2, "bob"]]
    assert engine.wal.vclock.get(1) == engine.vclock.get(1)


def test_rollback_inside_a_literal_or_a_name_is_just_text(engine: Engine) -> None:
    run(engine, "INSERT INTO t(id, name) VALUES (1, 'rollback')")
    run(engine, 'CREATE TABLE "rollback"(id INTEGER PRIMARY KEY, rollback INTEGER)')
    run(engine, 'INSERT INTO "rollback"(id, rollback) VALUES (1, 2) /* or rollback */')
    assert select(engine, "SELECT name FROM t") == [["rollback"]]
    assert select(engine, 'SELECT rollback FROM "rollback"') == [[2]]


def test_a_named_parameter_without_a_value_is_a_clear_error(engine: Engine) -> None:
    txn = engine.begin()
    with pytest.raises(SqlError, match="no value bound for parameter :missing"):
        engine.execute(txn, "INSERT INTO t(id, name) VALUES (:id, :missing)", {"id": 1})
    engine.rollback(txn)
    engine.flush()
    with pytest.raises(SqlError, match="no value bound for parameter :missing"):
        engine.query("SELECT :missing", {"other": 1})
    run(engine, "INSERT INTO t(id, name) VALUES (1, 'ann')")
    assert select(engine, "SELECT id FROM t") == [[1]]


def test_the_engine_s_auto_id_trigger_cannot_be_dropped_by_a_client(engine: Engine) -> None:
    (name,) = engine.connections.writer.execute(
        "SELECT name FROM temp.sqlite_master WHERE type = 'trigger' AND tbl_name = 't'").fetchone()
    txn = engine.begin()
    with pytest.raises(SqlError, match="the engine's own and cannot be dropped"):
        engine.execute(txn, f"DROP TRIGGER temp.{name}")
    with pytest.raises(SqlError, match="the engine's own and cannot be dropped"):
        engine.execute(txn, f'drop trigger if exists "{name}";')
    engine.rollback(txn)
    engine.flush()
    assert run(engine, "INSERT INTO t(name) VALUES ('ann')").records[0].origin == 1
    assert [row[0] & 31 for row in select(engine, "SELECT id FROM t")] == [1], "an id of our residue"
