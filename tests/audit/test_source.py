"""The data source's segment reader, without Spark: rows, and damage reported as rows."""

from __future__ import annotations

from pathlib import Path

from replicaset.audit.source import scan_segment_columns, unsigned64
from replicaset.storage.rows import CapturedRow, DmlPayload, Op
from wal import Record, RecordType, Wal
from wal.segment import list_segments


def _write(directory: Path, count: int) -> Path:
    with Wal.open(directory) as wal:
        for lsn in range(1, count + 1):
            row = CapturedRow(table="t", op=Op.INSERT, key=f"t:{lsn}", new={"id": lsn})
            payload = DmlPayload(hlc=(lsn << 22), schema_id=(1, 1), rows=[row]).pack()
            wal.append([Record(type=RecordType.DML, origin=2, lsn=lsn, txn_id=lsn << 22, payload=payload)])
    return list_segments(directory)[0]


def _rows(path: Path) -> list[dict]:
    out = []
    for cols in scan_segment_columns("m", str(path), 0):
        names = list(cols)
        out.extend(dict(zip(names, values)) for values in zip(*cols.values()))
    return out


def test_rows_carry_origin_lsn_hlc_and_captured_rows(tmp_path: Path) -> None:
    rows = _rows(_write(tmp_path, 5))
    assert [(r["origin"], r["lsn"], r["type"]) for r in rows] == [(2, i, "DML") for i in range(1, 6)]
    assert rows[0]["tables"] == ["t"] and rows[0]["ops"] == [0] and rows[0]["keys"] == ["t:1"]
    assert rows[2]["hlc"] == 3 << 22 and unsigned64(rows[2]["txn_id"]) == 3 << 22
    assert all(r["error"] is None for r in rows)


def test_corrupt_record_is_a_row_and_reading_resumes(tmp_path: Path) -> None:
    path = _write(tmp_path, 5)
    offsets = [r["offset"] for r in _rows(path)]
    data = bytearray(path.read_bytes())
    data[offsets[2] + 40] ^= 0xFF
    path.write_bytes(bytes(data))
    rows = _rows(path)
    assert [r["lsn"] for r in rows if r["error"] is None] == [1, 2, 4, 5]
    damage = [r for r in rows if r["error"] is not None]
    assert [(d["type"], d["offset"]) for d in damage] == [("CORRUPT", offsets[2])]


def test_torn_tail_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, 3)
    path.write_bytes(path.read_bytes()[:-7])
    rows = _rows(path)
    assert [r["type"] for r in rows] == ["DML", "DML", "TORN"]
