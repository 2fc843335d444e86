"""The Spark WAL-merge audit: many members' WALs as one DataFrame, checked for apply-once,
per-origin order, agreement, completeness and convergence (docs/audit.md).

PySpark is imported lazily (inside functions), so `import replicaset.audit` stays cheap.
"""

from replicaset.audit.inputs import AuditInputError, MemberInput, discover
from replicaset.audit.run import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_VIOLATIONS,
    AuditRunError,
    main,
    run_audit,
)

__all__ = [
    "EXIT_CLEAN",
    "EXIT_ERROR",
    "EXIT_VIOLATIONS",
    "AuditInputError",
    "AuditRunError",
    "MemberInput",
    "discover",
    "main",
    "run_audit",
]
