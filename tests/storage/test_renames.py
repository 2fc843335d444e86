"""Rows written before a rename or a dropped column land where the schema in force says,
whatever order they arrive in (docs/decisions.md, "Renames and dropped columns follow the
schema id")."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicaset.storage import Engine
from replicaset.storage.errors import SqlError, TxnConflict
from replicaset.storage.renames import Change, ChangeKind, changes_of, parse_alter
from replicaset.storage.rows import DmlPayload
from tests.storage.enginekit import FakeClock, apply_all, bootstrap, open_engine, run, select, ship, wal_records
from wal import Record, RecordType

T = "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b TEXT)"


def members(root: Path, count: int, *schema: str) -> list[Engine]:
    return bootstrap(root, FakeClock(), count, *schema)


def last(engine: Engine) -> Record:
    return wal_records(engine)[-1]


def rows_of(engine: Engine, sql: str) -> list[list]:
    return select(engine, sql)


@pytest.mark.parametrize(
    ("ddl", "query", "expected"),
    [
        ("ALTER TABLE t RENAME TO u", "SELECT id, a, b FROM u ORDER BY id", [[1, "a1", "b1"], [2, "a2", "b2"]]),
        ("ALTER TABLE t RENAME COLUMN a TO z", "SELECT id, z, b FROM t ORDER BY id", [[1, "a1", "b1"], [2, "a2", "b2"]]),
        ('alter table "T" rename a to "Z z"', 'SELECT id, "Z z", b FROM t ORDER BY id',
         [[1, "a1", "b1"], [2, "a2", "b2"]]),
        ("ALTER TABLE t DROP COLUMN a", "SELECT * FROM t ORDER BY id", [[1, "b1"], [2, "b2"]]),
    ],
)
def test_a_row_written_before_a_change_lands_alike_in_both_arrival_orders(
        tmp_path: Path, ddl: str, query: str, expected: list[list]) -> None:
    """Member 2 writes row 2 under the old schema while member 1 changes it; member 3 takes
    the row before the change, member 1 after it: both hold it in the right column."""
    first, second, third = members(tmp_path, 3, T, "INSERT INTO t VALUES (1, 'a1', 'b1')")
    run(second, "INSERT INTO t VALUES (2, 'a2', 'b2')")
    write = last(second)
    run(first, ddl)
    change = last(first)
    assert change.type == RecordType.DDL
    apply_all(third, [write])
    apply_all(third, [change])
    apply_all(first, [write])
    ship(first, second)
    for member in (first, second, third):
        assert rows_of(member, query) == expected
    assert first.table_digest() == second.table_digest() == third.table_digest()
    table = "u" if "RENAME TO" in ddl else "t"
    assert sorted(first.versions(table)) == [f"{table}:1", f"{table}:2"]
    assert first.versions(table) == third.versions(table)


def test_updates_and_deletes_written_before_a_rename_follow_the_table(tmp_path: Path) -> None:
    first, second, third = members(tmp_path, 3, T, "INSERT INTO t VALUES (1, 'a1', 'b1')",
                                   "INSERT INTO t VALUES (2, 'a2', 'b2')")
    run(second, "UPDATE t SET a = 'new' WHERE id = 1")
    run(second, "DELETE FROM t WHERE id = 2")
    writes = wal_records(second)[-2:]
    run(first, "ALTER TABLE t RENAME TO u")
    run(first, "ALTER TABLE u RENAME COLUMN a TO z")
    changes = wal_records(first)[-2:]
    apply_all(third, [writes[0], changes[0], writes[1], changes[1]])
    apply_all(first, writes)
    ship(first, second)
    for member in (first, second, third):
        assert rows_of(member, "SELECT id, z, b FROM u") == [[1, "new", "b1"]]
    assert first.table_digest() == second.table_digest() == third.table_digest()
    assert first.versions("u")["u:2"][2] is True, "the delete's tombstone followed the table"


def test_a_composite_key_is_written_again_when_one_of_its_columns_is_renamed(tmp_path: Path) -> None:
    """Composite keys list values in column-name order; renaming `a` to `z` puts it after `b`."""
    first, second, third = members(tmp_path, 3, "CREATE TABLE p(a INTEGER, b TEXT, v TEXT, PRIMARY KEY (a, b))",
                                   "INSERT INTO p VALUES (1, 'x', 'old')")
    run(second, "UPDATE p SET v = 'new' WHERE a = 1")
    write = last(second)
    run(first, "ALTER TABLE p RENAME COLUMN a TO z")
    change = last(first)
    apply_all(third, [write, change])
    apply_all(first, [write])
    ship(first, second)
    for member in (first, second, third):
        assert rows_of(member, "SELECT z, b, v FROM p") == [[1, "x", "new"]]
    assert first.versions("p") == third.versions("p")
    assert len(first.versions("p")) == 1
    run(third, "UPDATE p SET v = 'later' WHERE z = 1")
    ship(third, first)
    assert rows_of(first, "SELECT v FROM p") == [["later"]]
    assert len(first.versions("p")) == 1


def test_a_row_of_a_table_dropped_since_never_lands_in_the_table_that_took_its_name(tmp_path: Path) -> None:
    """The rebuild: create, copy, drop, rename into place. A write to the old table that
    the copy did not see goes with the old table, on the member that had it before the
    drop and on the one that gets it after the rename alike."""
    first, second, third = members(tmp_path, 3, T, "INSERT INTO t VALUES (1, 'a1', 'b1')")
    run(first, "CREATE TABLE t_new(id INTEGER PRIMARY KEY, a TEXT, b TEXT, c TEXT DEFAULT 'c')")
    ship(first, second)
    ship(first, third)
    run(second, "INSERT INTO t VALUES (7, 'late', 'late')")
    late = last(second)
    run(first, "INSERT INTO t_new(id, a, b) SELECT id, a, b FROM t")
    run(first, "DROP TABLE t")
    run(first, "ALTER TABLE t_new RENAME TO t")
    apply_all(third, [late])
    ship(first, third)
    apply_all(first, [late])
    ship(first, second)
    for member in (first, second, third):
        assert rows_of(member, "SELECT id, a, b, c FROM t") == [[1, "a1", "b1", "c"]]
    assert first.table_digest() == second.table_digest() == third.table_digest()
    assert sorted(first.versions("t")) == ["t:1"]
    run(second, "INSERT INTO t(id, a, b) VALUES (8, 'after', 'after')")
    ship(second, first)
    assert rows_of(first, "SELECT id, c FROM t ORDER BY id") == [[1, "c"], [8, "c"]]


def test_a_quorum_transaction_decided_after_a_rename_keeps_its_capture_schema(tmp_path: Path) -> None:
    first, second = members(tmp_path, 2, T)
    txn = second.begin(quorum=True)
    second.execute(txn, "INSERT INTO t VALUES (3, 'a3', 'b3')")
    captured = second.capture(txn)
    second.flush()
    run(first, "ALTER TABLE t RENAME COLUMN a TO z")
    ship(first, second)
    record = second.commit_captured(captured, txn_id=1 << 40, min_stamp=0)
    second.flush()
    assert DmlPayload.unpack(record.payload).schema_id == (1, 1)
    ship(second, first)
    for member in (first, second):
        assert rows_of(member, "SELECT id, z, b FROM t") == [[3, "a3", "b3"]]


def test_a_stream_transaction_across_a_rename_of_a_table_it_wrote_conflicts(tmp_path: Path) -> None:
    first, second = members(tmp_path, 2, T)
    txn = second.begin(explicit=True)
    second.execute(txn, "INSERT INTO t VALUES (3, 'a3', 'b3')")
    captured = second.capture(txn)
    second.flush()
    run(first, "ALTER TABLE t RENAME TO u")
    run(first, "CREATE TABLE t(id INTEGER PRIMARY KEY, a TEXT, b TEXT)")
    ship(first, second)
    with pytest.raises(TxnConflict, match="renamed, dropped"):
        second.resume(captured, quorum=False)
    second.flush()
    assert rows_of(second, "SELECT count(*) FROM t") == [[0]]


def test_the_schema_log_survives_a_restart(tmp_path: Path) -> None:
    first, second = members(tmp_path, 2, T)
    run(second, "INSERT INTO t VALUES (2, 'a2', 'b2')")
    write = last(second)
    run(first, "ALTER TABLE t RENAME TO u")
    config = first.config
    first.close()
    first = open_engine(config.data_dir, 1, FakeClock())
    apply_all(first, [write])
    assert rows_of(first, "SELECT id, a FROM u") == [[2, "a2"]]


@pytest.mark.parametrize("sql", ["ALTER TABLE scratch RENAME TO shared", "ALTER TABLE t RENAME TO scratch"])
def test_a_table_is_not_renamed_between_local_and_replicated(tmp_path: Path, sql: str) -> None:
    engine = open_engine(tmp_path / "m1", 1, FakeClock(), local_tables={"scratch"})
    run(engine, T)
    if "scratch RENAME" in sql:
        run(engine, "CREATE TABLE scratch(id INTEGER PRIMARY KEY)")
    schema = select(engine, "SELECT name FROM sqlite_schema ORDER BY name")
    txn = engine.begin()
    with pytest.raises(SqlError, match="local to each member"):
        engine.execute(txn, sql)
    engine.rollback(txn)
    engine.flush()
    assert select(engine, "SELECT name FROM sqlite_schema ORDER BY name") == schema


@pytest.mark.parametrize(
    ("sql", "change"),
    [
        ("ALTER TABLE t RENAME TO u", Change(kind=ChangeKind.TABLE_RENAMED, table="t", new="u")),
        ("alter table main.[t] rename to `u`;", Change(kind=ChangeKind.TABLE_RENAMED, table="t", new="u")),
        ('ALTER TABLE t RENAME COLUMN "a""b" TO c', Change(kind=ChangeKind.COLUMN_RENAMED, table="t",
                                                          column='a"b', new="c")),
        ("ALTER TABLE t RENAME a TO c", Change(kind=ChangeKind.COLUMN_RENAMED, table="t", column="a", new="c")),
        ("ALTER TABLE t DROP COLUMN a", Change(kind=ChangeKind.COLUMN_DROPPED, table="t", column="a")),
        ("/* x */ ALTER TABLE t DROP a -- y", Change(kind=ChangeKind.COLUMN_DROPPED, table="t", column="a")),
        ("ALTER TABLE t ADD COLUMN a", None),
        ("CREATE TABLE x(a)", None),
    ],
)
def test_parse_alter(sql: str, change: Change | None) -> None:
    assert parse_alter(sql) == change


def test_changes_of_names_the_table_as_stored_and_every_table_dropped() -> None:
    assert changes_of("ALTER TABLE T RENAME TO u", {"t", "x"}, {"u", "x"}) == (
        Change(kind=ChangeKind.TABLE_RENAMED, table="t", new="u"),)
    assert changes_of("DROP TABLE x", {"t", "x"}, {"t"}) == (Change(kind=ChangeKind.TABLE_DROPPED, table="x"),)
    assert changes_of("CREATE INDEX i ON t(a)", {"t"}, {"t"}) == ()
