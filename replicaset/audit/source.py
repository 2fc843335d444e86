"""The `rswal` PySpark data source: many members' WALs as one DataFrame, one row per WAL row.

One input partition per WAL segment; `read` walks the segment with the `wal` package's own
scanner (`read_segment_header`, `RecordScanner`, `find_valid_record`), so a change of the record
or segment format breaks one place, and yields Arrow record batches. Damage is never skipped
silently: a bad segment header, a corrupt record (valid records follow; reading resumes at them),
a torn tail and an undecodable payload each become a row with `type` set to `BAD_HEADER`,
`CORRUPT`, `TORN` or `BAD_PAYLOAD` and the reason in `error`.

Columns: member, segment (file name), seg_index, offset, pos (seg_index << 40 | offset: log
order within a member), origin, lsn, txn_id, hlc, type (DML, DDL, NOP or a damage kind), tables,
ops, keys (one entry per captured row of a DML row; a DDL row has its SQL text as its only key),
n_rows, digest (xxh3_64 of the payload bytes), payload_bytes, error. u64 fields (txn id, digest)
are stored as signed 64-bit integers with the same bits.

Use: `spark.dataSource.register(WalDataSource)`, then
`spark.read.format("rswal").option("paths", json.dumps([dir, ...])).load()`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from xxhash import xxh3_64_intdigest

from wal import RecordType, WalError
from wal.segment import RecordScanner, TailKind, map_segment, read_segment_header

SOURCE_NAME = "rswal"
BATCH_ROWS_MAX = 65536
POS_SEGMENT_SHIFT = 40
_SIGN = 1 << 63
_WRAP = 1 << 64

SCHEMA_DDL = (
    "member STRING, segment STRING, seg_index INT, offset BIGINT, pos BIGINT, origin INT, "
    "lsn BIGINT, txn_id BIGINT, hlc BIGINT, type STRING, tables ARRAY<STRING>, "
    "ops ARRAY<INT>, keys ARRAY<STRING>, n_rows INT, digest BIGINT, payload_bytes INT, "
    "error STRING"
)
COLUMNS = [part.split()[0] for part in SCHEMA_DDL.split(", ")]

_TYPE_NAMES = {RecordType.DML: "DML", RecordType.DDL: "DDL", RecordType.NOP: "NOP"}


def signed64(value: int) -> int:
    """A u64 as the signed 64-bit integer with the same bits (Spark has no unsigned long)."""
    return value - _WRAP if value >= _SIGN else value


def unsigned64(value: int) -> int:
    return value + _WRAP if value < 0 else value


class WalSegmentPartition(InputPartition):
    def __init__(self, member: str, path: str, seg_index: int) -> None:
        super().__init__(path)
        self.member = member
        self.path = path
        self.seg_index = seg_index


class _Columns:
    """Column lists of the batch being built."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {name: [] for name in COLUMNS}

    def __len__(self) -> int:
        return len(self.data["offset"])

    def add_error(self, member: str, segment: str, seg_index: int, offset: int, kind: str, error: str) -> None:
        d = self.data
        for name, value in (
            ("member", member), ("segment", segment), ("seg_index", seg_index), ("offset", offset),
            ("pos", (seg_index << POS_SEGMENT_SHIFT) | offset), ("type", kind), ("error", error),
        ):
            d[name].append(value)
        for name in ("origin", "lsn", "txn_id", "hlc", "tables", "ops", "keys", "n_rows",
                     "digest", "payload_bytes"):
            d[name].append(None)


def scan_segment_columns(member: str, path: str, seg_index: int) -> Iterator[dict[str, list[Any]]]:
    """Decode one segment into column lists of at most `BATCH_ROWS_MAX` rows (plain Python, no
    Spark: the data source and the benchmark's baseline share it)."""
    segment = Path(path).name
    pos_base = seg_index << POS_SEGMENT_SHIFT
    cols = _Columns()
    d = cols.data
    c_member, c_segment, c_seg_index, c_offset, c_pos = (
        d["member"], d["segment"], d["seg_index"], d["offset"], d["pos"])
    c_origin, c_lsn, c_txn, c_hlc, c_type = d["origin"], d["lsn"], d["txn_id"], d["hlc"], d["type"]
    c_tables, c_ops, c_keys, c_nrows = d["tables"], d["ops"], d["keys"], d["n_rows"]
    c_digest, c_bytes, c_error = d["digest"], d["payload_bytes"], d["error"]
    unpackb = msgpack.unpackb
    dml, ddl = RecordType.DML, RecordType.DDL
    with map_segment(Path(path)) as buf:
        try:
            _, offset = read_segment_header(buf)
        except WalError as exc:
            cols.add_error(member, segment, seg_index, 0, "BAD_HEADER", f"bad segment header: {exc}")
            yield cols.data
            return
        while True:
            scanner = RecordScanner(buf, offset)
            for offset, record in scanner:
                payload = record.payload
                error = None
                tables: list[str] | None = None
                ops: list[int] | None = None
                keys: list[str] | None = None
                hlc = None
                kind = _TYPE_NAMES.get(record.type, str(int(record.type)))
                try:
                    doc = unpackb(payload, raw=False, strict_map_key=False)
                    hlc = doc["h"]
                    if record.type is dml:
                        rows = doc["r"]
                        tables = [r["t"] for r in rows]
                        ops = [r["op"] for r in rows]
                        keys = [r["k"] for r in rows]
                    elif record.type is ddl:
                        tables, ops, keys = [], [], [doc["sql"]]
                except Exception as exc:  # msgpack raises several types for garbage
                    kind, error = "BAD_PAYLOAD", f"payload does not decode: {exc!r:.200}"
                    hlc = hlc if isinstance(hlc, int) else None
                    tables = ops = keys = None
                c_member.append(member)
                c_segment.append(segment)
                c_seg_index.append(seg_index)
                c_offset.append(offset)
                c_pos.append(pos_base | offset)
                c_origin.append(record.origin)
                c_lsn.append(record.lsn)
                c_txn.append(record.txn_id - _WRAP if record.txn_id >= _SIGN else record.txn_id)
                c_hlc.append(hlc if hlc is None or hlc < _SIGN else hlc - _WRAP)
                c_type.append(kind)
                c_tables.append(tables)
                c_ops.append(ops)
                c_keys.append(keys)
                c_nrows.append(len(keys) if keys is not None and kind == "DML" else 0)
                digest = xxh3_64_intdigest(payload)
                c_digest.append(digest - _WRAP if digest >= _SIGN else digest)
                c_bytes.append(len(payload))
                c_error.append(error)
                if len(c_offset) >= BATCH_ROWS_MAX:
                    yield cols.data
                    cols = _Columns()
                    d = cols.data
                    c_member, c_segment, c_seg_index, c_offset, c_pos = (
                        d["member"], d["segment"], d["seg_index"], d["offset"], d["pos"])
                    c_origin, c_lsn, c_txn, c_hlc, c_type = (
                        d["origin"], d["lsn"], d["txn_id"], d["hlc"], d["type"])
                    c_tables, c_ops, c_keys, c_nrows = d["tables"], d["ops"], d["keys"], d["n_rows"]
                    c_digest, c_bytes, c_error = d["digest"], d["payload_bytes"], d["error"]
            tail, following = scanner.tail()
            if tail is TailKind.CLEAN:
                break
            if tail is TailKind.TORN:
                cols.add_error(member, segment, seg_index, scanner.valid_end, "TORN",
                               f"torn tail: {len(buf) - scanner.valid_end} bytes after offset "
                               f"{scanner.valid_end} hold no valid record")
                break
            assert following is not None
            cols.add_error(member, segment, seg_index, scanner.valid_end, "CORRUPT",
                           f"corrupt bytes at offset {scanner.valid_end}..{following}; "
                           f"valid records resume at offset {following}")
            offset = following
    if len(cols):
        yield cols.data


def _schema():  # type: ignore[no-untyped-def]
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(SCHEMA_DDL)


def arrow_schema():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.schema([
        ("member", pa.string()), ("segment", pa.string()), ("seg_index", pa.int32()),
        ("offset", pa.int64()), ("pos", pa.int64()), ("origin", pa.int32()),
        ("lsn", pa.int64()), ("txn_id", pa.int64()), ("hlc", pa.int64()), ("type", pa.string()),
        ("tables", pa.list_(pa.string())), ("ops", pa.list_(pa.int32())),
        ("keys", pa.list_(pa.string())), ("n_rows", pa.int32()), ("digest", pa.int64()),
        ("payload_bytes", pa.int32()), ("error", pa.string()),
    ])


class WalDataSource(DataSource):
    """Options: `paths`, a JSON list of data or WAL directories (see `replicaset.audit.inputs`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return WalReader(json.loads(self.options.get("paths", "[]")))


class WalReader(DataSourceReader):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def partitions(self) -> list[InputPartition]:
        from replicaset.audit.inputs import discover

        members = discover([Path(p) for p in self.paths])
        parts: list[InputPartition] = [
            WalSegmentPartition(m.name, str(s.path), s.index) for m in members for s in m.segments
        ]
        return parts or [WalSegmentPartition("", "", -1)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        assert isinstance(partition, WalSegmentPartition)
        if partition.seg_index < 0:
            return
        schema = arrow_schema()
        for data in scan_segment_columns(partition.member, partition.path, partition.seg_index):
            yield pa.RecordBatch.from_pydict(data, schema=schema)
