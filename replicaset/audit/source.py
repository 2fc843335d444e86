"""The `rswal` PySpark data source: many members' WALs as one DataFrame, one row per WAL row.

One input partition per WAL segment; `read` walks the segment with the `wal` package's own
scanner (`read_segment_header`, `RecordScanner.fields`, `find_valid_record`), so a change of the
record or segment format breaks one place, and yields Arrow record batches built from typed
column arrays: a row costs its record's checks, one msgpack decode of its payload (which also
proves the payload is whole) and a few appends, never a Python object per cell. Damage is never
skipped silently: a bad segment header, a corrupt record (valid records follow; reading resumes
at them), a torn tail and an undecodable payload each become a row with `type` set to
`BAD_HEADER`, `CORRUPT`, `TORN` or `BAD_PAYLOAD` and the reason in `error`.

Columns: member, segment (file name), seg_index, offset, pos (seg_index << 40 | offset: log
order within a member), origin, lsn, txn_id, hlc, type (DML, DDL, NOP or a damage kind), tables,
ops, keys (one entry per captured row of a DML row; a DDL row has its SQL text as its only key),
n_rows, digest (xxh3_64 of the payload bytes), payload_bytes, error. u64 fields (lsn, txn id,
hlc, digest) are stored as signed 64-bit integers with the same bits.

Spark gives a Python data source no column pruning, so a reader that needs fewer columns names
them in its schema: `.schema(schema_ddl(columns))`. Leaving out `tables`, `ops` and `keys` (the
audit's checks do) spares the per-row lists, which cost more than everything else together.

Use: `spark.dataSource.register(WalDataSource)`, then
`spark.read.format("rswal").option("paths", json.dumps([dir, ...])).load()`.
"""

from __future__ import annotations

import itertools
import json
import mmap
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgpack
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from xxhash import xxh3_64_intdigest

from replicaset.audit.columns import CAPTURED_COLUMNS, COLUMN_TYPES, COLUMNS, SCHEMA_DDL, schema_ddl, signed64
from wal import RecordType, WalError
from wal.segment import RecordScanner, TailKind, map_segment, read_segment_header

SOURCE_NAME = "rswal"
BATCH_ROWS_MAX = 65536
POS_SEGMENT_SHIFT = 40


class WalSegmentPartition(InputPartition):
    def __init__(self, member: str, path: str, seg_index: int) -> None:
        super().__init__(path)
        self.member = member
        self.path = path
        self.seg_index = seg_index


def arrow_schema(columns: Sequence[str] = COLUMNS):  # type: ignore[no-untyped-def]
    """The Arrow schema of these columns, from their Spark types (`COLUMN_TYPES`)."""
    import pyarrow as pa

    arrow_types = {"STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64(),
                   "ARRAY<STRING>": pa.list_(pa.string()), "ARRAY<INT>": pa.list_(pa.int32())}
    return pa.schema([(c, arrow_types[COLUMN_TYPES[c]]) for c in columns])


class _Batch:
    """The typed columns of the rows read so far (one array per header or payload field; the
    segment's constants and the type names are filled in once per batch), and the damage rows
    beside them, which carry nulls and are few."""

    def __init__(self, captured: bool) -> None:
        self.offsets = array("q")
        self.types = array("B")
        self.origins = array("i")
        self.lsns = array("Q")
        self.txn_ids = array("Q")
        self.hlcs = array("Q")
        self.n_rows = array("i")
        self.digests = array("Q")
        self.sizes = array("i")
        self.captured: dict[str, list[Any]] | None = (
            {name: [] for name in CAPTURED_COLUMNS} if captured else None)
        self.damage: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self.offsets) + len(self.damage)


class _SegmentReader:
    """One segment's rows as Arrow batches of the columns asked for."""

    def __init__(self, member: str, path: str, seg_index: int, columns: Sequence[str]) -> None:
        import pyarrow as pa

        self.member = member
        self.path = path
        self.segment = Path(path).name
        self.seg_index = seg_index
        self.columns = list(columns)
        self.schema = arrow_schema(self.columns)
        self.captured = any(c in CAPTURED_COLUMNS for c in self.columns)
        names: list[str | None] = [None] * (max(RecordType) + 1)
        for record_type in RecordType:
            names[record_type] = record_type.name
        self._type_names = pa.array(names, pa.string())

    def batches(self) -> Iterator[Any]:
        with map_segment(Path(self.path)) as buf:
            try:
                _, offset = read_segment_header(buf)
            except WalError as exc:
                batch = _Batch(self.captured)
                self._damage(batch, 0, "BAD_HEADER", f"bad segment header: {exc}")
                yield from self._arrow(batch)
                return
            scanner = RecordScanner(buf, offset)
            while True:
                rows = scanner.fields()
                while True:
                    batch = _Batch(self.captured)
                    self._read(batch, itertools.islice(rows, BATCH_ROWS_MAX))
                    if not len(batch):
                        break
                    yield from self._arrow(batch)
                    _release_read_pages(buf, scanner.valid_end)
                tail, following = scanner.tail()
                if tail is TailKind.CLEAN:
                    return
                batch = _Batch(self.captured)
                if tail is TailKind.TORN:
                    self._damage(batch, scanner.valid_end, "TORN",
                                 f"torn tail: {len(buf) - scanner.valid_end} bytes after offset "
                                 f"{scanner.valid_end} hold no valid record")
                    yield from self._arrow(batch)
                    return
                assert following is not None
                self._damage(batch, scanner.valid_end, "CORRUPT",
                             f"corrupt bytes at offset {scanner.valid_end}..{following}; "
                             f"valid records resume at offset {following}")
                yield from self._arrow(batch)
                scanner.valid_end = following

    def _read(self, batch: _Batch, rows: Iterator[tuple[int, RecordType, int, int, int, bytes]]) -> None:
        """The hot loop: everything that can fail (the decode, a field of the wrong type or
        size) happens before the first append, so a bad payload leaves the columns aligned."""
        unpackb = msgpack.unpackb
        captured = batch.captured
        # Without the captured rows' lists no string is read, so they stay bytes: the decode
        # still proves the payload is whole msgpack, and skips a UTF-8 decode per string.
        raw = captured is None
        hlc_key, rows_key = (b"h", b"r") if raw else ("h", "r")
        dml, ddl = RecordType.DML, RecordType.DDL
        add_offset, add_type, add_origin = batch.offsets.append, batch.types.append, batch.origins.append
        add_lsn, add_txn, add_hlc = batch.lsns.append, batch.txn_ids.append, batch.hlcs.append
        add_n, add_digest, add_size = batch.n_rows.append, batch.digests.append, batch.sizes.append
        for offset, record_type, origin, lsn, txn_id, payload in rows:
            try:
                doc = unpackb(payload, raw=raw, strict_map_key=False)
                hlc = doc[hlc_key]
                if record_type is dml:
                    changes = doc[rows_key]
                    n = len(changes)
                    if captured is not None:
                        tables = [r["t"] for r in changes]
                        ops = [r["op"] for r in changes]
                        keys = [r["k"] for r in changes]
                else:
                    n = 0
                    if captured is not None:
                        tables, ops, keys = ([], [], [doc["sql"]]) if record_type is ddl else ([], [], [])
                add_hlc(hlc)
            except Exception as exc:  # msgpack raises several types for garbage; a bad hlc too
                self._damage(batch, offset, "BAD_PAYLOAD", f"payload does not decode: {exc!r:.200}",
                             origin=origin, lsn=lsn, txn_id=txn_id, payload=payload)
                continue
            add_offset(offset)
            add_type(record_type)
            add_origin(origin)
            add_lsn(lsn)
            add_txn(txn_id)
            add_n(n)
            add_digest(xxh3_64_intdigest(payload))
            add_size(len(payload))
            if captured is not None:
                captured["tables"].append(tables)
                captured["ops"].append(ops)
                captured["keys"].append(keys)

    def _damage(self, batch: _Batch, offset: int, kind: str, error: str, *, origin: int | None = None,
                lsn: int | None = None, txn_id: int | None = None, payload: bytes | None = None) -> None:
        row: dict[str, Any] = {
            "member": self.member, "segment": self.segment, "seg_index": self.seg_index,
            "offset": offset, "pos": (self.seg_index << POS_SEGMENT_SHIFT) | offset, "type": kind,
            "error": error, "origin": origin, "lsn": lsn,
            "txn_id": None if txn_id is None else signed64(txn_id),
        }
        if payload is not None:
            row.update(digest=signed64(xxh3_64_intdigest(payload)), payload_bytes=len(payload))
        batch.damage.append(row)

    def _arrow(self, batch: _Batch) -> Iterator[Any]:
        """The good rows as one record batch of zero-copy views of the arrays, then the damage."""
        import numpy as np
        import pyarrow as pa

        n = len(batch.offsets)
        offsets = np.frombuffer(batch.offsets, np.int64)
        built = {
            "member": lambda: pa.repeat(pa.scalar(self.member, pa.string()), n),
            "segment": lambda: pa.repeat(pa.scalar(self.segment, pa.string()), n),
            "seg_index": lambda: pa.repeat(pa.scalar(self.seg_index, pa.int32()), n),
            "offset": lambda: pa.array(offsets),
            "pos": lambda: pa.array(offsets | (self.seg_index << POS_SEGMENT_SHIFT)),
            "origin": lambda: pa.array(np.frombuffer(batch.origins, np.int32)),
            "lsn": lambda: pa.array(np.frombuffer(batch.lsns, np.int64)),
            "txn_id": lambda: pa.array(np.frombuffer(batch.txn_ids, np.int64)),
            "hlc": lambda: pa.array(np.frombuffer(batch.hlcs, np.int64)),
            "type": lambda: self._type_names.take(pa.array(np.frombuffer(batch.types, np.uint8))),
            "n_rows": lambda: pa.array(np.frombuffer(batch.n_rows, np.int32)),
            "digest": lambda: pa.array(np.frombuffer(batch.digests, np.int64)),
            "payload_bytes": lambda: pa.array(np.frombuffer(batch.sizes, np.int32)),
            "error": lambda: pa.nulls(n, pa.string()),
        }
        captured = batch.captured or {}
        arrays = [pa.array(captured[c], self.schema.field(c).type) if c in CAPTURED_COLUMNS else built[c]()
                  for c in self.columns]
        if n:
            yield pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        if batch.damage:
            yield pa.RecordBatch.from_pylist(batch.damage, schema=self.schema)


def _release_read_pages(buf: Any, end: int) -> None:
    """Unmap the pages of the segment read so far: they stay in the page cache, but would
    otherwise count in the worker's RSS until the whole 64 MiB segment is read."""
    if isinstance(buf, mmap.mmap):
        buf.madvise(mmap.MADV_DONTNEED, 0, end - end % mmap.PAGESIZE)


def scan_segment(member: str, path: str, seg_index: int, columns: Sequence[str] = COLUMNS) -> Iterator[Any]:
    """Decode one segment into Arrow record batches of these columns, at most `BATCH_ROWS_MAX`
    good rows each (no Spark: the data source's workers and the tests call it alike)."""
    return _SegmentReader(member, path, seg_index, columns).batches()


class WalDataSource(DataSource):
    """Options: `paths`, a JSON list of data or WAL directories (see `replicaset.audit.inputs`).
    A schema given to the reader picks and orders the columns (`schema_ddl`)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        columns = [field.name for field in schema.fields]
        wanted = [(field.name, field.dataType.simpleString()) for field in schema.fields]
        offered = [(c, COLUMN_TYPES[c].lower()) for c in columns if c in COLUMN_TYPES]
        if wanted != offered:
            raise ValueError(f"the rswal source reads {schema_ddl([c for c in columns if c in COLUMN_TYPES])}, "
                             f"not {schema.simpleString()} (see schema_ddl)")
        return WalReader(json.loads(self.options.get("paths", "[]")), columns)


class WalReader(DataSourceReader):
    def __init__(self, paths: list[str], columns: Sequence[str]) -> None:
        self.paths = paths
        self.columns = list(columns)

    def partitions(self) -> list[InputPartition]:
        from replicaset.audit.inputs import discover

        members = discover([Path(p) for p in self.paths])
        parts: list[InputPartition] = [
            WalSegmentPartition(m.name, str(s.path), s.index) for m in members for s in m.segments
        ]
        return parts or [WalSegmentPartition("", "", -1)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, WalSegmentPartition)
        if partition.seg_index < 0:
            return
        yield from scan_segment(partition.member, partition.path, partition.seg_index, self.columns)
