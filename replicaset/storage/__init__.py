"""The SQLite engine: capture of client changes, versioned apply, checkpoints."""

from replicaset.storage.batch import BatchKind
from replicaset.storage.config import EngineConfig
from replicaset.storage.connection_values import ConnectionValues
from replicaset.storage.engine import Engine
from replicaset.storage.errors import (
    ApplyError,
    BatchAbandoned,
    BatchKindError,
    DdlNeedsLock,
    EngineFatal,
    GapError,
    SchemaDivergence,
    SchemaPending,
    SqlError,
    StatementTimeout,
    TxnConflict,
)
from replicaset.storage.statements import StatementShape
from replicaset.storage.tombstones import Purged
from replicaset.storage.transactions import Captured, LocalTxn, StatementResult

__all__ = [
    "ApplyError",
    "BatchAbandoned",
    "BatchKind",
    "BatchKindError",
    "Captured",
    "ConnectionValues",
    "DdlNeedsLock",
    "Engine",
    "EngineConfig",
    "EngineFatal",
    "GapError",
    "LocalTxn",
    "Purged",
    "SchemaDivergence",
    "SchemaPending",
    "SqlError",
    "StatementResult",
    "StatementShape",
    "StatementTimeout",
    "TxnConflict",
]
