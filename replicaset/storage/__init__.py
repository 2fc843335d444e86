"""The SQLite engine: capture of client changes, versioned apply, checkpoints."""

from replicaset.storage.engine import BatchKind, Engine, EngineConfig, LocalTxn, StatementResult
from replicaset.storage.errors import (
    ApplyError,
    BatchKindError,
    EngineFatal,
    GapError,
    SchemaDivergence,
    SchemaPending,
    SqlError,
)

__all__ = [
    "ApplyError",
    "BatchKind",
    "BatchKindError",
    "Engine",
    "EngineConfig",
    "EngineFatal",
    "GapError",
    "LocalTxn",
    "SchemaDivergence",
    "SchemaPending",
    "SqlError",
    "StatementResult",
]
