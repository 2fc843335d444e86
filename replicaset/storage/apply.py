"""Apply captured rows by version: last-writer-wins on `(hlc, origin)` (DESIGN 4.2).

Inserts and updates write the full after-image by column name with
`INSERT ... ON CONFLICT(pk) DO UPDATE`, never `INSERT OR REPLACE`, which would silently
delete rows colliding on another UNIQUE index. Such a collision is resolved by version,
the same way on every member: the newer row stays, the older row is deleted with a
tombstone at the winner's version. A change is applied when its version is at least
the stored one: equal versions only come from earlier rows of the same transaction.
Rows of local tables (origin 0) are replayed without versions: only this member has them.
"""

from __future__ import annotations

from typing import Any

import apsw

from replicaset.storage.errors import ApplyError
from replicaset.storage.rows import CapturedRow, Op
from replicaset.storage.schema import TableCache, TableInfo, quote
from replicaset.storage.keys import intent_key

Version = tuple[int, int]

_SET_VERSION = (
    "INSERT INTO _rs_version(tbl, key, hlc, origin, deleted) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT(tbl, key) DO UPDATE SET hlc = excluded.hlc, origin = excluded.origin,"
    " deleted = excluded.deleted"
)
_GET_VERSION = "SELECT hlc, origin FROM _rs_version WHERE tbl = ? AND key = ?"
UNIQUE_RETRIES_MAX = 16


def set_version(conn: apsw.Connection, table: str, key: str, version: Version, deleted: bool) -> None:
    conn.execute(_SET_VERSION, (table, key, version[0], version[1], int(deleted)))


def get_version(conn: apsw.Connection, table: str, key: str) -> Version | None:
    row = conn.execute(_GET_VERSION, (table, key)).fetchone()
    return (row[0], row[1]) if row else None


class RowApplier:
    """Applies rows on the apply connection (triggers and foreign keys off)."""

    def __init__(self, conn: apsw.Connection, tables: TableCache) -> None:
        self._conn = conn
        self._tables = tables

    def apply_rows(self, rows: list[CapturedRow], version: Version, *, versioned: bool) -> None:
        for row in rows:
            info = self._tables.get(row.table)
            if info is None:
                raise ApplyError(f"no such table {row.table!r} for row {row.key!r}")
            if not versioned:
                self._apply_unversioned(info, row)
                continue
            stored = get_version(self._conn, row.table, row.key)
            if stored is not None and stored > version:
                continue
            if row.op is Op.DELETE:
                self._delete(info, row.old or {}, row.key)
                set_version(self._conn, row.table, row.key, version, True)
            else:
                self._upsert(info, row, version)

    def _apply_unversioned(self, info: TableInfo, row: CapturedRow) -> None:
        if info.pk_columns:
            if row.op is Op.DELETE:
                self._delete(info, row.old or {}, row.key)
            else:
                self._conn.execute(*self._upsert_sql(info, row.new or {}))
            return
        if row.op is Op.DELETE:
            self._conn.execute(f"DELETE FROM {quote(info.name)} WHERE rowid = ?", (row.rowid,))
        else:
            values = row.new or {}
            cols = ["rowid", *values]
            self._conn.execute(
                f"INSERT OR REPLACE INTO {quote(info.name)}({', '.join(map(quote, cols))})"
                f" VALUES ({', '.join('?' * len(cols))})",
                (row.rowid, *values.values()),
            )

    def _delete(self, info: TableInfo, image: dict[str, Any], key: str) -> None:
        try:
            values = [image[c] for c in info.pk_columns]
        except KeyError as exc:
            raise ApplyError(f"delete of {key!r} lacks primary-key column {exc}") from exc
        where = " AND ".join(f"{quote(c)} IS ?" for c in info.pk_columns)
        self._conn.execute(f"DELETE FROM {quote(info.name)} WHERE {where}", values)

    def _upsert_sql(self, info: TableInfo, image: dict[str, Any]) -> tuple[str, list[Any]]:
        known = set(info.columns)
        unknown = [c for c in image if c not in known]
        if unknown:
            raise ApplyError(f"table {info.name!r} has no column(s) {', '.join(unknown)}")
        cols = list(image)
        updates = [c for c in cols if c not in info.pk_columns]
        sql = (
            f"INSERT INTO {quote(info.name)}({', '.join(map(quote, cols))})"
            f" VALUES ({', '.join('?' * len(cols))})"
            f" ON CONFLICT({', '.join(map(quote, info.pk_columns))}) DO "
        )
        if updates:
            sql += "UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in updates)
        else:
            sql += "NOTHING"
        return sql, list(image.values())

    def _upsert(self, info: TableInfo, row: CapturedRow, version: Version) -> None:
        image = row.new or {}
        sql, values = self._upsert_sql(info, image)
        for _ in range(UNIQUE_RETRIES_MAX):
            try:
                self._conn.execute(sql, values)
                break
            except apsw.ConstraintError as exc:
                if not self._resolve_unique(info, row, version, exc):
                    return
        else:
            raise ApplyError(f"row {row.key!r} still collides after {UNIQUE_RETRIES_MAX} resolutions")
        set_version(self._conn, info.name, row.key, version, False)

    def _resolve_unique(
        self, info: TableInfo, row: CapturedRow, version: Version, exc: apsw.ConstraintError
    ) -> bool:
        """Settle a secondary-UNIQUE collision by version; True means retry the upsert."""
        image = row.new or {}
        rivals: dict[str, tuple[list[Any], Version]] = {}
        for columns in info.unique_indexes:
            values = [image.get(c) for c in columns]
            if any(v is None for v in values):
                continue
            where = " AND ".join(f"{quote(c)} = ?" for c in columns)
            pk_list = ", ".join(map(quote, info.pk_columns))
            for pk_values in self._conn.execute(
                f"SELECT {pk_list} FROM {quote(info.name)} WHERE {where}", values
            ).fetchall():
                key = intent_key(info.name, info.pk_columns, pk_values)
                if key != row.key:
                    rivals[key] = (list(pk_values), get_version(self._conn, info.name, key) or (0, 0))
        if not rivals:
            raise ApplyError(f"row {row.key!r} cannot be applied: {exc}") from exc
        # As if every row were applied in version order: the incoming row first removes
        # the older rivals, then any newer rival removes the incoming row.
        for key, (pk_values, rival_version) in rivals.items():
            if rival_version < version:
                self._delete(info, dict(zip(info.pk_columns, pk_values)), key)
                set_version(self._conn, info.name, key, version, True)
        winner = max(v for _, v in rivals.values())
        if winner > version:
            own = {c: image[c] for c in info.pk_columns}
            self._delete(info, own, row.key)
            set_version(self._conn, info.name, row.key, winner, True)
            return False
        return True
