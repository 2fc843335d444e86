"""The engine's settings and where its files live.

Apart from the engine so that the modules it is made of (recovery, statement admission,
the write path) take their settings without importing the facade that assembles them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wal import WalMode


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    data_dir: Path
    instance_id: int
    wal_mode: WalMode = WalMode.WRITE
    wal_max_size_bytes: int = 64 * 1024 * 1024
    max_txn_bytes: int = 16 * 1024 * 1024
    local_tables: frozenset[str] = frozenset()
    auto_id_mode: str = "compact"
    checkpoint_count: int = 2
    # A replicated DDL statement is decided under the set's DDL lock, as a quorum
    # transaction: `execute` refuses it (DdlNeedsLock) and `capture` takes it.
    ddl_lock: bool = False
    # A client's statement is stopped past this many seconds (0: no limit): statements run
    # on the event loop, which serves every other client and peer meanwhile.
    statement_timeout_s: float = 0.0

    @property
    def db_path(self) -> Path:
        return self.data_dir / "db.sqlite"

    @property
    def wal_dir(self) -> Path:
        return self.data_dir / "wal"

    @property
    def snap_dir(self) -> Path:
        return self.data_dir / "snap"
