"""Where a replay starts: the checkpoint a WAL continues, and an engine opened on it.

The audit's convergence check (`replicaset.audit.replay`) and restore both replay a checkpoint
plus WAL rows with the engine's own `Engine.apply`, and start the same way. The engine is
opened on a directory whose WAL is created first at the base vclock, as `replicaset join`
does: `Engine.open` on a database ahead of an empty WAL would take it for an OS crash and
rebuild it from nothing (docs/design/README.md §4.4).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from replicaset.storage import Engine, EngineConfig
from wal import VClock, Wal


def newest_base(
    checkpoints: Sequence[tuple[Path, VClock]], wal_start: VClock, wal_end: VClock, *, within: Callable[[VClock], bool]
) -> tuple[Path | None, VClock]:
    """The newest checkpoint (of `checkpoints`, oldest first) that the WAL continues, starting at
    or before it and ending at or after it, and that `within` accepts, with its vclock; an
    empty database `(None, VClock())` when none is."""
    for path, vclock in reversed(checkpoints):
        if wal_start <= vclock and vclock <= wal_end and within(vclock):
            return path, vclock
    return None, VClock()


def open_engine_at(
    data_dir: Path, base: Path | None, base_vclock: VClock, *, instance_id: int, local_tables: frozenset[str]
) -> Engine:
    """An engine on `data_dir` (new, or empty) holding `base` (nothing when None) at
    `base_vclock`, ready to apply the rows after it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if base is not None:
        shutil.copyfile(base, data_dir / "db.sqlite")
    Wal.open(data_dir / "wal", start_vclock=base_vclock).close()
    config = EngineConfig(data_dir=data_dir, instance_id=instance_id, local_tables=local_tables)
    return Engine.open(config, clock_ms=lambda: time.time_ns() // 1_000_000)
