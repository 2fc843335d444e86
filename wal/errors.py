"""Exceptions of the wal package.

Every error derives from `WalError` so a caller can stop on any log failure with one `except`.
The record-level errors (`TruncatedRecord`, `CorruptRecord`) describe one buffer; the log-level
ones (`WalCorruption`, `LsnOrderError`, ...) describe what the log as a whole refuses to do.
"""


class WalError(Exception):
    """Base of every error raised by the log."""


class InvalidRecord(WalError, ValueError):
    """A record handed in for writing has a field out of range: a caller's bug, nothing written."""


class RecordTooLarge(InvalidRecord):
    """A record exceeds `max_record_bytes`: refused before any byte reaches the disk."""


class TruncatedRecord(WalError):
    """The buffer ends inside a record or segment header or payload.

    At the end of the last segment this is a torn write from a crash; anywhere else it is damage.
    """


class CorruptRecord(WalError):
    """Bytes that cannot be a record we wrote: bad magic, version, type, field or checksum."""


class WalCorruption(WalError):
    """The log holds damage that is not a torn tail, so acknowledged rows may be lost.

    Recovery refuses to start rather than silently drop rows; the operator re-joins or restores.
    """


class LsnOrderError(WalError):
    """An appended LSN is not exactly `vclock[origin] + 1`: a gap or a reuse, nothing written."""


class RowsUnavailable(WalError):
    """A reader asked for rows older than the first segment: they were collected or never here.

    Streaming from the first segment anyway would hand the reader a hole.
    """


class WalClosed(WalError):
    """An append on a Wal after `close()`."""


class WalWriteError(WalError):
    """An append failed in the operating system; its bytes were rolled back and the vclock kept."""
