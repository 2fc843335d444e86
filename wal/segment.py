"""Segment files: the header that records a segment's start vclock, and scanning its records.

A segment is named `%020d.wal` after the signature of the vclock at its start and begins with a
segment header (little-endian): magic u32, version u8, 3 reserved zero bytes, vclock length u32,
checksum u32 (low 32 bits of xxh3_64 over the 12 bytes before it and the packed vclock), then the
packed vclock. Records follow back to back.

Scanning reads by offset from one buffer (bytes or a read-only mmap), never record by record from
the file. It stops at the first position that does not decode and then classifies the tail:
`clean` (nothing left), `torn` (what is left holds no valid record: a crash mid-write, zero fill)
or `corrupt` (a valid record follows the bad bytes, so rows after the damage were acknowledged).
"""

import contextlib
import enum
import mmap
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from xxhash import xxh3_64_intdigest

from wal.errors import CorruptRecord, TruncatedRecord, WalCorruption
from wal.record import RECORD_MAGIC_BYTES, Record, RecordType, decode_record, decode_record_fields
from wal.vclock import VClock

SEGMENT_MAGIC = 0x47455352
"""b"RSEG" read as a little-endian u32."""
SEGMENT_VERSION = 1
SEGMENT_SUFFIX = ".wal"
IN_PROGRESS_SUFFIX = ".wal.inprogress"
MAX_SEGMENT_VCLOCK_BYTES = 512
"""A packed vclock of 32 origins takes at most 323 bytes; more means a damaged length field."""

_SEGMENT_HEADER = struct.Struct("<IB3xII")
_CHECKED_PREFIX = struct.Struct("<IB3xI")
_CHECKSUM = struct.Struct("<I")
_NAME_PATTERN = re.compile(r"^(\d{20})\.wal$")

Buffer = bytes | mmap.mmap


def segment_name(signature: int) -> str:
    return f"{signature:020d}{SEGMENT_SUFFIX}"


def segment_signature(path: Path) -> int:
    """The signature a segment's name claims, which its header must agree with."""
    match = _NAME_PATTERN.match(path.name)
    if match is None:
        raise ValueError(f"{path} is not named like a WAL segment (%020d.wal)")
    return int(match.group(1))


def list_segments(directory: str | os.PathLike[str]) -> list[Path]:
    """Segment files of a log directory, oldest first; other files are not ours and are ignored."""
    paths = [p for p in Path(directory).iterdir() if _NAME_PATTERN.match(p.name) and p.is_file()]
    return sorted(paths, key=segment_signature)


def _checksum(prefix: bytes, packed_vclock: bytes) -> int:
    return xxh3_64_intdigest(prefix + packed_vclock) & 0xFFFFFFFF


def write_segment_header(vclock: VClock) -> bytes:
    packed = vclock.pack()
    prefix = _CHECKED_PREFIX.pack(SEGMENT_MAGIC, SEGMENT_VERSION, len(packed))
    return prefix + _CHECKSUM.pack(_checksum(prefix, packed)) + packed


def read_segment_header(buf: Buffer) -> tuple[VClock, int]:
    """Return the start vclock and the offset of the first record."""
    if len(buf) < _SEGMENT_HEADER.size:
        raise TruncatedRecord(
            f"segment header needs {_SEGMENT_HEADER.size} bytes, the buffer has {len(buf)}"
        )
    magic, version, vclock_len, checksum = _SEGMENT_HEADER.unpack_from(buf, 0)
    if magic != SEGMENT_MAGIC:
        raise CorruptRecord(f"bad segment magic {magic:#010x}")
    if version != SEGMENT_VERSION:
        raise CorruptRecord(f"unknown segment format version {version}")
    if vclock_len > MAX_SEGMENT_VCLOCK_BYTES:
        raise CorruptRecord(
            f"segment vclock length {vclock_len} is over {MAX_SEGMENT_VCLOCK_BYTES}"
        )
    end = _SEGMENT_HEADER.size + vclock_len
    if len(buf) < end:
        raise TruncatedRecord(f"segment header needs {end} bytes, the buffer has {len(buf)}")
    packed = bytes(buf[_SEGMENT_HEADER.size : end])
    if _checksum(bytes(buf[: _CHECKED_PREFIX.size]), packed) != checksum:
        raise CorruptRecord("segment header checksum mismatch")
    try:
        vclock = VClock.unpack(packed)
    except ValueError as exc:
        raise CorruptRecord(f"segment header vclock is invalid: {exc}") from exc
    return vclock, end


@contextlib.contextmanager
def map_segment(path: Path, length: int | None = None) -> Iterator[Buffer]:
    """Map a segment read-only, up to `length` bytes (the durable end of a live segment).

    Mapping only what is known to be written keeps a reader from seeing an append in flight.
    """
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size if length is None else length
        if size == 0:
            yield b""
            return
        with mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ) as mapped:
            yield mapped


class TailKind(str, enum.Enum):
    CLEAN = "clean"
    TORN = "torn"
    CORRUPT = "corrupt"


class RecordScanner:
    """Walks the records of a buffer in order and remembers where the walk stopped.

    After iterating, `valid_end` is the offset after the last valid record and `tail()` classifies
    whatever follows it.
    """

    __slots__ = ("_buf", "valid_end")

    def __init__(self, buf: Buffer, offset: int) -> None:
        self._buf = buf
        self.valid_end = offset

    def __iter__(self) -> Iterator[tuple[int, Record]]:
        for offset, record_type, origin, lsn, txn_id, payload in self.fields():
            yield offset, Record(type=record_type, origin=origin, lsn=lsn, txn_id=txn_id, payload=payload)

    def fields(self) -> Iterator[tuple[int, RecordType, int, int, int, bytes]]:
        """Each record as (offset, type, origin, lsn, txn id, payload), with no `Record`
        object per row, for readers that keep columns; iterating builds the objects."""
        buf = self._buf
        size = len(buf)
        offset = self.valid_end
        while offset < size:
            try:
                record_type, origin, lsn, txn_id, payload, next_offset = decode_record_fields(buf, offset)
            except (TruncatedRecord, CorruptRecord):
                return
            yield offset, record_type, origin, lsn, txn_id, payload
            self.valid_end = offset = next_offset

    def tail(self) -> tuple[TailKind, int | None]:
        """Classify the bytes after `valid_end`; for `corrupt`, also say where valid ones resume."""
        if self.valid_end == len(self._buf):
            return TailKind.CLEAN, None
        following = find_valid_record(self._buf, self.valid_end + 1)
        return (TailKind.TORN, None) if following is None else (TailKind.CORRUPT, following)


def find_valid_record(buf: Buffer, start: int) -> int | None:
    """Offset of the first record at or after `start` that decodes, or None.

    A length field damaged to look larger makes a record appear truncated, so a record that fails
    to decode for any reason is only a torn tail when nothing valid follows it.
    """
    position = buf.find(RECORD_MAGIC_BYTES, start)
    while position != -1:
        try:
            decode_record(buf, position)
        except (TruncatedRecord, CorruptRecord):
            position = buf.find(RECORD_MAGIC_BYTES, position + 1)
        else:
            return position
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentScan:
    start_vclock: VClock
    records: list[tuple[int, Record]]
    valid_end: int
    size_bytes: int
    tail: TailKind
    next_valid_offset: int | None
    """For a `corrupt` tail: the offset of a valid record after the damage."""


def scan_segment(source: str | os.PathLike[str] | bytes) -> SegmentScan:
    """Validate a whole segment (a path or its bytes) and report its records and its tail."""
    if isinstance(source, bytes):
        return _scan_buffer(source)
    with map_segment(Path(source)) as buf:
        return _scan_buffer(buf)


def _scan_buffer(buf: Buffer) -> SegmentScan:
    start_vclock, offset = read_segment_header(buf)
    scanner = RecordScanner(buf, offset)
    records = list(scanner)
    tail, next_valid_offset = scanner.tail()
    return SegmentScan(
        start_vclock=start_vclock,
        records=records,
        valid_end=scanner.valid_end,
        size_bytes=len(buf),
        tail=tail,
        next_valid_offset=next_valid_offset,
    )


def read_segment_records(
    path: str | os.PathLike[str], *, end_offset: int | None = None
) -> Iterator[tuple[int, Record]]:
    """Yield `(offset, record)` of one segment file, for the log's readers and the audit.

    Stops at `end_offset` when given (the durable end of a live segment). Raises `WalCorruption`
    for damage and `TruncatedRecord` when the segment ends in a torn record (a crashed writer, or a
    live segment read without its durable end).
    """
    path = Path(path)
    with map_segment(path, end_offset) as buf:
        try:
            _, offset = read_segment_header(buf)
        except CorruptRecord as exc:
            raise WalCorruption(f"WAL segment {path} has a bad header: {exc}") from exc
        scanner = RecordScanner(buf, offset)
        yield from scanner
        tail, next_valid_offset = scanner.tail()
        if tail is TailKind.CORRUPT:
            raise WalCorruption(
                f"WAL segment {path} is corrupt at offset {scanner.valid_end}; "
                f"valid records follow at offset {next_valid_offset}"
            )
        if tail is TailKind.TORN:
            raise TruncatedRecord(
                f"WAL segment {path} ends in a torn record at offset {scanner.valid_end}"
            )


def is_torn_segment_file(path: Path) -> bool:
    """True when a segment file has no complete header (short, or all zero bytes) and no record.

    That is what a crash leaves of a segment created just before it under `wal_mode = write`
    (the rename reached the disk, the data did not); it holds no record, so dropping it loses none.
    """
    with map_segment(path) as buf:
        try:
            read_segment_header(buf)
            return False
        except TruncatedRecord:
            header_torn = True
        except CorruptRecord:
            header_torn = not bytes(buf).strip(b"\0")
        return header_torn and find_valid_record(buf, 0) is None
