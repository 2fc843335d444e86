"""The payloads of WAL rows: captured row changes and DDL statements.

A DML payload is `{"h": commit hlc, "s": [schema origin, schema lsn], "r": [row, ...]}`,
with `"q": txn id` when a quorum transaction wrote it (docs/design/README.md §4.5: the row is its decision);
each row is `{"t": table, "op": op, "k": intent key, "o": old image, "n": new image}` with
full images by column name (docs/design/README.md §5); rows of a table without a declared
primary key, which is keyed by its rowid, also carry the rowid under `"rowid"`. Tables and
columns are named as the schema `"s"` had them: an applier carries a row through the renames
and drops it holds after that schema (`renames.py`).
A DDL payload is `{"h": hlc, "sql": text as written, "hb": hash before, "ha": hash after}`,
with `"q"` likewise when the DDL lock's quorum transaction wrote it (docs/design/README.md §4.6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import msgpack



class Op(IntEnum):
    INSERT = 0
    REPLACE = 1
    UPDATE = 2
    DELETE = 3


_OPS = {op.value: op for op in Op}


@dataclass(slots=True, kw_only=True)
class CapturedRow:
    table: str
    op: Op
    key: str
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    rowid: int | None = None

    def to_wire(self) -> dict[str, Any]:
        row: dict[str, Any] = {"t": self.table, "op": int(self.op), "k": self.key}
        if self.old is not None:
            row["o"] = self.old
        if self.new is not None:
            row["n"] = self.new
        if self.rowid is not None:
            row["rowid"] = self.rowid
        return row

    @classmethod
    def from_wire(cls, row: Any) -> CapturedRow:
        """Checked, for it comes from a peer; on the apply path of every row, so lean."""
        if type(row) is not dict:
            raise ValueError(f"captured row is not a map: {row!r:.80}")
        code, table, key = row.get("op"), row.get("t"), row.get("k")
        op = _OPS.get(code) if type(code) is int else None
        if op is None or type(table) is not str or type(key) is not str:
            raise ValueError(f"captured row lacks a valid table, op or key: {row!r:.120}")
        old, new = row.get("o"), row.get("n")
        if (old is not None and type(old) is not dict) or (new is not None and type(new) is not dict):
            raise ValueError(f"captured row images are not maps: {row!r:.120}")
        if (old if op is Op.DELETE else new) is None:
            raise ValueError(f"captured {op.name} row lacks its image: {row!r:.120}")
        rowid = row.get("rowid")
        if rowid is not None and type(rowid) is not int:
            raise ValueError(f"captured row has a bad rowid: {row!r:.120}")
        return cls(table=table, op=op, key=key, old=old, new=new, rowid=rowid)


@dataclass(slots=True, kw_only=True)
class DmlPayload:
    hlc: int
    schema_id: tuple[int, int]
    rows: list[CapturedRow] = field(default_factory=list)
    quorum_txn: int | None = None

    def pack(self) -> bytes:
        doc: dict[str, Any] = {"h": self.hlc, "s": list(self.schema_id), "r": [r.to_wire() for r in self.rows]}
        if self.quorum_txn is not None:
            doc["q"] = self.quorum_txn
        return msgpack.packb(doc, use_bin_type=True)

    @classmethod
    def unpack(cls, data: bytes) -> DmlPayload:
        doc = _unpack_map(data)
        try:
            hlc, schema = doc["h"], doc["s"]
            rows = [CapturedRow.from_wire(r) for r in doc["r"]]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"DML payload lacks h, s or r: {exc}") from exc
        if not isinstance(hlc, int) or not isinstance(schema, list) or len(schema) != 2:
            raise ValueError("DML payload has a bad hlc or schema id")
        return cls(hlc=hlc, schema_id=(schema[0], schema[1]), rows=rows, quorum_txn=_quorum_txn(doc, "DML"))


@dataclass(slots=True, kw_only=True, frozen=True)
class DdlPayload:
    """`quorum_txn`: the DDL lock's transaction whose decision this row is (docs/design/README.md §4.6)."""

    hlc: int
    sql: str
    hash_before: int
    hash_after: int
    quorum_txn: int | None = None

    def pack(self) -> bytes:
        doc = {"h": self.hlc, "sql": self.sql, "hb": self.hash_before, "ha": self.hash_after}
        if self.quorum_txn is not None:
            doc["q"] = self.quorum_txn
        return msgpack.packb(doc, use_bin_type=True)

    @classmethod
    def unpack(cls, data: bytes) -> DdlPayload:
        doc = _unpack_map(data)
        try:
            payload = cls(hlc=doc["h"], sql=doc["sql"], hash_before=doc["hb"], hash_after=doc["ha"],
                          quorum_txn=_quorum_txn(doc, "DDL"))
        except KeyError as exc:
            raise ValueError(f"DDL payload lacks {exc}") from exc
        if not isinstance(payload.sql, str) or not isinstance(payload.hlc, int):
            raise ValueError("DDL payload has a bad sql text or hlc")
        return payload


def _quorum_txn(doc: dict[str, Any], kind: str) -> int | None:
    quorum_txn = doc.get("q")
    if quorum_txn is not None and (not isinstance(quorum_txn, int) or not 0 < quorum_txn < 2**64):
        raise ValueError(f"{kind} payload has a bad quorum txn id {quorum_txn!r:.40}")
    return quorum_txn


def _unpack_map(data: bytes) -> dict[str, Any]:
    try:
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ValueError(f"payload is not valid msgpack: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("payload is not a msgpack map")
    return doc
