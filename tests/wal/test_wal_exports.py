"""The public surface of `wal` is re-exported once, from the package."""

import wal

EXPECTED = {
    "VClock", "Order", "Record", "RecordType", "encode_record", "decode_record", "Wal", "WalMode",
    "GroupCommitPolicy", "HEADER_SIZE", "read_segment_records", "WalError", "InvalidRecord",
    "RecordTooLarge", "TruncatedRecord", "CorruptRecord", "WalCorruption", "LsnOrderError",
    "RowsUnavailable", "WalWriteError", "WalClosed", "fsync_path", "LOCAL_ORIGIN", "covers",
}


def test_every_export_appears_once_and_exists() -> None:
    assert len(wal.__all__) == len(set(wal.__all__))
    assert set(wal.__all__) == EXPECTED
    for name in wal.__all__:
        assert getattr(wal, name) is not None


def test_errors_share_a_base() -> None:
    for name in EXPECTED:
        value = getattr(wal, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, wal.WalError)
    assert issubclass(wal.RecordTooLarge, ValueError)
