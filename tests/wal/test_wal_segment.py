"""Segment headers, scanning, rolling, and reading the log from a vclock."""

import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wal import (
    CorruptRecord,
    Record,
    RecordType,
    RowsUnavailable,
    TruncatedRecord,
    VClock,
    Wal,
    WalCorruption,
    encode_record,
    read_segment_records,
)
from wal.segment import (
    TailKind,
    list_segments,
    read_segment_header,
    scan_segment,
    segment_name,
    segment_signature,
    write_segment_header,
)

clocks = st.dictionaries(st.integers(0, 31), st.integers(0, 2**64 - 1)).map(VClock)


def dml(origin: int, lsn: int, payload: bytes = b"") -> Record:
    txn_id = lsn * 100 + origin
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn_id, payload=payload)


def encode(*records: Record) -> bytes:
    return b"".join(encode_record(r, max_record_bytes=1 << 20) for r in records)


@settings(max_examples=200, deadline=None)
@given(clock=clocks, suffix=st.binary(max_size=20))
def test_segment_header_round_trip(clock: VClock, suffix: bytes) -> None:
    header = write_segment_header(clock)
    assert read_segment_header(header + suffix) == (clock, len(header))


def test_segment_header_damage_is_detected() -> None:
    header = write_segment_header(VClock({1: 5, 2: 300}))
    for cut in range(len(header)):
        with pytest.raises(TruncatedRecord):
            read_segment_header(header[:cut])
    for bit in range(len(header) * 8):
        flipped = bytearray(header)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises((CorruptRecord, TruncatedRecord)):
            read_segment_header(bytes(flipped))


def test_names_and_listing(tmp_path: Path) -> None:
    assert segment_name(5) == "00000000000000000005.wal"
    for signature in (120, 7, 0):
        (tmp_path / segment_name(signature)).write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    (tmp_path / (segment_name(200)[:-4] + ".wal.inprogress")).write_bytes(b"")
    assert [segment_signature(p) for p in list_segments(tmp_path)] == [0, 7, 120]


def test_scan_classifies_tails() -> None:
    start = VClock({1: 2})
    header = write_segment_header(start)
    body = encode(dml(1, 3, b"abc"), dml(2, 1, b"defg"), dml(1, 4, b"h"))
    first_end = len(header) + 32 + 3
    clean = scan_segment(header + body)
    assert clean.tail is TailKind.CLEAN and clean.start_vclock == start
    assert [(o, r.lsn) for o, r in clean.records] == [
        (len(header), 3),
        (first_end, 1),
        (first_end + 36, 4),
    ]
    assert clean.valid_end == clean.size_bytes == len(header + body)

    torn = scan_segment(header + body[:-1])
    assert torn.tail is TailKind.TORN and torn.valid_end == first_end + 36
    assert len(torn.records) == 2

    zero_filled = scan_segment(header + body + bytes(4096))
    assert zero_filled.tail is TailKind.TORN and zero_filled.valid_end == len(header + body)

    damaged = bytearray(header + body)
    damaged[first_end + 34] ^= 0xFF
    corrupt = scan_segment(bytes(damaged))
    assert corrupt.tail is TailKind.CORRUPT
    assert corrupt.valid_end == first_end and corrupt.next_valid_offset == first_end + 36


def test_rolling_names_segments_by_start_signature(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, max_size_bytes=150)
    written = []
    for lsn in range(1, 13):
        batch = [dml(1, lsn, b"x" * 10), dml(2, lsn, b"y" * 5)]
        wal.append(batch)
        written += batch
    segments = wal.segments()
    assert len(segments) > 3
    assert [path for path, _ in segments] == list_segments(tmp_path)
    found = []
    for path, start in segments:
        scan = scan_segment(path)
        assert scan.start_vclock == start
        assert path.name == segment_name(start.signature)
        assert scan.size_bytes <= 150 and scan.tail is TailKind.CLEAN
        found += [record for _, record in scan.records]
    assert found == written
    assert segments[0][1] == VClock()
    # each segment starts where the one before it ends
    for (_, start), (_, next_start) in zip(segments, segments[1:]):
        assert start.signature < next_start.signature


batches = st.lists(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40)), min_size=1, max_size=4),
    min_size=1,
    max_size=12,
)


@settings(max_examples=100, deadline=None)
@given(
    batch_shapes=batches,
    max_size_bytes=st.sampled_from([60, 150, 400, 1 << 20]),
    probes=st.lists(st.dictionaries(st.integers(0, 4), st.integers(0, 12)), max_size=6),
)
def test_read_from_yields_exactly_the_rows_after_the_vclock(
    batch_shapes: list[list[tuple[int, int]]], max_size_bytes: int, probes: list[dict[int, int]]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        wal = Wal.open(directory, max_size_bytes=max_size_bytes)
        clock = VClock()
        written: list[Record] = []
        prefixes = [clock.copy()]
        for shape in batch_shapes:
            batch = []
            for origin, size in shape:
                clock.follow(origin, clock.get(origin) + 1)
                batch.append(dml(origin, clock.get(origin), bytes([origin]) * size))
                prefixes.append(clock.copy())
            wal.append(batch)
            written += batch
        segments = wal.segments()
        next_start = {path: start for (path, _), (_, start) in zip(segments, segments[1:])}
        for vclock in prefixes + [VClock(probe) for probe in probes]:
            with mock.patch("wal.log.read_segment_records", wraps=read_segment_records) as opened:
                got = list(wal.read_from(vclock))
            assert got == [r for r in written if r.lsn > vclock.get(r.origin)]
            for call in opened.call_args_list:
                path = call.args[0]
                covered = path in next_start and next_start[path] <= vclock
                assert not covered, f"{path.name} opened though {vclock} covers all its rows"
        wal.close()


def test_covered_segments_are_not_opened(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, max_size_bytes=100)
    for lsn in range(1, 11):
        wal.append([dml(1, lsn, b"z" * 20)])
    segments = wal.segments()
    assert len(segments) >= 4
    third_start = segments[2][1]
    for path, _ in segments[:2]:
        path.unlink()
    assert [r.lsn for r in wal.read_from(third_start)] == list(range(third_start.get(1) + 1, 11))
    with pytest.raises(RowsUnavailable, match="collected while it was being read"):
        list(wal.read_from(VClock()))


def test_removing_the_oldest_segments_moves_the_start_of_the_log(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, max_size_bytes=100)
    for lsn in range(1, 11):
        wal.append([dml(1, lsn, b"z" * 20)])
    segments = wal.segments()
    names = [path.name for path, _ in segments]
    reader = wal.read_from(VClock())  # planned before the removal, read after it
    with pytest.raises(ValueError, match="only the oldest segments"):
        wal.remove_oldest(names[1:2])
    with pytest.raises(ValueError, match="only the oldest segments"):
        wal.remove_oldest(names)  # the live one too
    assert wal.remove_oldest(names[:2]) == [path for path, _ in segments[:2]]
    assert sorted(p.name for p in tmp_path.glob("*.wal")) == names[2:]
    assert wal.segments() == segments[2:]
    with pytest.raises(RowsUnavailable):
        wal.read_from(VClock())
    with pytest.raises(RowsUnavailable):
        list(reader)
    third_start = segments[2][1]
    assert [r.lsn for r in wal.read_from(third_start)] == list(range(third_start.get(1) + 1, 11))
    wal.append([dml(1, 11)])
    wal.close()
    reopened = Wal.open(tmp_path, max_size_bytes=100)
    assert reopened.segments()[0][1] == third_start and reopened.vclock == VClock({1: 11})


def test_read_from_refuses_a_vclock_below_the_log(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, start_vclock=VClock({1: 10}))
    wal.append([dml(1, 11)])
    assert [r.lsn for r in wal.read_from(VClock({1: 10}))] == [11]
    with pytest.raises(RowsUnavailable):
        wal.read_from(VClock({1: 9}))


def test_reader_stops_at_the_durable_end_of_the_live_segment(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path)
    wal.append([dml(1, 1), dml(1, 2)])
    live = wal.segments()[-1][0]
    in_flight = encode(dml(1, 3, b"in flight"))
    with live.open("ab") as file:
        file.write(in_flight[:20])
    assert [r.lsn for r in wal.read_from(VClock())] == [1, 2]
    with live.open("ab") as file:
        file.write(in_flight[20:])
    assert [r.lsn for r in wal.read_from(VClock())] == [1, 2]


def test_reading_while_appending_never_skips_or_repeats(tmp_path: Path) -> None:
    wal = Wal.open(tmp_path, max_size_bytes=200)
    lsn = 0
    for _ in range(6):
        lsn += 1
        wal.append([dml(1, lsn, b"a" * 30)])
    seen: list[int] = []
    position = VClock()
    for _ in range(5):
        for record in wal.read_from(position):
            seen.append(record.lsn)
            position.follow(record.origin, record.lsn)
            lsn += 1
            wal.append([dml(1, lsn, b"b" * 30)])
            if len(seen) > 40:
                break
    assert seen == list(range(1, len(seen) + 1))
    assert len(seen) > 6


def test_read_segment_records_standalone(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0)
    header = write_segment_header(VClock())
    body = encode(dml(1, 1, b"one"), dml(1, 2, b"two"))
    path.write_bytes(header + body)
    offsets = [(o, r.lsn) for o, r in read_segment_records(path)]
    assert offsets == [(len(header), 1), (len(header) + 35, 2)]

    path.write_bytes(header + body + body[:10])
    reader = read_segment_records(path)
    assert [r.lsn for _, r in (next(reader), next(reader))] == [1, 2]
    with pytest.raises(TruncatedRecord):
        next(reader)

    damaged = bytearray(header + body)
    damaged[len(header) + 33] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(WalCorruption, match="offset"):
        list(read_segment_records(path))
