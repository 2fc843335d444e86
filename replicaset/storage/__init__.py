"""The SQLite engine: capture of client changes, versioned apply, checkpoints."""

from replicaset.storage.engine import Engine, EngineConfig, StatementResult, LocalTxn
from replicaset.storage.errors import (
    ApplyError,
    EngineFatal,
    GapError,
    SchemaDivergence,
    SchemaPending,
    SqlError,
)

__all__ = [
    "ApplyError",
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
