"""Apply captured rows by version: last-writer-wins on `(hlc, origin)` (docs/design/README.md §4.2).

Every key has one latest version in `_rs_version`; a row of another origin applies when
its version is at least the stored one (equal versions only come from earlier rows of the
same transaction). Inserts and updates write the full after-image by column name with
`INSERT ... ON CONFLICT(pk) DO UPDATE`, never `INSERT OR REPLACE`, which would silently
delete rows colliding on another UNIQUE index; deletes leave a tombstone.

Secondary UNIQUE indexes: the visible table must not depend on arrival order, so it is
defined from the latest image of every key alone: taking live images from the newest
version down, an image is visible unless it collides with a newer visible one. A loser is
not deleted: its image waits in `_rs_latent` with its own version, and comes back as soon
as the value it needs is released (its rival moved to another value, was deleted, or lost
in turn). Applying a row therefore places it (demoting older colliding rows to latent),
then re-resolves the latent rows of the table until nothing changes. Local writes release
values too, so the writer runs the same re-resolution after each transaction. A partial
UNIQUE index holds the values of the rows that satisfy its WHERE only: two rows collide on
it when both do, and a row leaving the predicate releases its values.
Rows of local tables (origin 0) are replayed without versions: only this member has them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw
import msgpack

from replicaset.storage.errors import ApplyError
from replicaset.storage.keys import intent_key
from replicaset.storage.rows import CapturedRow, Op
from replicaset.storage.schema import Predicate, TableCache, TableInfo, quote
from replicaset.storage.index_upkeep import IndexUpkeep
from replicaset.storage.virtual import VirtualTable

Version = tuple[int, int]

_SET_VERSION = (
    "INSERT INTO _rs_version(tbl, key, hlc, origin, deleted, lsn) VALUES (?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(tbl, key) DO UPDATE SET hlc = excluded.hlc, origin = excluded.origin,"
    " deleted = excluded.deleted, lsn = excluded.lsn"
)
# The same, unless the stored version is newer: last-writer-wins in one statement.
_TAKE_VERSION = _SET_VERSION + " WHERE (excluded.hlc, excluded.origin) >= (_rs_version.hlc, _rs_version.origin)"
_GET_VERSION = "SELECT hlc, origin FROM _rs_version WHERE tbl = ? AND key = ?"
RESOLVE_ROUNDS_MAX = 10_000
# Stamps are unsigned 64-bit (past 2039 the top bit is set); SQLite integers are signed.
# Versions are stored shifted down by 2^63, which keeps their order.
HLC_SQL_OFFSET = 1 << 63


def set_version(conn: apsw.Connection, table: str, key: str, version: Version, deleted: bool, lsn: int) -> None:
    """`lsn` with the version's origin names the row that wrote it: a tombstone is purged
    by that row's place in the vclocks (core.purge)."""
    conn.execute(_SET_VERSION, (table, key, version[0] - HLC_SQL_OFFSET, version[1], int(deleted), lsn))


def take_version(conn: apsw.Connection, table: str, key: str, version: Version, deleted: bool, lsn: int) -> bool:
    """Store `version` unless the key's stored one is newer; whether it was stored (the
    row's changes apply). Equal versions come from earlier rows of the same transaction."""
    conn.execute(_TAKE_VERSION, (table, key, version[0] - HLC_SQL_OFFSET, version[1], int(deleted), lsn))
    return conn.changes() > 0


def get_version(conn: apsw.Connection, table: str, key: str) -> Version | None:
    row = conn.execute(_GET_VERSION, (table, key)).fetchone()
    return (row[0] + HLC_SQL_OFFSET, row[1]) if row else None


class UniqueResolver:
    """Keeps a table's visible rows the greedy resolution of its latest images."""

    def __init__(self, conn: apsw.Connection, *, cache_statements: bool = True) -> None:
        self._conn = conn
        self._cache = cache_statements

    def drop_latent(self, table: str, key: str) -> bool:
        self._conn.execute("DELETE FROM _rs_latent WHERE tbl = ? AND key = ?", (table, key))
        return self._conn.changes() > 0

    def has_latent(self, table: str) -> bool:
        return self._conn.execute("SELECT 1 FROM _rs_latent WHERE tbl = ? LIMIT 1", (table,)).fetchone() is not None

    def rivals(self, info: TableInfo, key: str, image: dict[str, Any]) -> dict[str, tuple[dict[str, Any], Version]]:
        """Visible rows that hold one of `image`'s unique values: key -> (image, version).
        Under a partial index, only rows that satisfy its predicate hold values, `image` too:
        rows the index lets coexist are not rivals."""
        found: dict[str, tuple[dict[str, Any], Version]] = {}
        keys = info.key_columns
        selected = (*info.columns, *(c for c in keys if c not in info.columns))
        for columns, predicate in info.unique_rules:
            values = [image.get(c) for c in columns]
            if any(v is None for v in values):
                continue
            where = " AND ".join(f"{quote(c)} = ?" for c in columns)
            if predicate is not None:
                if not self._satisfies(predicate, image):
                    continue
                where += f" AND ({predicate.where})"
            select = ", ".join(map(quote, selected))
            for row in self._conn.execute(f"SELECT {select} FROM {quote(info.name)} WHERE {where}", values):
                other = dict(zip(selected, row))
                other_key = intent_key(info.name, keys, [other[c] for c in keys])
                if other_key != key and other_key not in found:
                    found[other_key] = (other, get_version(self._conn, info.name, other_key) or (0, 0))
        return found

    def _satisfies(self, predicate: Predicate, image: dict[str, Any]) -> bool:
        """Whether `image` satisfies a partial index's predicate, as if it were a row of the
        table (it may be latent, or not written yet); true when it cannot be probed."""
        if predicate.probe is None:
            return True
        return self._conn.execute(predicate.probe, [image.get(c) for c in predicate.names]).fetchone() is not None

    def place(self, info: TableInfo, key: str, image: dict[str, Any], version: Version) -> bool:
        """Make `image` the key's visible row unless a newer row holds one of its values;
        older holders become latent. Returns whether the image is visible."""
        rivals = self.rivals(info, key, image)
        if any(v > version for _, v in rivals.values()):
            if self.visible_key(info, image) == key:
                self._delete_visible(info, key, image)
            self._store_latent(info.name, key, image)
            return False
        for rival_key, (rival_image, _) in rivals.items():
            self._delete_visible(info, rival_key, rival_image)
            self._store_latent(info.name, rival_key, rival_image)
        self.drop_latent(info.name, key)
        sql, values = upsert_sql(info, image)
        try:
            self._conn.execute(sql, values, can_cache=self._cache)
        except apsw.ConstraintError as exc:
            raise ApplyError(f"row {key!r} cannot be applied: {exc}") from exc
        return True

    def resolve(self, info: TableInfo) -> None:
        """Bring back latent rows whose values are free, newest first, until stable."""
        for _ in range(RESOLVE_ROUNDS_MAX):
            latent = self._conn.execute(
                "SELECT l.key, l.image, v.hlc, v.origin FROM _rs_latent l JOIN _rs_version v"
                " ON v.tbl = l.tbl AND v.key = l.key WHERE l.tbl = ? ORDER BY v.hlc DESC, v.origin DESC",
                (info.name,),
            ).fetchall()
            for key, blob, hlc, origin in latent:
                image = msgpack.unpackb(blob, raw=False)
                version = (hlc + HLC_SQL_OFFSET, origin)
                if not any(v > version for _, v in self.rivals(info, key, image).values()):
                    self.place(info, key, image, version)
                    break
            else:
                return
        raise ApplyError(f"unique resolution of table {info.name!r} did not settle")

    def visible_key(self, info: TableInfo, image: dict[str, Any]) -> str | None:
        """The intent key of the visible row SQLite matches with `image`'s primary key."""
        keys = info.key_columns
        where = " AND ".join(f"{quote(c)} IS ?" for c in keys)
        found = self._conn.execute(
            f"SELECT {', '.join(map(quote, keys))} FROM {quote(info.name)} WHERE {where}",
            [image.get(c) for c in keys],
        ).fetchone()
        return intent_key(info.name, keys, found) if found else None

    def _store_latent(self, table: str, key: str, image: dict[str, Any]) -> None:
        self._conn.execute(
            "INSERT OR REPLACE INTO _rs_latent(tbl, key, image) VALUES (?, ?, ?)",
            (table, key, msgpack.packb(image, use_bin_type=True)),
        )

    def _delete_visible(self, info: TableInfo, key: str, image: dict[str, Any]) -> None:
        delete_row(self._conn, info, image, key, cache=self._cache)


def delete_row(conn: apsw.Connection, info: TableInfo, image: dict[str, Any], key: str, *, cache: bool = True) -> None:
    keys = info.key_columns
    try:
        values = [image[c] for c in keys]
    except KeyError as exc:
        raise ApplyError(f"delete of {key!r} lacks primary-key column {exc}") from exc
    where = " AND ".join(f"{quote(c)} IS ?" for c in keys)
    conn.execute(f"DELETE FROM {quote(info.name)} WHERE {where}", values, can_cache=cache)


# Upsert texts by (table description, columns of the image): rows of one table carry the
# same columns, and building the text cost more than running it (bench/RESULTS_repair.md).
# An entry keeps its TableInfo alive, so its id is not reused while it is here; a schema
# change brings new TableInfo objects, hence new keys.
_UPSERT_TEXTS: dict[tuple[int, tuple[str, ...]], tuple[TableInfo, str]] = {}
UPSERT_TEXTS_MAX = 1024


def upsert_sql(info: TableInfo, image: dict[str, Any]) -> tuple[str, list[Any]]:
    cols = tuple(image)
    cached = _UPSERT_TEXTS.get((id(info), cols))
    if cached is None:
        if len(_UPSERT_TEXTS) >= UPSERT_TEXTS_MAX:
            _UPSERT_TEXTS.clear()
        cached = _UPSERT_TEXTS[(id(info), cols)] = (info, _upsert_text(info, cols))
    return cached[1], list(image.values())


def _upsert_text(info: TableInfo, cols: tuple[str, ...]) -> str:
    keys = info.key_columns
    known = {*info.columns, *keys}
    unknown = [c for c in cols if c not in known]
    if unknown:
        raise ApplyError(f"table {info.name!r} has no column(s) {', '.join(unknown)}")
    updates = [c for c in cols if c not in keys]
    sql = (
        f"INSERT INTO {quote(info.name)}({', '.join(map(quote, cols))})"
        f" VALUES ({', '.join('?' * len(cols))})"
        f" ON CONFLICT({', '.join(map(quote, keys))}) DO "
    )
    if updates:
        return sql + "UPDATE SET " + ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in updates)
    return sql + "NOTHING"


class RowApplier:
    """Applies rows on the apply connection (triggers and foreign keys off), keeping
    external-content indexes in step with their content as the writer's triggers do."""

    def __init__(self, conn: apsw.Connection, tables: TableCache) -> None:
        self._conn = conn
        self._tables = tables
        self._unique = UniqueResolver(conn)
        self._upkeep = IndexUpkeep(conn, tables)
        self._hooked = False

    def apply_rows(self, rows: list[CapturedRow], version: Version, *, versioned: bool, lsn: int) -> None:
        """The rows of row `version[1]:lsn`. The preupdate hook that notes changes for the
        external-content indexes is set only while the schema has such an index: it is a
        Python call for every row changed."""
        wanted = self._tables.has_external_indexes()
        if wanted is not self._hooked:
            self._conn.preupdate_hook(self._upkeep.on_change if wanted else None)
            self._hooked = wanted
        try:
            self._apply_rows(rows, version, versioned=versioned, lsn=lsn)
            self._upkeep.flush()
        finally:
            self._upkeep.discard()

    def _apply_rows(self, rows: list[CapturedRow], version: Version, *, versioned: bool, lsn: int) -> None:
        touched: dict[str, TableInfo] = {}
        for row in rows:
            info = self._tables.get(row.table)
            if info is None:
                raise ApplyError(f"no such table {row.table!r} for row {row.key!r}")
            if not versioned:
                write_unversioned(self._conn, info, row)
                continue
            if not take_version(self._conn, row.table, row.key, version, row.op is Op.DELETE, lsn):
                continue  # a newer version is stored
            if info.virtual is not None:
                write_virtual(self._conn, info.virtual, row)
                continue
            resolved = bool(info.unique_groups)
            if resolved:
                touched[info.name] = info
                self._unique.drop_latent(info.name, row.key)
            image = keyed_image(info, row)
            if row.op is Op.DELETE:
                if not resolved or self._unique.visible_key(info, image) == row.key:
                    delete_row(self._conn, info, image, row.key)
            elif resolved:
                self._unique.place(info, row.key, image, version)
            else:
                self._conn.execute(*upsert_sql(info, image))
        for info in touched.values():
            self._unique.resolve(info)


def keyed_image(info: TableInfo, row: CapturedRow) -> dict[str, Any]:
    """The row's image with its key in it: a table without a declared key is keyed by the
    rowid, which a row carries beside its image (rows.py)."""
    image = (row.old if row.op is Op.DELETE else row.new) or {}
    if info.pk_columns or info.rowid_key is None:
        return image
    if type(row.rowid) is not int:
        raise ApplyError(f"row {row.key!r} of table {info.name!r}, which is keyed by its rowid, carries none")
    return {**image, info.rowid_key: row.rowid}


def write_virtual(conn: apsw.Connection, vt: VirtualTable, row: CapturedRow) -> None:
    """Through the module, which keeps its own shadow tables: out, then in again."""
    image = (row.old if row.op is Op.DELETE else row.new) or {}
    unknown = [c for c in image if c not in vt.columns]
    if unknown or vt.key not in image:
        raise ApplyError(f"row {row.key!r} does not fit virtual table {vt.name!r} (columns {', '.join(vt.columns)})")
    conn.execute(f"DELETE FROM {quote(vt.name)} WHERE {quote(vt.key)} = ?", (image[vt.key],))
    if row.op is not Op.DELETE:
        conn.execute(f"INSERT INTO {quote(vt.name)}({', '.join(map(quote, image))})"
                     f" VALUES ({', '.join('?' * len(image))})", list(image.values()))


def write_unversioned(conn: apsw.Connection, info: TableInfo, row: CapturedRow, *, cache: bool = True) -> None:
    """A row's image as it is, with no version to compare: a local table's row (only this
    member has it), or a stream transaction's own row written again (`Transactions.resume`)."""
    if info.virtual is not None:
        write_virtual(conn, info.virtual, row)
        return
    if info.pk_columns:
        if row.op is Op.DELETE:
            delete_row(conn, info, row.old or {}, row.key, cache=cache)
        else:
            sql, values = upsert_sql(info, row.new or {})
            conn.execute(sql, values, can_cache=cache)
        return
    if row.op is Op.DELETE:
        conn.execute(f"DELETE FROM {quote(info.name)} WHERE rowid = ?", (row.rowid,), can_cache=cache)
    else:
        values = row.new or {}
        cols = ["rowid", *values]
        conn.execute(
            f"INSERT OR REPLACE INTO {quote(info.name)}({', '.join(map(quote, cols))})"
            f" VALUES ({', '.join('?' * len(cols))})",
            (row.rowid, *values.values()),
            can_cache=cache,
        )


def resolve_after_local_write(
    resolver: UniqueResolver, tables: TableCache, rows: Iterable[CapturedRow]
) -> None:
    """A local transaction supersedes latent images of the keys it wrote and may release
    values latent rows wait for: settle them exactly as an applier will."""
    touched: dict[str, TableInfo] = {}
    for row in rows:
        info = tables.get(row.table)
        if info is not None and info.unique_groups:
            resolver.drop_latent(info.name, row.key)
            touched[info.name] = info
    for info in touched.values():
        if resolver.has_latent(info.name):
            resolver.resolve(info)
