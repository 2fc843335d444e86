"""Tombstone purge, the storage half (docs/design/tombstone-purge.md; the decision is
`core.purge`). One purge is one local SQLite transaction on the writer, not a WAL row: no
other member hears of it, and a checkpoint carries its result. An OS crash that loses it
loses only tombstones a later pass purges again.

The highest stamp purged is kept (`_rs_meta` 'purged_hlc') in the same transaction: the
tombstones were the only record of those stamps once WAL GC removed their rows, and a
restarted member (or a joiner of this database) must never stamp below a tombstone other
members still keep (`recovery.hlc_seed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import apsw

from replicaset.storage.apply import HLC_SQL_OFFSET

_UNDER = "FROM _rs_version WHERE deleted = 1 AND origin = ? AND lsn BETWEEN 1 AND ?"
_GET_PURGED = "SELECT value FROM _rs_meta WHERE name = 'purged_hlc'"
_SET_PURGED = "INSERT OR REPLACE INTO _rs_meta(name, value) VALUES ('purged_hlc', ?)"


@dataclass(frozen=True, slots=True)
class Purged:
    tombstones: int
    purged_hlc: int  # the highest stamp ever purged here, 0 when none was


def purged_hlc(conn: apsw.Connection) -> int:
    row = conn.execute(_GET_PURGED).fetchone()
    return 0 if row is None else row[0] + HLC_SQL_OFFSET


def purge(writer: apsw.Connection, bound: Mapping[int, int]) -> Purged:
    """Delete every tombstone whose row `origin:lsn` is under `bound` (origin -> LSN), in
    one transaction with the highest stamp it held."""
    count = 0
    with writer:
        highest = purged_hlc(writer)
        for origin, lsn in sorted(bound.items()):
            top = writer.execute(f"SELECT max(hlc) {_UNDER}", (origin, lsn)).fetchone()[0]
            if top is None:
                continue
            highest = max(highest, top + HLC_SQL_OFFSET)
            writer.execute(f"DELETE {_UNDER}", (origin, lsn))
            count += writer.changes()
        if count:
            writer.execute(_SET_PURGED, (highest - HLC_SQL_OFFSET,))
    return Purged(tombstones=count, purged_hlc=highest)


def tombstone_count(conn: apsw.Connection) -> int:
    return conn.execute("SELECT count(*) FROM _rs_version WHERE deleted = 1").fetchone()[0]
