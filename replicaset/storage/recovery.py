"""Opening the engine's files and bringing SQLite and the WAL to agree (docs/design/README.md §4.4).

Theory of operation. SQLite commits a batch only after the WAL holds it, so at start
SQLite's `_rs_vclock` is at or behind the WAL's, and the rows it lacks are replayed from
the WAL through the apply path, in batches that are not logged again; that needs SQLite
at or past the WAL's start (FINDINGS F3: below it, after WAL GC, the database is rebuilt
from a checkpoint as when it is ahead). SQLite ahead of the
WAL means the WAL lost rows whose SQLite commit had followed (an OS crash under
wal_mode=write): the database is rebuilt from the newest checkpoint the WAL continues
(from nothing when the WAL starts at zero) and what SQLite held beyond the WAL is logged
as dropped. Checkpoints the WAL does not reach are set aside first, for good: they hold
rows the WAL lost, and must never become a base once new rows reuse those LSNs.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from replicaset.storage import checkpoint as checkpoints
from replicaset.storage.apply import HLC_SQL_OFFSET
from replicaset.storage.config import EngineConfig
from replicaset.storage.connections import Connections, open_connections
from replicaset.storage.errors import EngineFatal
from replicaset.storage.schema import read_vclock
from replicaset.storage.tombstones import purged_hlc
from wal import Record, VClock, Wal

REPLAY_BATCH_ROWS = 1000
# Room for a record's header and framing around the largest transaction allowed.
RECORD_OVERHEAD_BYTES = 4096


@dataclass(frozen=True, kw_only=True, slots=True)
class Opened:
    """The files, open, with SQLite at or behind the WAL; `vclock` is SQLite's."""

    wal: Wal
    connections: Connections
    vclock: VClock


def open_files(config: EngineConfig, log: Callable[..., None]) -> Opened:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    config.snap_dir.mkdir(exist_ok=True)
    checkpoints.remove_partial(config.snap_dir)
    wal = Wal.open(
        config.wal_dir,
        mode=config.wal_mode,
        max_size_bytes=config.wal_max_size_bytes,
        max_record_bytes=config.max_txn_bytes + RECORD_OVERHEAD_BYTES,
        log=log,
    )
    connections = open_connections(config.db_path)
    sqlite_vclock = read_vclock(connections.writer)
    wal_vclock = wal.vclock
    checkpoints.set_aside_beyond(config.snap_dir, wal_vclock, log)
    if not (checkpoints.log_start(wal) <= sqlite_vclock and sqlite_vclock <= wal_vclock):
        connections.close()
        _rebuild(config, wal, sqlite_vclock, log)
        connections = open_connections(config.db_path)
        sqlite_vclock = read_vclock(connections.writer)
    return Opened(wal=wal, connections=connections, vclock=sqlite_vclock)


def _rebuild(config: EngineConfig, wal: Wal, sqlite_vclock: VClock, log: Callable[..., None]) -> None:
    """Replace the database by the newest checkpoint the WAL continues, or by nothing when
    the WAL holds every row from the start; the replay brings it up to the WAL. SQLite
    ahead of the WAL lost rows with an OS crash; SQLite behind the WAL's start (an OS crash
    took SQLite's last commits after WAL GC removed the segments holding them: FINDINGS F3)
    cannot be replayed from the log alone."""
    wal_vclock = wal.vclock
    wal_start = checkpoints.log_start(wal)
    if sqlite_vclock <= wal_vclock:
        log("sqlite_behind_wal_start", sqlite_vclock=sqlite_vclock.to_dict(), wal_start=wal_start.to_dict())
    else:
        log(
            "sqlite_ahead_of_wal",
            sqlite_vclock=sqlite_vclock.to_dict(),
            wal_vclock=wal_vclock.to_dict(),
            dropped={o: lsn - wal_vclock.get(o) for o, lsn in sqlite_vclock.items() if lsn > wal_vclock.get(o)},
        )
    usable = checkpoints.newest_usable(config.snap_dir, wal_start, wal_vclock)
    base = usable[0] if usable else None
    if base is None and wal_start.signature != 0:
        raise EngineFatal(
            f"SQLite's vclock {sqlite_vclock.to_dict()} lies outside the WAL and no checkpoint lies between "
            f"the WAL start {wal_start.to_dict()} and its end {wal_vclock.to_dict()}: restore or re-join"
        )
    for suffix in ("", "-wal", "-shm"):
        Path(str(config.db_path) + suffix).unlink(missing_ok=True)
    if base is not None:
        shutil.copyfile(base, config.db_path)
    log("rebuild_from_checkpoint", checkpoint=str(base) if base else None)


def hlc_seed(wal: Wal, writer: apsw.Connection) -> int:
    """The highest stamp already used here, which the HLC must stay above after a restart:
    the log's, the stored versions' (a joiner's log starts empty at its checkpoint, and
    WAL GC removes old rows) and the highest tombstone purged (`storage.tombstones`)."""
    stored = writer.execute("SELECT max(hlc) FROM _rs_version").fetchone()[0]
    return max(wal.max_txn_id, 0 if stored is None else stored + HLC_SQL_OFFSET, purged_hlc(writer))


def replay(
    wal: Wal,
    start: VClock,
    *,
    apply: Callable[[Record], object],
    flush: Callable[[], list[Record]],
    log: Callable[..., None],
) -> None:
    """Apply every WAL record beyond `start` (SQLite's vclock) and flush them, in bounded
    batches so that a long WAL does not make one huge SQLite transaction."""
    replayed = 0
    reached = start.copy()
    for record in wal.read_from(start):
        apply(record)
        replayed += 1
        if replayed % REPLAY_BATCH_ROWS == 0:
            _follow(reached, flush())
    _follow(reached, flush())
    if replayed:
        log("wal_replayed", rows=replayed, vclock=reached.to_dict())


def _follow(vclock: VClock, records: list[Record]) -> None:
    for record in records:
        vclock.reset(record.origin, record.lsn)
