"""The `rswal` source's columns and their Spark types, and how u64 fields are stored in them.

Kept apart from the data source itself (which imports PySpark), so that the checks, the
runner and the command line can name columns without the audit extra installed.
"""

from __future__ import annotations

from collections.abc import Sequence

_SIGN = 1 << 63
_WRAP = 1 << 64

COLUMN_TYPES = {
    "member": "STRING", "segment": "STRING", "seg_index": "INT", "offset": "BIGINT",
    "pos": "BIGINT", "origin": "INT", "lsn": "BIGINT", "txn_id": "BIGINT", "hlc": "BIGINT",
    "type": "STRING", "tables": "ARRAY<STRING>", "ops": "ARRAY<INT>", "keys": "ARRAY<STRING>",
    "n_rows": "INT", "digest": "BIGINT", "payload_bytes": "INT", "error": "STRING",
}
COLUMNS = list(COLUMN_TYPES)
CAPTURED_COLUMNS = ("tables", "ops", "keys")
"""The per-row lists: built only when the schema asks for them."""


def schema_ddl(columns: Sequence[str] = COLUMNS) -> str:
    """The Spark schema of these columns, in this order."""
    unknown = [c for c in columns if c not in COLUMN_TYPES]
    if unknown:
        raise ValueError(f"the rswal source has no column {', '.join(unknown)} (it has {', '.join(COLUMNS)})")
    return ", ".join(f"{c} {COLUMN_TYPES[c]}" for c in columns)


SCHEMA_DDL = schema_ddl()


def signed64(value: int) -> int:
    """A u64 as the signed 64-bit integer with the same bits (Spark has no unsigned long)."""
    return value - _WRAP if value >= _SIGN else value


def unsigned64(value: int) -> int:
    return value + _WRAP if value < 0 else value
