"""The write-ahead log: record codec, segment files, the log directory, and the vclock.

It knows nothing of SQL or of the network; payloads are stored byte-for-byte, uninterpreted.
The public names are re-exported here, once; everything else lives in the submodules.
"""

from wal.errors import (
    CorruptRecord,
    InvalidRecord,
    LsnOrderError,
    RecordTooLarge,
    RowsUnavailable,
    TruncatedRecord,
    WalClosed,
    WalCorruption,
    WalError,
    WalWriteError,
)
from wal.group_commit import GroupCommitPolicy
from wal.log import Wal, WalMode, fsync_path
from wal.record import HEADER_SIZE, Record, RecordType, decode_record, encode_record
from wal.segment import read_segment_records
from wal.vclock import LOCAL_ORIGIN, Order, VClock, covers

__all__ = [
    "HEADER_SIZE",
    "CorruptRecord",
    "GroupCommitPolicy",
    "InvalidRecord",
    "LOCAL_ORIGIN",
    "covers",
    "LsnOrderError",
    "Order",
    "Record",
    "RecordTooLarge",
    "RecordType",
    "RowsUnavailable",
    "TruncatedRecord",
    "VClock",
    "Wal",
    "WalClosed",
    "WalCorruption",
    "WalError",
    "WalMode",
    "WalWriteError",
    "decode_record",
    "fsync_path",
    "encode_record",
    "read_segment_records",
]
