"""What the engine knows about tables: columns, primary keys, unique indexes, hashes.

Internal tables start with `_rs_`; they live in the same SQLite file so that a row, its
version and the applied vclock always change in one transaction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import apsw
import msgpack
import xxhash

from replicaset.storage.renames import SCHEMA_LOG_DDL, SchemaLog, changes_of
from replicaset.storage.tokens import Kind, meaningful, quote, tokenize
from replicaset.storage.virtual import Declared, VirtualTable, declared, describe
from wal import LOCAL_ORIGIN, VClock

INTERNAL_PREFIX = "_rs_"
# The names SQLite knows a rowid by, unless a column took the name.
ROWID_NAMES = ("rowid", "_rowid_", "oid")

INTERNAL_DDL = (
    "CREATE TABLE IF NOT EXISTS _rs_vclock(origin INTEGER PRIMARY KEY, lsn INTEGER NOT NULL)",
    # `lsn`: the row that wrote the version (`origin:lsn`), by which tombstones are purged.
    "CREATE TABLE IF NOT EXISTS _rs_version(tbl TEXT NOT NULL, key TEXT NOT NULL,"
    " hlc INTEGER NOT NULL, origin INTEGER NOT NULL, deleted INTEGER NOT NULL, lsn INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY (tbl, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS _rs_meta(name TEXT PRIMARY KEY, value)",
    "CREATE TABLE IF NOT EXISTS _rs_latent(tbl TEXT NOT NULL, key TEXT NOT NULL, image BLOB NOT NULL,"
    " PRIMARY KEY (tbl, key)) WITHOUT ROWID",
    # The quorum transactions whose row this member holds, written with the row itself.
    "CREATE TABLE IF NOT EXISTS _rs_quorum(txn_id INTEGER PRIMARY KEY, origin INTEGER NOT NULL, lsn INTEGER NOT NULL)",
)


_TOMBSTONE_INDEX = "CREATE INDEX IF NOT EXISTS _rs_tombstones ON _rs_version(origin, lsn) WHERE deleted = 1"


def create_internal(writer: apsw.Connection) -> None:
    """The internal tables, and the `lsn` of versions a database made before it was kept:
    each gets its origin's LSN in the vclock, an upper bound of the true one, so that its
    tombstone is purged later than it could be, never sooner."""
    for ddl in (*INTERNAL_DDL, *SCHEMA_LOG_DDL):
        writer.execute(ddl)
    if "lsn" not in {row[1] for row in writer.execute("PRAGMA table_info(_rs_version)")}:
        with writer:
            writer.execute("ALTER TABLE _rs_version ADD COLUMN lsn INTEGER NOT NULL DEFAULT 0")
            writer.execute("UPDATE _rs_version SET lsn = coalesce("
                           "(SELECT v.lsn FROM _rs_vclock v WHERE v.origin = _rs_version.origin), 0)")
    writer.execute(_TOMBSTONE_INDEX)


def committed_schema_id(conn: apsw.Connection) -> tuple[int, int]:
    """`(origin, lsn)` of the last replicated DDL row, as `conn` sees the database."""
    row = conn.execute("SELECT value FROM _rs_meta WHERE name = 'schema_id'").fetchone()
    origin, lsn = msgpack.unpackb(row[0]) if row else (0, 0)
    return (origin, lsn)


def read_vclock(conn: apsw.Connection) -> VClock:
    """The vclock committed with the rows, as `conn` sees the database."""
    return VClock(dict(conn.execute("SELECT origin, lsn FROM _rs_vclock").fetchall()))


def is_internal(table: str) -> bool:
    return table.startswith(INTERNAL_PREFIX) or table.startswith("sqlite_")


@dataclass(frozen=True, slots=True, kw_only=True)
class Predicate:
    """The WHERE of a partial UNIQUE index: two rows collide under the index only when
    both satisfy it. `where` is its text, as it can follow `WHERE` in a query on the table;
    `probe` asks the same of values bound in the order of `names` (a subquery named as the
    table, each value under its column's collation), for an image that is not in the table.
    A predicate naming a generated column has no probe (images do not carry those columns):
    an image is taken to satisfy it, so only rows in the table are told apart by it."""

    where: str
    probe: str | None
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableInfo:
    """`columns` are the writable ones, which images carry; generated columns are
    computed again on every member. Positions index the preupdate hook's tuple, which
    holds the stored columns (writable and STORED generated) in declaration order. A
    virtual table (`virtual`) is keyed by its rowid and has no positions: the hook never
    sees it. A shadow table names the virtual table it belongs to (`shadow_of`). SQLite
    calls a rowid by one of three names a column may take: `rowid_name` is the first of them
    no column took (None for a WITHOUT ROWID table, or when all three are taken). A table
    without a declared primary key is keyed by its rowid (`rowid_key`). `stored_columns`
    name the hook's tuple. `unique_predicates` go with `unique_indexes`, one for one: the
    WHERE of a partial index, None for a full one."""

    name: str
    columns: tuple[str, ...]
    capture_positions: tuple[int, ...]
    pk_columns: tuple[str, ...]
    pk_positions: tuple[int, ...]
    rowid_alias: str | None
    unique_indexes: tuple[tuple[str, ...], ...]
    virtual_columns: tuple[str, ...]
    virtual: VirtualTable | None = None
    shadow_of: Declared | None = None
    rowid_name: str | None = None
    stored_columns: tuple[str, ...] = ()
    unique_predicates: tuple[Predicate | None, ...] = ()

    @property
    def rowid_key(self) -> str | None:
        """The name of the rowid when it is the table's key: no declared key."""
        return self.rowid_name if not self.pk_columns and self.shadow_of is None else None

    @property
    def rowid_column(self) -> str | None:
        """The name the rowid goes by in images and in an insert: the INTEGER PRIMARY KEY,
        or for a table without a declared key the rowid itself, which is then its key."""
        return self.rowid_alias or self.rowid_key

    @property
    def key_columns(self) -> tuple[str, ...]:
        """What identifies a row on every member: the declared key, else the rowid, which
        the engine assigns cluster-unique (auto_ids.py) and rows carry beside their image."""
        if self.pk_columns or self.rowid_key is None:
            return self.pk_columns
        return (self.rowid_key,)

    @property
    def unique_groups(self) -> tuple[tuple[str, ...], ...]:
        """Column groups two rows may not share. The primary key is one when it is not an
        integer rowid: SQLite may hold 'Ann' and 'ann' (NOCASE) or 1 and 1.0 as one key,
        whose intent keys differ, so they must be settled like a UNIQUE collision."""
        if self.rowid_alias is None and self.pk_columns:
            return (self.pk_columns, *self.unique_indexes)
        return self.unique_indexes

    @property
    def unique_rules(self) -> tuple[tuple[tuple[str, ...], Predicate | None], ...]:
        """`unique_groups`, each with the predicate two rows must both satisfy to collide
        on it (None: any two rows)."""
        key_groups = self.unique_groups[: len(self.unique_groups) - len(self.unique_indexes)]
        return (*((group, None) for group in key_groups),
                *zip(self.unique_indexes, self.unique_predicates, strict=True))

    def column_positions(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.columns)}


def load_table(conn: apsw.Connection, table: str) -> TableInfo | None:
    virtual = declared(conn)
    if table in virtual:
        vt = describe(conn, virtual[table])
        return TableInfo(name=table, columns=vt.columns, capture_positions=(), pk_columns=(vt.key,), pk_positions=(),
                         rowid_alias=None, unique_indexes=(), virtual_columns=(), virtual=vt)
    rows = conn.execute(f"PRAGMA main.table_xinfo({quote(table)})").fetchall()
    if not rows:
        return None
    owner = next((vt for vt in virtual.values() if vt.owns_shadow(table)), None)
    stored = [r[1] for r in rows if r[6] in (0, 3)]
    columns = tuple(r[1] for r in rows if r[6] == 0)
    pk = sorted((r[5], r[1]) for r in rows if r[5] > 0)
    pk_columns = tuple(name for _, name in pk)
    positions = {name: i for i, name in enumerate(stored)}
    without_rowid = bool(pk_columns) and conn.execute(
        "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", (table,)).fetchone()[0]
    rowid_alias = None
    if len(pk_columns) == 1:
        decl = next(r[2] for r in rows if r[1] == pk_columns[0])
        if decl.upper() == "INTEGER" and not without_rowid:
            rowid_alias = pk_columns[0]
    names = {r[1].lower() for r in rows}
    free_names = tuple(name for name in ROWID_NAMES if name not in names)
    uniques = []
    for _, index_name, unique, origin, partial in conn.execute(
        f"PRAGMA main.index_list({quote(table)})"
    ).fetchall():
        if unique and origin != "pk":
            cols = tuple(
                r[2] for r in conn.execute(f"PRAGMA main.index_info({quote(index_name)})")
            )
            if all(c is not None for c in cols):
                uniques.append((cols, index_name if partial else None))
    info = TableInfo(
        name=table,
        columns=columns,
        capture_positions=tuple(positions[c] for c in columns),
        pk_columns=pk_columns,
        pk_positions=tuple(positions[c] for c in pk_columns),
        rowid_alias=rowid_alias,
        unique_indexes=tuple(cols for cols, _ in uniques),
        virtual_columns=tuple(r[1] for r in rows if r[6] == 2),
        shadow_of=owner,
        rowid_name=None if without_rowid else next(iter(free_names), None),
        stored_columns=tuple(stored),
        unique_predicates=(None,) * len(uniques),
    )
    if not any(partial for _, partial in uniques):
        return info
    # The rowid's name in images, and the names a partial index's predicate may call it by.
    rowid = (info.rowid_column, free_names) if info.rowid_column is not None else None
    return dataclasses.replace(info, unique_predicates=tuple(
        partial_predicate(conn, table, partial, columns, rowid) if partial else None for _, partial in uniques))


def partial_predicate(
    conn: apsw.Connection, table: str, index: str, columns: tuple[str, ...], rowid: tuple[str, tuple[str, ...]] | None
) -> Predicate:
    """The WHERE of the partial index `index` on `table`: the text after the index's
    top-level WHERE (the column list is inside parentheses, so the first WHERE outside
    them is the predicate's). The probe binds the writable columns under their collations,
    so that `s = 'open'` compares as in the index on a NOCASE column, and the rowid
    (`rowid`: the name images carry it by, and the names SQLite calls it by that no column
    took) under each of those names. Generated columns are not bound: a predicate naming
    one gets no probe. Affinity is not carried over: an image holds values as stored, and
    only a predicate comparing a column with a literal of another type (a TEXT column with
    `= 1`) could answer otherwise than the index."""
    sql = conn.execute("SELECT sql FROM main.sqlite_schema WHERE type = 'index' AND name = ?", (index,)).fetchone()[0]
    tokens = tokenize(sql)
    start = next(i for i, token in meaningful(tokens) if token.depth == 0 and token.is_word("WHERE"))
    # SQLite keeps a comment that ends the statement; a line comment would swallow what follows.
    where = "".join(" " if token.kind is Kind.SPACE else token.text for token in tokens[start + 1:]).strip()
    sources = [(c, c) for c in columns]
    if rowid is not None:
        source, aliases = rowid
        sources += [(name, source) for name in dict.fromkeys((source, *aliases)) if name not in columns]
    values = ", ".join(
        f"? COLLATE {quote(collation(conn, table, source))} AS {quote(name)}" for name, source in sources
    )
    probe: str | None = f"SELECT 1 FROM (SELECT {values}) AS {quote(table)} WHERE {where}"
    try:
        conn.execute(probe, [None] * len(sources)).fetchall()
    except apsw.SQLError:
        probe = None  # "no such column": the predicate names a generated column
    return Predicate(where=where, probe=probe, names=tuple(source for _, source in sources))


def collation(conn: apsw.Connection, table: str, column: str) -> str:
    """The collation `column` of `table` compares by; the rowid has none but BINARY."""
    return str(conn.column_metadata("main", table, column)[1])


def user_objects(conn: apsw.Connection) -> list[tuple[str, str, str, str]]:
    """(type, name, tbl_name, sql) of every schema object a client made, in name order."""
    return [
        row
        for row in conn.execute(
            "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_schema ORDER BY type, name"
        ).fetchall()
        if not is_internal(row[2]) and not is_internal(row[1])
    ]


def schema_hash(conn: apsw.Connection, local_tables: frozenset[str]) -> int:
    """A digest of the replicated schema; members holding equal schemas hold equal hashes."""
    digest = xxhash.xxh3_64()
    for kind, name, tbl_name, sql in user_objects(conn):
        if tbl_name in local_tables:
            continue
        digest.update(f"{kind}\x1f{name}\x1f{sql}\x1e".encode())
    return digest.intdigest()


class TableCache:
    """Table descriptions for one connection; the engine drops them after every DDL."""

    def __init__(self, conn: apsw.Connection) -> None:
        self._conn = conn
        self._tables: dict[str, TableInfo | None] = {}
        self._external: dict[str, tuple[Declared, ...]] | None = None

    def invalidate(self) -> None:
        self._tables.clear()
        self._external = None

    def external_indexes(self, table: str) -> tuple[Declared, ...]:
        """The external-content FTS5 tables whose content is `table`."""
        return self._externals().get(table, ())

    def has_external_indexes(self) -> bool:
        return bool(self._externals())

    def _externals(self) -> dict[str, tuple[Declared, ...]]:
        if self._external is None:
            self._external = {}
            for vt in declared(self._conn).values():
                if vt.content:
                    self._external[vt.content] = (*self._external.get(vt.content, ()), vt)
        return self._external

    def get(self, table: str) -> TableInfo | None:
        if table not in self._tables:
            self._tables[table] = load_table(self._conn, table)
        return self._tables[table]


SchemaObject = tuple[str, str, str, str]


class SchemaState:
    """The schema this member has settled on, which the write and apply paths hold changes
    against: its hash (a DDL row carries the hash it was written against), its id (the last
    replicated DDL row, which data rows name and wait for) and the client objects it holds
    (to tell which tables a DDL statement touched). The table descriptions cached for each
    connection are stale whenever it moves, so it drops them."""

    def __init__(self, writer: apsw.Connection, caches: Sequence[TableCache], local_tables: frozenset[str]) -> None:
        self._writer = writer
        self._caches = tuple(caches)
        self._local_tables = local_tables
        self.hash = 0
        self.schema_id: tuple[int, int] = (0, 0)
        self.known_objects: set[SchemaObject] = set()
        self.ddl_count = 0  # DDL rows settled so far: the access cache notices a change by it
        self.log = SchemaLog()  # the renames and drops rows written before them are carried through
        self.reload()

    def reload(self) -> None:
        """Read it all again from what the writer sees: after a batch was rolled back, the
        schema is older than what the batch had settled."""
        self.invalidate()
        self.log.forget()
        self.hash = self.hash_of(self._writer)
        self.schema_id = committed_schema_id(self._writer)
        self.known_objects = set(user_objects(self._writer))

    def invalidate(self) -> None:
        for cache in self._caches:
            cache.invalidate()

    def hash_of(self, conn: apsw.Connection) -> int:
        """The replicated schema as `conn` sees it, which may hold a change not settled yet."""
        return schema_hash(conn, self._local_tables)

    def touched_tables(self) -> set[str]:
        """Tables whose schema objects on the writer differ from the settled ones."""
        now = set(user_objects(self._writer))
        return {table for _, _, table, _ in now ^ self.known_objects}

    def ddl_applied(self, conn: apsw.Connection, origin: int, lsn: int, sql: str) -> None:
        """Settle the DDL row `origin:lsn` that `conn` just ran in its batch (its text
        `sql`): a replicated one becomes the schema id and enters the schema log with what
        it renamed and dropped, in the same transaction; versions of tables it dropped go
        with them."""
        if origin != LOCAL_ORIGIN:
            self.schema_id = (origin, lsn)
            conn.execute(
                "INSERT OR REPLACE INTO _rs_meta(name, value) VALUES ('schema_id', ?)",
                (msgpack.packb(list(self.schema_id)),),
            )
            tables = ({name for kind, name, _, _ in objects if kind == "table"}
                      for objects in (self.known_objects, user_objects(conn)))
            self.log.record(conn, self.schema_id, changes_of(sql, *tables))
        self.ddl_count += 1
        for internal in ("_rs_version", "_rs_latent"):
            conn.execute(
                f"DELETE FROM {internal} WHERE tbl NOT IN (SELECT name FROM sqlite_schema WHERE type = 'table')"
            )
        self.invalidate()
        self.known_objects = set(user_objects(conn))

