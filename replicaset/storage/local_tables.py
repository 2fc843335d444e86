"""A member's local tables carried into a checkpoint it re-joins from.

A re-join replaces the member's database with a peer's checkpoint (docs/design/anti-entropy.md).
Local tables (`local_tables`, WAL origin 0) are the member's own and exist nowhere else: the
checkpoint holds the peer's copy of them, if any. So before the joiner installs the
checkpoint, each of its local tables is replaced there by the one of its old database,
schema (with its indexes and triggers) and rows, rowids kept (a local table may lack a
primary key, and its WAL rows name rowids). Generated columns are computed again.
Local rows carry no versions, so nothing else in the checkpoint refers to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import apsw

from replicaset.storage.schema import quote


def carry_local_tables(source: Path, target: Path, tables: Iterable[str]) -> dict[str, int]:
    """Replace `tables` in database `target` by those of database `source` (dropped where
    `source` has none); the rows carried, by table. One transaction: all or nothing."""
    old = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
    new = apsw.Connection(str(target))
    carried: dict[str, int] = {}
    try:
        with new:
            for table in sorted(set(tables)):
                new.execute(f"DROP TABLE IF EXISTS {quote(table)}")
                found = old.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?",
                                    (table,)).fetchone()
                if found is None:
                    continue
                new.execute(found[0])
                for (sql,) in old.execute("SELECT sql FROM sqlite_schema WHERE tbl_name = ? AND type IN "
                                          "('index', 'trigger') AND sql IS NOT NULL", (table,)).fetchall():
                    new.execute(sql)
                carried[table] = _copy_rows(old, new, table)
    finally:
        new.close()
        old.close()
    return carried


def _copy_rows(old: apsw.Connection, new: apsw.Connection, table: str) -> int:
    columns = [quote(row[1]) for row in old.execute(f"PRAGMA table_xinfo({quote(table)})") if row[6] == 0]
    if _has_rowid(old, table):
        columns = ["rowid", *columns]
    listed = ", ".join(columns)
    rows = old.execute(f"SELECT {listed} FROM {quote(table)}").fetchall()
    new.executemany(f"INSERT INTO {quote(table)}({listed}) VALUES ({', '.join('?' * len(columns))})", rows)
    return len(rows)


def _has_rowid(conn: apsw.Connection, table: str) -> bool:
    try:
        conn.execute(f"SELECT rowid FROM {quote(table)} LIMIT 0").fetchall()
    except apsw.SQLError:  # WITHOUT ROWID
        return False
    return True
