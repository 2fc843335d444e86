"""The WAL reader under damaged bytes: a record whose checksum holds, or a WAL error.

A WAL is read back at start, by relays and by the audit, from disks that tear writes and
from peers that send anything; so `decode_record` gets arbitrary and mutated bytes, a
segment gets garbage appended or written over, and recovery opens such a directory. The
reader may only return records that re-encode to the very bytes read (so none failing its
checksum), raise the documented `WalError` kinds, stop at a torn tail, or refuse to open.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import byte_mutations, examples, fuzz, mutate_bytes
from wal import (
    CorruptRecord,
    Record,
    RecordType,
    TruncatedRecord,
    VClock,
    Wal,
    WalCorruption,
    decode_record,
    encode_record,
    read_segment_records,
)
from wal.segment import TailKind, scan_segment, segment_name, write_segment_header

MAX_RECORD_BYTES = 1 << 20
ROWS = [
    Record(type=RecordType.DML, origin=1, lsn=1, txn_id=500, payload=b"\x91\x01"),
    Record(type=RecordType.DDL, origin=2, lsn=1, txn_id=900, payload=b"CREATE TABLE t(a)"),
    Record(type=RecordType.DML, origin=1, lsn=2, txn_id=700, payload=b""),
    Record(type=RecordType.NOP, origin=0, lsn=1, txn_id=0, payload=b"x" * 300),
]
ENCODED = [encode_record(r, max_record_bytes=MAX_RECORD_BYTES) for r in ROWS]
HEADER = write_segment_header(VClock())
SEGMENT = HEADER + b"".join(ENCODED)
OFFSETS = [len(HEADER) + sum(map(len, ENCODED[:i])) for i in range(len(ENCODED))]


def _decode_checked(buf: bytes, offset: int) -> tuple[Record, int] | None:
    try:
        record, end = decode_record(buf, offset)
    except (TruncatedRecord, CorruptRecord):
        return None
    assert buf[offset:end] == encode_record(record, max_record_bytes=1 << 40)  # its checksum holds
    return record, end


@examples(ci=500, deep=100_000)
def test_arbitrary_bytes_decode_only_as_checksummed_records(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(data=st.binary(max_size=200), offset=st.integers(-4, 220))
    def check(data: bytes, offset: int) -> None:
        _decode_checked(data, offset)

    check()


@examples(ci=500, deep=100_000)
def test_mutated_records_decode_only_as_checksummed_records(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(index=st.integers(0, len(ENCODED) - 1), steps=byte_mutations)
    def check(index: int, steps: list) -> None:
        _decode_checked(mutate_bytes(ENCODED[index], steps), 0)

    check()


@examples(ci=200, deep=50_000)
def test_a_segment_with_garbage_after_its_records_keeps_them_and_reports_a_torn_tail(max_examples: int) -> None:
    torn_records = st.builds(lambda r, n: r[: n % len(r)], st.sampled_from(ENCODED), st.integers(1, 400))

    @fuzz(max_examples)
    @given(garbage=st.binary(min_size=1, max_size=100) | torn_records.filter(bool))
    def check(garbage: bytes) -> None:
        scan = scan_segment(SEGMENT + garbage)
        assert [r for _, r in scan.records] == ROWS and scan.valid_end == len(SEGMENT)
        assert scan.tail is TailKind.TORN

    check()


@examples(ci=300, deep=50_000)
def test_a_damaged_segment_reads_as_a_prefix_of_its_records_then_a_wal_error(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(steps=byte_mutations)
    def check(steps: list) -> None:
        data = mutate_bytes(SEGMENT, steps)
        read: list[tuple[int, Record]] = []
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / segment_name(0)
            path.write_bytes(data)
            try:
                for offset, record in read_segment_records(path):
                    read.append((offset, record))
            except (TruncatedRecord, WalCorruption):
                pass
        for offset, record in read:
            assert data[offset : offset + 32 + len(record.payload)] == encode_record(record, max_record_bytes=1 << 40)
        # The records wholly before the first damaged byte are read back, in order.
        first_damage = next((i for i, (a, b) in enumerate(zip(data, SEGMENT)) if a != b), min(len(data), len(SEGMENT)))
        if first_damage >= len(HEADER):
            before = [(o, r) for o, r, e in zip(OFFSETS, ROWS, ENCODED, strict=True) if o + len(e) <= first_damage]
            assert read[: len(before)] == before

    check()


@examples(ci=100, deep=10_000)
def test_recovery_cuts_a_torn_tail_or_refuses_to_start_never_crashes(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(steps=byte_mutations, append_only=st.booleans())
    def check(steps: list, append_only: bool) -> None:
        with tempfile.TemporaryDirectory() as directory:
            wal_dir = Path(directory)
            with Wal.open(wal_dir, max_size_bytes=1 << 20) as wal:
                for row in ROWS:
                    wal.append([row])
            (path,) = wal_dir.glob("*.wal")
            data = path.read_bytes()
            damaged = data + mutate_bytes(b"", steps) if append_only else mutate_bytes(data, steps)
            path.write_bytes(damaged)
            try:
                with Wal.open(wal_dir, max_size_bytes=1 << 20) as reopened:
                    recovered = list(reopened.read_from(VClock()))
                    vclock = reopened.vclock
            except WalCorruption:
                assert not append_only  # a torn tail alone never refuses
                return
        assert recovered == ROWS[: len(recovered)]
        assert vclock == _vclock_of(recovered)
        if append_only:
            assert recovered == ROWS

    check()


def _vclock_of(records: list[Record]) -> VClock:
    clock = VClock()
    for record in records:
        clock.follow(record.origin, record.lsn)
    return clock
