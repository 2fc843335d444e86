"""Recovery at open: torn tails are cut, damage refuses to start, state is rebuilt."""

from pathlib import Path
from typing import Any

import pytest

from wal import HEADER_SIZE, Record, RecordType, VClock, Wal, WalCorruption, encode_record
from wal.segment import scan_segment, segment_name, write_segment_header


def dml(origin: int, lsn: int, txn_id: int, payload: bytes = b"\x91\x01") -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn_id, payload=payload)


class Events:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))


def write_log(directory: Path, *, max_size_bytes: int = 1 << 20) -> list[Record]:
    """Five rows over two origins with txn ids that are not monotonic in log order."""
    rows = [
        dml(1, 1, 500, b"first"),
        dml(2, 1, 900, b"second"),
        dml(1, 2, 700, b"third"),
        dml(2, 2, 950, b"fourth"),
        dml(1, 3, 800, b"fifth" * 3),
    ]
    with Wal.open(directory, max_size_bytes=max_size_bytes) as wal:
        for row in rows:
            wal.append([row])
    return rows


def expected_vclock(rows: list[Record]) -> VClock:
    clock = VClock()
    for row in rows:
        clock.follow(row.origin, row.lsn)
    return clock


def test_reopen_rebuilds_vclock_and_txn_ids(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == VClock({1: 3, 2: 2})
        assert wal.last_txn_id == {1: 800, 2: 950}
        assert wal.max_txn_id == 950
        assert list(wal.read_from(VClock())) == rows


def test_torn_last_record_is_cut_at_every_byte(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    (segment,) = sorted(tmp_path.glob("*.wal"))
    content = segment.read_bytes()
    scan = scan_segment(content)
    last_offset = scan.records[-1][0]
    for cut in range(last_offset + 1, len(content)):
        segment.write_bytes(content[:cut])
        events = Events()
        with Wal.open(tmp_path, log=events) as wal:
            assert wal.vclock == expected_vclock(rows[:-1])
            assert wal.last_txn_id == {1: 700, 2: 950}
            assert list(wal.read_from(VClock())) == rows[:-1]
        assert segment.stat().st_size == last_offset
        assert events.events == [
            (
                "wal_tail_truncated",
                {
                    "segment": str(segment),
                    "offset": last_offset,
                    "bytes_dropped": cut - last_offset,
                },
            )
        ]


def test_cut_exactly_at_a_record_boundary_is_clean(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    (segment,) = sorted(tmp_path.glob("*.wal"))
    segment.write_bytes(segment.read_bytes()[: scan_segment(segment).records[-1][0]])
    events = Events()
    with Wal.open(tmp_path, log=events) as wal:
        assert wal.vclock == expected_vclock(rows[:-1])
    assert events.events == []


def test_zero_filled_tail_is_cut(tmp_path: Path) -> None:
    rows = write_log(tmp_path, max_size_bytes=120)
    last = sorted(tmp_path.glob("*.wal"))[-1]
    size = last.stat().st_size
    with last.open("ab") as file:
        file.write(bytes(4096))
    events = Events()
    with Wal.open(tmp_path, log=events) as wal:
        assert wal.vclock == expected_vclock(rows)
        assert list(wal.read_from(VClock())) == rows
    assert last.stat().st_size == size
    assert [name for name, _ in events.events] == ["wal_tail_truncated"]


def test_appending_after_recovery_continues_from_the_recovered_vclock(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    (segment,) = sorted(tmp_path.glob("*.wal"))
    segment.write_bytes(segment.read_bytes()[:-3])
    replacement = dml(1, 3, 1000, b"again")
    with Wal.open(tmp_path) as wal:
        wal.append([replacement, dml(2, 3, 1001)])
    with Wal.open(tmp_path) as wal:
        assert list(wal.read_from(VClock())) == rows[:-1] + [replacement, dml(2, 3, 1001)]
        assert wal.max_txn_id == 1001 and wal.last_txn_id == {1: 1000, 2: 1001}


def test_flipped_byte_in_the_middle_refuses_to_start(tmp_path: Path) -> None:
    write_log(tmp_path)
    (segment,) = sorted(tmp_path.glob("*.wal"))
    content = segment.read_bytes()
    records = scan_segment(content).records
    start, end = records[2][0], records[3][0]
    for position in range(start, end):
        damaged = bytearray(content)
        damaged[position] ^= 0x40
        segment.write_bytes(bytes(damaged))
        with pytest.raises(WalCorruption) as raised:
            Wal.open(tmp_path)
        message = str(raised.value)
        assert str(segment) in message and f"offset {start}" in message and "re-join" in message
    assert segment.read_bytes() == bytes(damaged), "a refused recovery must not change the file"


def test_damage_in_a_non_last_segment_refuses_to_start(tmp_path: Path) -> None:
    write_log(tmp_path, max_size_bytes=120)
    segments = sorted(tmp_path.glob("*.wal"))
    assert len(segments) >= 3
    first = segments[0]
    content = first.read_bytes()
    first.write_bytes(content[:-1])
    with pytest.raises(WalCorruption, match="not the last segment"):
        Wal.open(tmp_path)
    damaged = bytearray(content)
    damaged[-1] ^= 1
    first.write_bytes(bytes(damaged))
    with pytest.raises(WalCorruption, match=str(first)):
        Wal.open(tmp_path)


def test_damaged_segment_header_refuses_to_start(tmp_path: Path) -> None:
    write_log(tmp_path, max_size_bytes=120)
    for segment in sorted(tmp_path.glob("*.wal"))[:2]:
        content = segment.read_bytes()
        damaged = bytearray(content)
        damaged[HEADER_SIZE // 4] ^= 1
        segment.write_bytes(bytes(damaged))
        with pytest.raises(WalCorruption, match="bad header"):
            Wal.open(tmp_path)
        segment.write_bytes(content)


def test_missing_middle_segment_refuses_to_start(tmp_path: Path) -> None:
    write_log(tmp_path, max_size_bytes=120)
    segments = sorted(tmp_path.glob("*.wal"))
    segments[1].unlink()
    with pytest.raises(WalCorruption, match="missing"):
        Wal.open(tmp_path)


def test_lsn_going_back_refuses_to_start(tmp_path: Path) -> None:
    body = b"".join(
        encode_record(row, max_record_bytes=1 << 20)
        for row in (dml(1, 1, 1), dml(1, 2, 2), dml(1, 2, 3))
    )
    (tmp_path / segment_name(0)).write_bytes(write_segment_header(VClock()) + body)
    with pytest.raises(WalCorruption, match="lsn 2 at offset"):
        Wal.open(tmp_path)


def test_gap_across_segments_refuses_to_start(tmp_path: Path) -> None:
    first = encode_record(dml(1, 1, 1), max_record_bytes=1 << 20)
    second = encode_record(dml(1, 3, 3), max_record_bytes=1 << 20)
    (tmp_path / segment_name(0)).write_bytes(write_segment_header(VClock()) + first)
    (tmp_path / segment_name(2)).write_bytes(write_segment_header(VClock({1: 2})) + second)
    with pytest.raises(WalCorruption, match="segments before it end at"):
        Wal.open(tmp_path)


def test_segment_name_must_match_its_start_vclock(tmp_path: Path) -> None:
    (tmp_path / segment_name(4)).write_bytes(write_segment_header(VClock({1: 3})))
    with pytest.raises(WalCorruption, match="does not match its name"):
        Wal.open(tmp_path)


def test_empty_tail_segment_still_counts(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    end = expected_vclock(rows)
    tail = tmp_path / segment_name(end.signature)
    tail.write_bytes(write_segment_header(end))
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == end
        assert wal.segments()[-1] == (tail, end)
        wal.append([dml(2, 3, 2000)])
        assert len(wal.segments()) == 2, "an empty live segment takes the next rows"
    assert [r.lsn for _, r in scan_segment(tail).records] == [3]


def test_leftovers_of_interrupted_segment_creation_are_removed(tmp_path: Path) -> None:
    rows = write_log(tmp_path)
    end = expected_vclock(rows)
    in_progress = tmp_path / (segment_name(end.signature)[:-4] + ".wal.inprogress")
    in_progress.write_bytes(b"partial")
    torn_segment = tmp_path / segment_name(end.signature)
    torn_segment.write_bytes(bytes(300))
    events = Events()
    with Wal.open(tmp_path, log=events) as wal:
        assert wal.vclock == end
        assert len(wal.segments()) == 1
    assert not in_progress.exists() and not torn_segment.exists()
    assert sorted(fields["reason"] for _, fields in events.events) == ["in progress", "torn header"]


def test_a_segment_with_zero_header_but_valid_records_is_not_dropped(tmp_path: Path) -> None:
    write_log(tmp_path)
    (segment,) = sorted(tmp_path.glob("*.wal"))
    content = segment.read_bytes()
    header_size = len(write_segment_header(VClock()))
    segment.write_bytes(bytes(header_size) + content[header_size:])
    with pytest.raises(WalCorruption, match="bad header"):
        Wal.open(tmp_path)


def test_start_vclock_seeds_an_empty_log(tmp_path: Path) -> None:
    start = VClock({1: 10, 2: 4})
    with Wal.open(tmp_path, start_vclock=start) as wal:
        assert wal.vclock == start
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == start
        wal.append([dml(1, 11, 5)])
    with Wal.open(tmp_path, start_vclock=start) as wal:
        assert wal.vclock == VClock({1: 11, 2: 4})
    with pytest.raises(ValueError, match="does not cover"):
        Wal.open(tmp_path, start_vclock=VClock({3: 1}))


def test_lsn_gap_inside_a_segment_refuses_to_start(tmp_path: Path) -> None:
    body = b"".join(
        encode_record(row, max_record_bytes=1 << 20) for row in (dml(1, 1, 1), dml(1, 3, 3))
    )
    (tmp_path / segment_name(0)).write_bytes(write_segment_header(VClock()) + body)
    with pytest.raises(WalCorruption, match="lsn 3 at offset"):
        Wal.open(tmp_path)


def test_overlapping_segments_refuse_to_start(tmp_path: Path) -> None:
    first = b"".join(
        encode_record(row, max_record_bytes=1 << 20) for row in (dml(1, 1, 1), dml(1, 2, 2))
    )
    second = encode_record(dml(2, 1, 3), max_record_bytes=1 << 20)
    (tmp_path / segment_name(0)).write_bytes(write_segment_header(VClock()) + first)
    (tmp_path / segment_name(1)).write_bytes(write_segment_header(VClock({1: 1})) + second)
    with pytest.raises(WalCorruption, match="segments before it end at"):
        Wal.open(tmp_path)


def test_torn_record_whose_payload_holds_a_record_magic_is_a_tail(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        wal.append([dml(1, 1, 1), dml(1, 2, 2, b"RWAL" + b"\x01" * 60)])
    (segment,) = sorted(tmp_path.glob("*.wal"))
    segment.write_bytes(segment.read_bytes()[:-10])
    with Wal.open(tmp_path) as wal:
        assert wal.vclock == VClock({1: 1})
