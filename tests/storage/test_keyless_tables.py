"""Tables without a declared PRIMARY KEY replicate, keyed by their rowid, which the engine
assigns cluster-unique (docs/decisions.md, "Tables without a declared key")."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from replicaset.storage import Engine
from replicaset.storage.errors import SqlError
from replicaset.storage.rows import CapturedRow, DmlPayload
from tests.storage.enginekit import FakeClock, bootstrap, dml_records, exchange, run, select, ship, versions

LOG = "CREATE TABLE log(who TEXT, what TEXT)"


def members(root: Path, count: int, *schema: str) -> list[Engine]:
    return bootstrap(root, FakeClock(), count, *schema)


def rows(engine: Engine, table: str = "log") -> list[list]:
    return select(engine, f"SELECT rowid, * FROM {table} ORDER BY rowid")


def test_inserts_on_every_member_keep_their_rows_apart_everywhere(tmp_path: Path) -> None:
    engines = members(tmp_path, 3, LOG)
    for engine in engines:
        run(engine, ("INSERT INTO log(who, what) VALUES (?, 'first'), (?, 'second')",
                     (f"m{engine.instance_id}", f"m{engine.instance_id}")))
    exchange(*engines)
    first = rows(engines[0])
    assert sorted((who, what) for _, who, what in first) == sorted(
        (f"m{i}", what) for i in (1, 2, 3) for what in ("first", "second"))
    assert len({rowid for rowid, _, _ in first}) == 6
    for engine in engines[1:]:
        assert rows(engine) == first
        assert engine.table_digest() == engines[0].table_digest()


def test_updates_and_deletes_reach_the_same_row_on_every_member(tmp_path: Path) -> None:
    e1, e2 = members(tmp_path, 2, LOG)
    run(e1, "INSERT INTO log VALUES ('ann', 'a'), ('bob', 'b'), ('ann', 'c')")
    ship(e1, e2)
    run(e2, "UPDATE log SET what = 'changed' WHERE who = 'bob'")
    run(e2, "DELETE FROM log WHERE what = 'a'")
    ship(e2, e1)
    assert [r[1:] for r in rows(e1)] == [["bob", "changed"], ["ann", "c"]]
    assert rows(e1) == rows(e2)
    assert e1.table_digest() == e2.table_digest()


def test_concurrent_updates_of_one_row_converge_to_the_newer(tmp_path: Path) -> None:
    e1, e2 = members(tmp_path, 2, LOG)
    run(e1, "INSERT INTO log VALUES ('ann', 'a')")
    ship(e1, e2)
    run(e1, "UPDATE log SET what = 'older'")
    run(e2, "UPDATE log SET what = 'newer'")
    exchange(e1, e2)
    assert [r[1:] for r in rows(e1)] == [r[1:] for r in rows(e2)] == [["ann", "newer"]]
    (rowid,) = select(e1, "SELECT rowid FROM log")[0]
    assert versions(e1, "log")[f"log:{rowid}"][1] == 2


def test_a_rowid_the_client_gives_is_the_key_and_moving_it_moves_the_row(tmp_path: Path) -> None:
    e1, e2 = members(tmp_path, 2, LOG)
    run(e1, "INSERT INTO log(rowid, who, what) VALUES (7, 'ann', 'a')")
    run(e1, "UPDATE log SET rowid = 9 WHERE rowid = 7")
    ship(e1, e2)
    assert rows(e2) == [[9, "ann", "a"]]
    assert [key for key, (_, _, deleted) in versions(e2, "log").items() if not deleted] == ["log:9"]


def test_insert_select_and_returning_give_the_assigned_rowids(tmp_path: Path) -> None:
    (e1,) = members(tmp_path, 1, LOG, "CREATE TABLE src(id INTEGER PRIMARY KEY, who TEXT)")
    run(e1, "INSERT INTO src VALUES (1, 'ann'), (2, 'bob')")
    txn = e1.begin()
    result = e1.execute(txn, "INSERT INTO log(who, what) SELECT who, 'copied' FROM src ORDER BY id RETURNING rowid, who")
    e1.commit(txn)
    e1.flush()
    assert [row[1:] for row in rows(e1)] == [["ann", "copied"], ["bob", "copied"]]
    assert result.rows == [[rowid, who] for rowid, who, _ in rows(e1)]
    # The member's id sits in the low bits of every id it assigns (auto_ids.py).
    assert all(rowid % 32 == 1 for rowid, _, _ in rows(e1))


def test_a_unique_collision_between_members_keeps_the_newer_row_everywhere(tmp_path: Path) -> None:
    e1, e2 = members(tmp_path, 2, "CREATE TABLE tag(name TEXT UNIQUE, owner TEXT)")
    run(e1, "INSERT INTO tag VALUES ('x', 'from e1')")
    run(e2, "INSERT INTO tag VALUES ('x', 'from e2')")
    exchange(e1, e2)
    assert [r[1:] for r in rows(e1, "tag")] == [r[1:] for r in rows(e2, "tag")] == [["x", "from e2"]]
    run(e2, "UPDATE tag SET name = 'y'")
    exchange(e1, e2)
    expected = [["x", "from e1"], ["y", "from e2"]]
    assert sorted(r[1:] for r in rows(e1, "tag")) == sorted(r[1:] for r in rows(e2, "tag")) == expected
    assert e1.table_digest() == e2.table_digest()


def test_a_column_named_rowid_leaves_the_key_to_another_name(tmp_path: Path) -> None:
    e1, e2 = members(tmp_path, 2, "CREATE TABLE odd(rowid TEXT, v TEXT)")
    run(e1, "INSERT INTO odd VALUES ('mine', 'a')")
    run(e1, "UPDATE odd SET v = 'b'")
    ship(e1, e2)
    assert select(e2, "SELECT _rowid_, rowid, v FROM odd") == select(e1, "SELECT _rowid_, rowid, v FROM odd")
    assert select(e2, "SELECT rowid, v FROM odd") == [["mine", "b"]]


def test_a_table_whose_columns_take_every_name_of_the_rowid_is_refused(tmp_path: Path) -> None:
    (e1,) = members(tmp_path, 1)
    txn = e1.begin()
    with pytest.raises(SqlError, match="every name of the rowid"):
        e1.execute(txn, "CREATE TABLE hidden(rowid, _rowid_, oid)")
    e1.rollback(txn)
    e1.flush()
    assert select(e1, "SELECT name FROM sqlite_schema WHERE name = 'hidden'") == []


def test_a_checkpoint_keeps_the_rowids(tmp_path: Path) -> None:
    """A joiner starts from a checkpoint (`VACUUM INTO`): a rowid it renumbered would be
    another row's key there."""
    (e1,) = members(tmp_path, 1, LOG, "CREATE INDEX log_who ON log(who)")
    run(e1, "INSERT INTO log(rowid, who, what) VALUES (1000, 'a', 'x'), (5, 'b', 'y'), (77, 'c', 'z'), (6, 'd', 'w')")
    run(e1, "DELETE FROM log WHERE rowid IN (5, 77)")
    copy = apsw.Connection(str(e1.checkpoint()), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert copy.execute("SELECT rowid, * FROM log ORDER BY rowid").fetchall() == [tuple(r) for r in rows(e1)]
    finally:
        copy.close()


def test_captured_rows_carry_the_rowid_and_a_peer_row_with_a_bad_one_is_refused(tmp_path: Path) -> None:
    (e1,) = members(tmp_path, 1, LOG)
    run(e1, "INSERT INTO log(rowid, who, what) VALUES (3, 'a', 'x')")
    payload = DmlPayload.unpack(dml_records(e1)[-1].payload)
    assert [(r.key, r.rowid) for r in payload.rows] == [("log:3", 3)]
    with pytest.raises(ValueError, match="bad rowid"):
        CapturedRow.from_wire({**payload.rows[0].to_wire(), "rowid": "3"})
