"""Errors of the storage engine; each says what the user can do about it."""


class SqlError(Exception):
    """A client statement was refused or failed; nothing it did remains."""


class StatementTimeout(SqlError):
    """A client's statement ran past `sql.statement_timeout_s` and was stopped; nothing it
    did remains, and it may be run again with a narrower one (or a larger limit)."""


class BatchAbandoned(StatementTimeout):
    """A write statement was stopped at the time limit, and SQLite rolled back the whole
    transaction it ran in (its rule for an interrupted write): the open batch, with the
    other clients' transactions queued in it and not yet durable, is gone too. The writer
    fails their tickets; nothing of the batch reached the WAL, so nothing acknowledged is lost."""


class TxnConflict(SqlError):
    """A stream transaction wrote a row that another transaction committed since, or the
    schema it ran against changed: nothing of it remains, and it may be run again
    (ER_TRANSACTION_CONFLICT, as a quorum transaction that meets a newer version)."""


class DdlNeedsLock(SqlError):
    """A replicated DDL statement ran outside the set's DDL lock: it was undone, and is to
    be run again as a quorum transaction, which takes the lock (docs/design/README.md §4.6)."""


class ApplyError(Exception):
    """A replicated row could not be applied; the upstream that sent it stops."""


class GapError(ApplyError):
    """A row arrived whose LSN is beyond the next one expected from its origin."""


class SchemaPending(GapError):
    """A data row names a schema (the DDL row `origin:lsn`) not applied here yet: wait for it."""

    def __init__(self, message: str, schema_id: tuple[int, int]) -> None:
        super().__init__(message)
        self.schema_id = schema_id


class SchemaDivergence(ApplyError):
    """A DDL row was written against a schema that differs from ours."""


class CheckpointError(Exception):
    """A checkpoint file is not a SQLite database holding a vclock (damaged, truncated, or
    not a checkpoint at all): it cannot be a base, and the message names the file."""


class EngineFatal(Exception):
    """The WAL and SQLite may disagree; the process must stop and recover at restart."""


class BatchKindError(Exception):
    """A caller opened a batch of one kind (local writes, applied rows) while one of the
    other kind is open. The engine never flushes on its own: a flush that bypasses the
    writer would leave its rows unrelayed and its clients unanswered."""
