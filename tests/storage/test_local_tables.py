"""A re-join's checkpoint gets the member's own local tables (`storage/local_tables.py`)."""

from __future__ import annotations

from pathlib import Path

import apsw

from replicaset.storage.local_tables import carry_local_tables


def database(path: Path, *statements: str) -> Path:
    conn = apsw.Connection(str(path))
    for sql in statements:
        conn.execute(sql)
    conn.close()
    return path


def rows(path: Path, sql: str) -> list:
    conn = apsw.Connection(str(path))
    try:
        return [list(r) for r in conn.execute(sql)]
    finally:
        conn.close()


def test_local_tables_replace_the_peers_copies_with_schema_rowids_and_indexes(tmp_path):
    old = database(tmp_path / "old.sqlite",
                   "CREATE TABLE scratch(v TEXT, w TEXT GENERATED ALWAYS AS (upper(v)) STORED)",
                   "CREATE INDEX scratch_v ON scratch(v)",
                   "INSERT INTO scratch(rowid, v) VALUES (7, 'a'), (42, 'b')",
                   "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)",
                   "INSERT INTO kv VALUES (1, 'old replicated row')")
    new = database(tmp_path / "new.sqlite",
                   "CREATE TABLE scratch(other INTEGER)", "INSERT INTO scratch VALUES (99)",
                   "CREATE TABLE gone(x)", "INSERT INTO gone VALUES (1)",
                   "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)", "INSERT INTO kv VALUES (1, 'from the peer')")
    assert carry_local_tables(old, new, ["scratch", "gone"]) == {"scratch": 2}
    assert rows(new, "SELECT rowid, v, w FROM scratch ORDER BY rowid") == [[7, "a", "A"], [42, "b", "B"]]
    assert rows(new, "SELECT name FROM sqlite_schema WHERE tbl_name = 'scratch' AND type = 'index'") == [["scratch_v"]]
    assert rows(new, "SELECT count(*) FROM sqlite_schema WHERE name = 'gone'") == [[0]], \
        "a local table this member did not have is not left with the peer's rows"
    assert rows(new, "SELECT v FROM kv") == [["from the peer"]], "replicated tables are the checkpoint's"
