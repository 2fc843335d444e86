"""Helpers that drive storage engines in tests: a fake clock, one-call transactions, shipping
rows between members, and readable views of WAL payloads."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import msgpack

from replicaset.storage import Engine, EngineConfig
from replicaset.storage.engine import Committed
from replicaset.storage.rows import DdlPayload, DmlPayload, Op
from wal import HEADER_SIZE, Record, RecordType, VClock

START_MS = 1_700_000_000_000

Statement = str | tuple[str, Any]


class FakeClock:
    """Milliseconds that advance by `step_ms` at every reading (0: time stands still)."""

    def __init__(self, start_ms: int = START_MS, step_ms: int = 1) -> None:
        self.ms = start_ms
        self.step_ms = step_ms

    def __call__(self) -> int:
        value = self.ms
        self.ms += self.step_ms
        return value


class EventLog:
    """The engine's `log` callback, kept for assertions."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def named(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.events if name == event]


_opened: list[Engine] = []


def open_engine(
    data_dir: Path, instance_id: int, clock: Any, *, log: Any = None, **config: Any
) -> Engine:
    """Open an engine; `close_all` (run after every test) closes it unless the test did."""
    if "local_tables" in config:
        config["local_tables"] = frozenset(config["local_tables"])
    cfg = EngineConfig(data_dir=data_dir, instance_id=instance_id, **config)
    engine = Engine.open(cfg, clock_ms=clock) if log is None else Engine.open(cfg, clock_ms=clock, log=log)
    _opened.append(engine)
    return engine


def close_all() -> None:
    """Close every engine still open, keeping file descriptors bounded across examples."""
    while _opened:
        engine = _opened.pop()
        try:
            engine.close()
        except Exception:  # a test may have left an engine half-broken on purpose
            pass


def run(engine: Engine, *statements: Statement, explicit: bool = False) -> Committed | None:
    """One client transaction, committed and flushed; every statement must succeed. Several
    statements make a stream transaction, as in the server (autocommit runs one)."""
    txn = engine.begin(explicit=explicit or len(statements) > 1)
    for statement in statements:
        sql, binds = (statement, ()) if isinstance(statement, str) else statement
        engine.execute(txn, sql, binds)
    committed = engine.commit(txn)
    engine.flush()
    return committed


def select(engine: Engine, sql: str, binds: Any = ()) -> list[list[Any]]:
    result = engine.query(sql, binds)
    assert result is not None, f"{sql!r} is not a read"
    return result.rows


def wal_records(engine: Engine) -> list[Record]:
    return list(engine.wal.read_from(VClock()))


def dml_records(engine: Engine) -> list[Record]:
    return [r for r in wal_records(engine) if r.type == RecordType.DML]


def changes(record: Record) -> list[tuple[str, str, str, dict | None, dict | None]]:
    """(table, op name, key, old image, new image) of every row of a DML record."""
    assert record.type == RecordType.DML
    return [
        (row.table, Op(row.op).name, row.key, row.old, row.new)
        for row in DmlPayload.unpack(record.payload).rows
    ]


def ddl(record: Record) -> DdlPayload:
    assert record.type == RecordType.DDL
    return DdlPayload.unpack(record.payload)


def ship(source: Engine, target: Engine) -> int:
    """Apply to `target` every row of `source`'s WAL it does not hold yet (one batch), as a
    relay would: rows of origin 0 (local tables) never leave their member."""
    applied = sum(target.apply(record) for record in wal_records(source) if record.origin != 0)
    target.flush()
    return applied


def bootstrap(root: Path, clock: Any, count: int, *schema: str) -> list[Engine]:
    """Members 1..count under `root`; member 1 writes the schema and the others apply it."""
    engines = [open_engine(root / f"e{i}", i, clock) for i in range(1, count + 1)]
    for sql in schema:
        run(engines[0], sql)
    for other in engines[1:]:
        ship(engines[0], other)
    return engines


def exchange(*engines: Engine) -> None:
    """Every member ships what it holds to every other, once each way."""
    for target in engines:
        for source in engines:
            if source is not target:
                ship(source, target)


def apply_all(target: Engine, records: Iterable[Record]) -> int:
    applied = sum(target.apply(record) for record in records)
    target.flush()
    return applied


def cut_last_records(engine_dir: Path, records: list[Record], count: int) -> None:
    """Drop the last `count` records from the end of the live segment, as an OS crash
    under wal_mode = write loses the tail the page cache still held."""
    segment = sorted((engine_dir / "wal").glob("*.wal"))[-1]
    size = sum(HEADER_SIZE + len(r.payload) for r in records[-count:])
    os.truncate(segment, segment.stat().st_size - size)


def versions(engine: Engine, table: str) -> dict[str, tuple[int, int, int]]:
    return {key: (hlc, origin, int(deleted)) for key, (hlc, origin, deleted) in engine.versions(table).items()}


def b64(value: Any) -> str:
    """base64 of msgpack, the encoding of non-integer key values (docs/design/README.md §5)."""
    return base64.b64encode(msgpack.packb(value, use_bin_type=True)).decode("ascii")
