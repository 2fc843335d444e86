"""The engine's three SQLite connections, each set up for its one use.

- The writer runs client transactions. WAL journal mode lets readers and the writer go on
  together; `synchronous=NORMAL` is enough because durability comes from our own WAL
  (docs/design/README.md §4.4); foreign keys are on, as clients expect. Opening it creates the internal
  tables.
- The applier applies rows of other origins with triggers and foreign keys off: the
  captured rows already hold what triggers and cascades did on their origin (docs/design/README.md §4.2).
- The reader is read-only: queries and inspection never see a batch before its commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import apsw

from replicaset.storage.errors import EngineFatal
from replicaset.storage.schema import create_internal

BUSY_TIMEOUT_MS = 5000


@dataclass(frozen=True, kw_only=True, slots=True)
class Connections:
    writer: apsw.Connection
    applier: apsw.Connection
    reader: apsw.Connection

    def close(self) -> None:
        for conn in (self.reader, self.applier, self.writer):
            conn.close()


def connect(db_path: Path, *, readonly: bool = False) -> apsw.Connection:
    flags = apsw.SQLITE_OPEN_READONLY if readonly else (apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE)
    conn = apsw.Connection(str(db_path), flags=flags)
    conn.set_busy_timeout(BUSY_TIMEOUT_MS)
    return conn


def open_connections(db_path: Path) -> Connections:
    writer = connect(db_path)
    if writer.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
        raise EngineFatal("SQLite refused WAL journal mode")
    writer.execute("PRAGMA synchronous=NORMAL")
    writer.execute("PRAGMA foreign_keys=ON")
    # Shadow tables of virtual tables stay each member's own: only their module writes them.
    writer.config(apsw.SQLITE_DBCONFIG_DEFENSIVE, 1)
    if writer.execute("PRAGMA synchronous").fetchone()[0] != 1:
        raise EngineFatal("SQLite refused synchronous=NORMAL")
    create_internal(writer)
    applier = connect(db_path)
    applier.execute("PRAGMA synchronous=NORMAL")
    applier.execute("PRAGMA foreign_keys=OFF")
    applier.config(apsw.SQLITE_DBCONFIG_ENABLE_TRIGGER, 0)
    return Connections(writer=writer, applier=applier, reader=connect(db_path, readonly=True))
