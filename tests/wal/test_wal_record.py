"""The record codec: round trips, checksum coverage, truncation and refusals."""

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from wal import (
    HEADER_SIZE,
    CorruptRecord,
    InvalidRecord,
    Record,
    RecordTooLarge,
    RecordType,
    TruncatedRecord,
    decode_record,
    encode_record,
)
from wal.record import FORMAT_VERSION, RECORD_MAGIC

MAX_RECORD_BYTES = 1 << 20

records = st.builds(
    Record,
    type=st.sampled_from(RecordType),
    origin=st.integers(0, 2**16 - 1),
    lsn=st.integers(1, 2**64 - 1),
    txn_id=st.integers(0, 2**64 - 1),
    payload=st.binary(max_size=3000),
)


def dml(lsn: int = 7, payload: bytes = b"\x81\xa1t\xa3abc") -> Record:
    return Record(type=RecordType.DML, origin=3, lsn=lsn, txn_id=0xDEADBEEF, payload=payload)


@settings(max_examples=200, deadline=None)
@given(record=records, prefix=st.binary(max_size=40), suffix=st.binary(max_size=40))
def test_round_trip_at_any_offset(record: Record, prefix: bytes, suffix: bytes) -> None:
    data = encode_record(record, max_record_bytes=MAX_RECORD_BYTES)
    assert len(data) == HEADER_SIZE + len(record.payload)
    buf = prefix + data + suffix
    assert decode_record(buf, len(prefix)) == (record, len(prefix) + len(data))
    assert decode_record(memoryview(buf), len(prefix)) == (record, len(prefix) + len(data))


def test_large_payload_round_trip() -> None:
    record = dml(payload=bytes(range(256)) * 4096)
    data = encode_record(record, max_record_bytes=2 * 1024 * 1024)
    decoded, end = decode_record(data)
    assert decoded == record and end == len(data)
    assert type(decoded.payload) is bytes and type(decoded.type) is RecordType


def test_header_layout_and_checksum_definition() -> None:
    record = dml(payload=b"payload")
    data = encode_record(record, max_record_bytes=MAX_RECORD_BYTES)
    assert data[:4] == b"RWAL"
    fields = struct.unpack_from("<IBBHQQII", data)
    assert fields[:7] == (RECORD_MAGIC, FORMAT_VERSION, 1, 3, 7, 0xDEADBEEF, 7)
    expected = xxhash.xxh3_64_intdigest(data[:28] + b"payload") & 0xFFFFFFFF
    assert fields[7] == expected
    assert data[HEADER_SIZE:] == b"payload"


@pytest.mark.parametrize("payload_size", [0, 1, 29])
def test_every_single_bit_flip_is_detected(payload_size: int) -> None:
    data = encode_record(dml(payload=bytes(range(payload_size))), max_record_bytes=MAX_RECORD_BYTES)
    for bit in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises((CorruptRecord, TruncatedRecord)):
            decode_record(bytes(flipped))


@settings(max_examples=200, deadline=None)
@given(record=records, data=st.data())
def test_random_bit_flip_is_detected(record: Record, data: st.DataObject) -> None:
    encoded = encode_record(record, max_record_bytes=MAX_RECORD_BYTES)
    bit = data.draw(st.integers(0, len(encoded) * 8 - 1))
    flipped = bytearray(encoded)
    flipped[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises((CorruptRecord, TruncatedRecord)):
        decode_record(bytes(flipped))


def test_every_truncation_raises_truncated() -> None:
    data = encode_record(dml(payload=b"0123456789"), max_record_bytes=MAX_RECORD_BYTES)
    for cut in range(len(data)):
        with pytest.raises(TruncatedRecord):
            decode_record(data[:cut])
    with pytest.raises(TruncatedRecord):
        decode_record(data, len(data))


def test_oversize_is_refused_naming_size_and_limit() -> None:
    record = dml(payload=b"x" * 100)
    assert encode_record(record, max_record_bytes=HEADER_SIZE + 100)
    with pytest.raises(RecordTooLarge, match=r"132 bytes.*131 bytes") as raised:
        encode_record(record, max_record_bytes=HEADER_SIZE + 99)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    "fields",
    [
        {"origin": -1},
        {"origin": 2**16},
        {"lsn": 0},
        {"lsn": 2**64},
        {"txn_id": -1},
        {"txn_id": 2**64},
        {"type": 1},
        {"payload": "text"},
        {"payload": bytearray(b"x")},
        {"origin": True},
    ],
)
def test_out_of_range_fields_are_refused(fields: dict[str, object]) -> None:
    values: dict[str, object] = {
        "type": RecordType.DDL,
        "origin": 1,
        "lsn": 1,
        "txn_id": 0,
        "payload": b"",
    }
    values.update(fields)
    with pytest.raises(InvalidRecord):
        encode_record(Record(**values), max_record_bytes=MAX_RECORD_BYTES)  # type: ignore[arg-type]


def _forge(*, version: int = FORMAT_VERSION, type_value: int = 1, lsn: int = 1) -> bytes:
    """A record with a valid checksum over fields the encoder would never write."""
    prefix = struct.pack("<IBBHQQI", RECORD_MAGIC, version, type_value, 1, lsn, 0, 0)
    return prefix + struct.pack("<I", xxhash.xxh3_64_intdigest(prefix) & 0xFFFFFFFF)


@pytest.mark.parametrize(
    ("forged", "reason"),
    [
        (_forge(version=2), "version"),
        (_forge(type_value=9), "type"),
        (_forge(lsn=0), "lsn 0"),
        (b"\0" * HEADER_SIZE, "magic"),
    ],
)
def test_checksummed_but_invalid_fields_are_corrupt(forged: bytes, reason: str) -> None:
    with pytest.raises(CorruptRecord, match=reason):
        decode_record(forged)
