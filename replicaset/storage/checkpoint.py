"""Checkpoints: consistent SQLite copies made with `VACUUM INTO` on a reader connection.

A checkpoint's vclock is the `_rs_vclock` table inside the file, so the file and its
vclock can never disagree. Files are named `%020d.snap` by that vclock's signature and
written under a temporary name first, then renamed: a crash leaves no half checkpoint.
A copy is renamed into place only after the WAL was fsynced: every row in the copy was
appended to the WAL before its SQLite commit, so no checkpoint holds a row that an OS crash
can take from the WAL (FINDINGS F2). Such a checkpoint would be skipped at the next start,
then look usable again once new rows reuse those LSNs, and a rebuild from it would bring
back rows no WAL has.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import apsw
import msgpack
import xxhash

from replicaset.storage.errors import CheckpointError
from replicaset.storage.schema import is_internal, load_table, quote, read_vclock
from replicaset.storage.virtual import VirtualTable
from wal import VClock, Wal, fsync_path

SUFFIX = ".snap"
PARTIAL_SUFFIX = ".snap.partial"
STALE_SUFFIX = ".snap.stale"


def vclock_of(path: Path) -> VClock:
    """The vclock inside a checkpoint file. The file may come from a peer or a damaged
    disk, so anything unreadable is a `CheckpointError` naming it, not SQLite's bare
    "file is not a database" from deep inside start or restore."""
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return read_vclock(conn)
        finally:
            conn.close()
    except (apsw.Error, ValueError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} is not a database holding a vclock (_rs_vclock): {exc}") from exc


def log_start(wal: Wal) -> VClock:
    """Where the WAL's oldest segment starts: a checkpoint older than that cannot be
    continued by the WAL, whose rows after it are gone."""
    segments = wal.segments()
    return segments[0][1] if segments else VClock()


def listing(snap_dir: Path) -> list[tuple[Path, VClock]]:
    """Checkpoints from oldest to newest."""
    found = [(p, vclock_of(p)) for p in sorted(snap_dir.glob("*" + SUFFIX))]
    return sorted(found, key=lambda item: item[1].signature)


def newest_usable(snap_dir: Path, wal_start: VClock, wal_end: VClock) -> tuple[Path, VClock] | None:
    """The newest checkpoint that the WAL continues without a hole, with its vclock."""
    usable = [(p, vc) for p, vc in listing(snap_dir) if wal_start <= vc and vc <= wal_end]
    return usable[-1] if usable else None


def set_aside_beyond(snap_dir: Path, wal_end: VClock, log: Callable[..., None]) -> None:
    """At start, before any new row: rename every checkpoint the WAL does not reach (it holds
    rows the WAL lost) out of the listing for good, and keep it for the operator."""
    for path, vclock in listing(snap_dir):
        if not vclock <= wal_end:
            stale = path.with_name(path.stem + STALE_SUFFIX)
            os.replace(path, stale)
            log("checkpoint_set_aside", path=str(stale), vclock=vclock.to_dict(), wal_vclock=wal_end.to_dict())


def remove_partial(snap_dir: Path) -> None:
    for path in snap_dir.glob("*" + PARTIAL_SUFFIX):
        path.unlink()


def make(
    conn: apsw.Connection, snap_dir: Path, *, keep: int, sync_wal: Callable[[], None], log: Callable[..., None]
) -> Path:
    partial = snap_dir / f"{os.getpid()}{PARTIAL_SUFFIX}"
    partial.unlink(missing_ok=True)
    try:
        conn.execute("VACUUM INTO ?", (str(partial),))
    except BaseException:
        partial.unlink(missing_ok=True)  # a copy cut short (a full disk) must not hold the space it took
        raise
    finally:
        conn.close()
    vclock = vclock_of(partial)
    final = snap_dir / f"{vclock.signature:020d}{SUFFIX}"
    fsync_path(partial)
    sync_wal()
    os.replace(partial, final)
    fsync_path(snap_dir)
    log("checkpoint_created", path=str(final), vclock=vclock.to_dict(), bytes=final.stat().st_size)
    for old, _ in listing(snap_dir)[:-keep] if keep > 0 else ():
        old.unlink()
        log("checkpoint_removed", path=str(old))
    return final


def adopt(source: Path, snap_dir: Path) -> Path:
    """Keep a copy of `source`, a checkpoint file received whole (a join's), as this
    member's own checkpoint. Without it a joiner has nothing to rebuild from when its
    SQLite is found ahead of its WAL (a torn tail after an OS crash, docs/design/README.md §4.4), and would
    not start again; Tarantool's replica likewise writes a snapshot at the end of its join.
    The caller has already made the WAL start at this vclock (FINDINGS F2)."""
    snap_dir.mkdir(parents=True, exist_ok=True)
    partial = snap_dir / f"{os.getpid()}{PARTIAL_SUFFIX}"
    shutil.copyfile(source, partial)
    final = snap_dir / f"{vclock_of(partial).signature:020d}{SUFFIX}"
    fsync_path(partial)
    os.replace(partial, final)
    fsync_path(snap_dir)
    return final


def digest(conn: apsw.Connection, exclude: Iterable[str] = ()) -> dict[str, int]:
    """Per-table digest of rows (in primary-key order) and of their versions."""
    skip = set(exclude)
    result: dict[str, int] = {}
    tables = [n for (n,) in conn.execute("SELECT name FROM sqlite_schema WHERE type='table' ORDER BY name")]
    for table in tables:
        if is_internal(table) or table in skip:
            continue
        info = load_table(conn, table)
        if info is not None and info.shadow_of is not None:
            continue  # derived by the module on each member: its layout depends on the order of writes
        h = xxhash.xxh3_64()
        if info is not None and info.virtual is not None:
            _virtual_rows(conn, info.virtual, h)
        else:
            if info is not None and info.pk_columns:
                select, order = "*", ", ".join(map(quote, info.pk_columns))
            else:  # keyed by its rowid, which `*` leaves out
                rowid = quote(info.rowid_key) if info is not None and info.rowid_key else "rowid"
                select, order = f"{rowid}, *", rowid
            for row in conn.execute(f"SELECT {select} FROM {quote(table)} ORDER BY {order}"):
                h.update(_pack(row))
        # Live versions only: a tombstone stands for "no row", and members purge theirs at
        # different times (storage.tombstones), so members holding the same rows compare equal.
        for row in conn.execute(
            "SELECT key, hlc, origin FROM _rs_version WHERE tbl = ? AND deleted = 0 ORDER BY key", (table,)
        ):
            h.update(_pack(row))
        for row in conn.execute("SELECT key, image FROM _rs_latent WHERE tbl = ? ORDER BY key", (table,)):
            h.update(_pack(row))
        result[table] = h.intdigest()
    return result


def _virtual_rows(conn: apsw.Connection, vt: VirtualTable, h: Any) -> None:
    """A virtual table's rows, and for FTS5 what its index holds, token by token
    (fts5vocab's instance view): equal answers to every query, whatever the layout of
    the module's shadow tables."""
    columns = ", ".join(map(quote, vt.columns))
    for row in conn.execute(f"SELECT {columns} FROM {quote(vt.name)} ORDER BY {quote(vt.key)}"):
        h.update(_pack(row))
    if vt.module == "fts5":
        conn.execute(f"CREATE VIRTUAL TABLE temp.rs_vocab USING fts5vocab(main, {quote(vt.name)}, instance)")
        try:
            for row in conn.execute("SELECT * FROM temp.rs_vocab ORDER BY 1, 2, 3, 4"):
                h.update(_pack(row))
        finally:
            conn.execute("DROP TABLE temp.rs_vocab")


def _pack(row: Any) -> bytes:
    return msgpack.packb(list(row), use_bin_type=True)
