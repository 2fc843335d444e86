"""Point-in-time restore: a checkpoint plus WAL rows up to a bound, replayed into a new data
directory that is a replica set of its own (docs/restore.md).

The public names are re-exported here, once; `base` and `logs` are also what the audit's
convergence check replays with.
"""

from replicaset.restore.bound import Bound, UntilLsn, UntilTime, UntilTxn, parse_until_lsn, parse_until_time, parse_until_txn
from replicaset.restore.build import FailedRow, RestoreResult, restore
from replicaset.restore.errors import BoundNotReached, ReplayStopped, RestoreError
from replicaset.restore.isolation import is_copy

__all__ = [
    "Bound",
    "BoundNotReached",
    "FailedRow",
    "ReplayStopped",
    "RestoreError",
    "RestoreResult",
    "UntilLsn",
    "UntilTime",
    "UntilTxn",
    "is_copy",
    "parse_until_lsn",
    "parse_until_time",
    "parse_until_txn",
    "restore",
]
