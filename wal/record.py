"""The record codec: one WAL row as a fixed 32-byte header followed by its payload.

Header layout (little-endian): magic u32, format version u8, record type u8, origin u16, lsn u64,
txn id u64, payload length u32, checksum u32. The checksum is the low 32 bits of xxh3_64 over the
28 header bytes before it followed by the payload, so a flipped bit anywhere is caught. The
payload is a msgpack document this package stores byte-for-byte and never interprets: every
member keeps the origin's bytes, so one (origin, lsn) has one digest everywhere.
"""

import enum
import struct
from dataclasses import dataclass

from xxhash import xxh3_64_intdigest

from wal.errors import CorruptRecord, InvalidRecord, RecordTooLarge, TruncatedRecord

RECORD_MAGIC = 0x4C415752
"""b"RWAL" read as a little-endian u32."""
RECORD_MAGIC_BYTES = struct.pack("<I", RECORD_MAGIC)
FORMAT_VERSION = 1
HEADER_SIZE = 32

_U16_MAX = 2**16 - 1
_U32_MAX = 2**32 - 1
_U64_MAX = 2**64 - 1

_HEADER = struct.Struct("<IBBHQQII")
_CHECKED_PREFIX = struct.Struct("<IBBHQQI")
_CHECKED_PREFIX_SIZE = _CHECKED_PREFIX.size
_CHECKSUM = struct.Struct("<I")


class RecordType(enum.IntEnum):
    DML = 1
    """A committed data transaction."""
    DDL = 2
    """A schema statement."""
    NOP = 3
    """Reserved for later."""


_TYPES_BY_VALUE = {record_type.value: record_type for record_type in RecordType}


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    type: RecordType
    origin: int
    lsn: int
    txn_id: int
    payload: bytes


def _checksum(prefix: bytes, payload: bytes) -> int:
    return xxh3_64_intdigest(prefix + payload) & _U32_MAX


def encode_record(record: Record, *, max_record_bytes: int) -> bytes:
    """Check every field before encoding, so a bad record fails here and never reaches the disk."""
    payload = record.payload
    if not isinstance(payload, bytes):
        raise InvalidRecord(f"record payload must be bytes, got {type(payload).__name__}")
    size = HEADER_SIZE + len(payload)
    if size > max_record_bytes:
        raise RecordTooLarge(
            f"record of origin {record.origin} lsn {record.lsn} is {size} bytes, "
            f"over the limit of {max_record_bytes} bytes (max_record_bytes)"
        )
    if not isinstance(record.type, RecordType):
        raise InvalidRecord(f"record type must be a RecordType, got {record.type!r}")
    _check_range("origin", record.origin, 0, _U16_MAX)
    _check_range("lsn", record.lsn, 1, _U64_MAX)
    _check_range("txn_id", record.txn_id, 0, _U64_MAX)
    _check_range("payload length", len(payload), 0, _U32_MAX)
    prefix = _CHECKED_PREFIX.pack(
        RECORD_MAGIC,
        FORMAT_VERSION,
        record.type,
        record.origin,
        record.lsn,
        record.txn_id,
        len(payload),
    )
    return prefix + _CHECKSUM.pack(_checksum(prefix, payload)) + payload


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRecord(f"record {name} must be an int in {low}..{high}, got {value!r}")


RecordFields = tuple[RecordType, int, int, int, bytes, int]
"""type, origin, lsn, txn id, payload and the offset after the record."""


def decode_record_fields(buf: bytes | memoryview, offset: int = 0) -> RecordFields:
    """Check and decode the record at `offset` into its fields, without a `Record` object.

    Readers of millions of rows (the audit) keep the fields in columns; `decode_record` builds
    the object. Either way this is the one place that says what a valid record is. Any
    bytes-like buffer with slicing works, an mmap included; only the payload is copied.
    """
    payload_start = offset + HEADER_SIZE
    available = len(buf)
    if offset < 0 or payload_start > available:
        raise TruncatedRecord(
            f"record header at offset {offset} needs {HEADER_SIZE} bytes, "
            f"{max(available - offset, 0)} left"
        )
    magic, version, type_value, origin, lsn, txn_id, length, checksum = _HEADER.unpack_from(
        buf, offset
    )
    if magic != RECORD_MAGIC:
        raise CorruptRecord(f"bad record magic {magic:#010x} at offset {offset}")
    if version != FORMAT_VERSION:
        raise CorruptRecord(f"unknown record format version {version} at offset {offset}")
    end = payload_start + length
    if end > available:
        raise TruncatedRecord(
            f"record payload at offset {offset} needs {length} bytes, "
            f"{available - payload_start} left"
        )
    payload = bytes(buf[payload_start:end])
    prefix = bytes(buf[offset : offset + _CHECKED_PREFIX_SIZE])
    if xxh3_64_intdigest(prefix + payload) & _U32_MAX != checksum:
        raise CorruptRecord(f"record checksum mismatch at offset {offset}")
    record_type = _TYPES_BY_VALUE.get(type_value)
    if record_type is None:
        raise CorruptRecord(f"unknown record type {type_value} at offset {offset}")
    if lsn == 0:
        raise CorruptRecord(f"record with lsn 0 at offset {offset}")
    return record_type, origin, lsn, txn_id, payload, end


def decode_record(buf: bytes | memoryview, offset: int = 0) -> tuple[Record, int]:
    """Decode the record at `offset`, returning it and the offset after it (the hot path of
    recovery)."""
    record_type, origin, lsn, txn_id, payload, end = decode_record_fields(buf, offset)
    record = Record(type=record_type, origin=origin, lsn=lsn, txn_id=txn_id, payload=payload)
    return record, end
