"""The data source's segment reader, without Spark: rows, and damage reported as rows."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from replicaset.audit.columns import CAPTURED_COLUMNS, COLUMNS, schema_ddl, unsigned64
from replicaset.audit.source import scan_segment
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


def _rows(path: Path, columns: list[str] = COLUMNS) -> list[dict]:
    out = []
    for batch in scan_segment("m", str(path), 0, columns):
        assert batch.schema.names == list(columns)
        out.extend(batch.to_pylist())
    return sorted(out, key=lambda r: r.get("offset", 0))


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


def test_a_payload_that_does_not_decode_is_a_row_between_good_ones(tmp_path: Path) -> None:
    with Wal.open(tmp_path) as wal:
        for lsn, payload in ((1, DmlPayload(hlc=1 << 22, schema_id=(1, 1)).pack()),
                             (2, b"\xc1 not msgpack"),
                             (3, msgpack.packb({"h": -5, "s": [1, 1], "r": []})),
                             (4, DmlPayload(hlc=4 << 22, schema_id=(1, 1)).pack())):
            wal.append([Record(type=RecordType.DML, origin=2, lsn=lsn, txn_id=lsn, payload=payload)])
    rows = _rows(list_segments(tmp_path)[0])
    assert [(r["lsn"], r["type"]) for r in rows] == [(1, "DML"), (2, "BAD_PAYLOAD"), (3, "BAD_PAYLOAD"), (4, "DML")]
    bad = rows[1]
    assert "does not decode" in bad["error"] and bad["origin"] == 2 and bad["payload_bytes"] == 13
    assert [r["hlc"] for r in rows] == [1 << 22, None, None, 4 << 22]


def test_u64_fields_keep_their_bits_as_signed_integers(tmp_path: Path) -> None:
    txn_id = (1 << 64) - 3
    with Wal.open(tmp_path) as wal:
        payload = DmlPayload(hlc=(1 << 63) + 7, schema_id=(1, 1)).pack()
        wal.append([Record(type=RecordType.DML, origin=1, lsn=1, txn_id=txn_id, payload=payload)])
    [row] = _rows(list_segments(tmp_path)[0])
    assert unsigned64(row["txn_id"]) == txn_id and unsigned64(row["hlc"]) == (1 << 63) + 7


def test_a_reader_gets_the_columns_it_names_in_its_order(tmp_path: Path) -> None:
    path = _write(tmp_path, 3)
    columns = ["lsn", "member", "pos", "type", "n_rows"]
    rows = _rows(path, columns)
    assert [list(r) for r in rows] == [columns] * 3
    assert [(r["lsn"], r["member"], r["type"], r["n_rows"]) for r in rows] == [(i, "m", "DML", 1) for i in (1, 2, 3)]
    assert [r["pos"] for r in rows] == sorted(r["pos"] for r in rows)
    assert not set(CAPTURED_COLUMNS) & set(schema_ddl(columns).split())


def test_an_unknown_column_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="no column colour"):
        schema_ddl(["lsn", "colour"])
