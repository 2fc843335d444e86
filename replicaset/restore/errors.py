"""Exceptions of restore; each says what the operator can change to get the copy.

`RestoreError` is an input that cannot give a copy (a bad argument, NEW_DIR not empty, a WAL
damaged or missing rows, members that diverged). Its subclasses are a restore that ran and
could not finish: the bound is not in the WALs given, or a row failed without `--skip-failed`.
"""

from __future__ import annotations


class RestoreError(Exception):
    """The inputs cannot give the copy asked for; nothing was written to NEW_DIR."""


class BoundNotReached(RestoreError):
    """The WALs given do not reach the bound: the row or transaction is in none of them, or
    no row was committed after the time, so nothing shows the WALs cover it."""


class ReplayStopped(RestoreError):
    """A row could not be applied and `--skip-failed` was not given; the row is named."""

    def __init__(self, message: str, *, origin: int, lsn: int, txn_id: int) -> None:
        super().__init__(message)
        self.origin = origin
        self.lsn = lsn
        self.txn_id = txn_id
