"""Intent keys: one text key per row, the same on every member.

Layout (docs/design/README.md §5, Marmot v2): `table:123` for a single integer primary key,
`table:b64:<base64(msgpack(value))>` for any other single value (msgpack keeps the
type, so the integer 5 and the text '5' stay distinct keys), `table:c:<b64>:<b64>...`
for a composite key with the columns sorted by name, and `table:\\x00NULL\\x00` when a
single key value is NULL (possible in a non-rowid table without NOT NULL).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import msgpack

NULL_SENTINEL = "\x00NULL\x00"

# The key a DDL statement's quorum transaction holds: the set's DDL lock (docs/design/README.md §4.6). Its
# version is the schema id, the last replicated DDL row; no table has this key.
SCHEMA_KEY = ("_rs_schema", "_rs_schema:ddl")


def _b64(value: Any) -> str:
    return base64.b64encode(msgpack.packb(value, use_bin_type=True)).decode("ascii")


def intent_key(table: str, pk_columns: Sequence[str], values: Sequence[Any]) -> str:
    """The key of a row given its primary-key columns and their values (same order)."""
    if len(pk_columns) == 1:
        value = values[0]
        if value is None:
            return f"{table}:{NULL_SENTINEL}"
        if type(value) is int:
            return f"{table}:{value}"
        return f"{table}:b64:{_b64(value)}"
    ordered = sorted(zip(pk_columns, values), key=lambda pair: pair[0])
    return f"{table}:c:" + ":".join(_b64(value) for _, value in ordered)
