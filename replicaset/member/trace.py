"""How a row shows in a trace of `specs/VClockReplication.tla`, and a SWIM update in one of
`specs/Swim.tla`, wherever they are traced.

A row's changes are `[key, value id]` per key it changes (the last change of a key in the
row is what stays), None for a delete; a DDL row changes the one key "schema". A value id
is 24 bits of a digest of the image's columns; a stamp is the row's HLC stamp, which
last-writer-wins compares.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import msgpack

from replicaset.core.swim import Update
from replicaset.storage.rows import DdlPayload, DmlPayload, Op
from wal import Record, RecordType


def traced_ops(record: Record) -> list[list[Any]]:
    """A row's changes as the spec sees them."""
    if record.type == RecordType.DDL:
        return [["schema", "ddl"]]
    ops = {row.key: None if row.op is Op.DELETE else value_id(row.new or {})
           for row in DmlPayload.unpack(record.payload).rows}
    return [[key, value] for key, value in ops.items()]


def value_id(image: dict[str, Any]) -> str:
    """A short id of a row image's content."""
    digest = zlib.crc32(msgpack.packb(sorted(image.items()), use_bin_type=True)) & 0xFFFFFF
    return f"v{digest:06x}"


def stamp(record: Record) -> int:
    """The HLC stamp of a row."""
    if record.type == RecordType.DDL:
        return DdlPayload.unpack(record.payload).hlc
    return DmlPayload.unpack(record.payload).hlc


def traced_updates(updates: Sequence[Update]) -> list[list[Any]]:
    """SWIM updates as the spec's datagrams hold them: `[member, state, incarnation]`, the
    state by the spec's name (the wire's codes would need a table in the check)."""
    return [[u.member, u.state.value, u.incarnation] for u in updates]
