"""Engine behaviour replication relies on: schema waits, skip on conflict, split-brain lookups."""

from __future__ import annotations

import pytest

from replicaset.storage import ApplyError, SchemaPending
from tests.sim.test_unique_resolution import Clock, open_engine, write


def test_a_data_row_waits_for_its_schema(tmp_path):
    clock = Clock()
    a, b, c = (open_engine(tmp_path, name, i, clock) for i, name in ((1, "a"), (2, "b"), (3, "c")))
    ddl = write(a, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
    b.apply(ddl[0])
    b.flush()
    row = write(b, "INSERT INTO t VALUES (1, 'x')")
    with pytest.raises(SchemaPending) as pending:
        c.apply(row[0])
    assert pending.value.schema_id == (1, ddl[0].lsn)
    assert c.pending_vclock.get(2) == 0, "nothing was reserved"
    c.apply(ddl[0])
    assert c.apply(row[0])
    c.flush()
    assert c.query("SELECT * FROM t").rows == [[1, "x"]]
    for e in (a, b, c):
        e.close()


def test_skip_holds_the_row_without_applying_it(tmp_path):
    clock = Clock()
    a, b = open_engine(tmp_path, "a", 1, clock), open_engine(tmp_path, "b", 2, clock)
    ddl = write(a, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    b.apply(ddl[0])
    b.flush()
    row = write(a, "INSERT INTO t VALUES (1, 'x')")
    corrupted = row[0].__class__(type=row[0].type, origin=1, lsn=row[0].lsn, txn_id=row[0].txn_id, payload=b"\x93garbage")
    with pytest.raises(ApplyError):
        b.apply(corrupted)
    assert b.skip(corrupted)
    b.flush()
    assert b.vclock.get(1) == row[0].lsn and b.query("SELECT count(*) FROM t").rows == [[0]]
    a.close(), b.close()


def test_txn_at_finds_the_txn_id_of_a_held_row(tmp_path):
    clock = Clock()
    a = open_engine(tmp_path, "a", 1, clock)
    records = write(a, "CREATE TABLE t(id INTEGER PRIMARY KEY)") + write(a, "INSERT INTO t VALUES (1)")
    assert [a.txn_at(1, r.lsn) for r in records] == [r.txn_id for r in records]
    assert a.txn_at(1, records[-1].lsn + 1) is None
    assert a.last_txn() == {1: (records[-1].lsn, records[-1].txn_id)}
    a.close()
