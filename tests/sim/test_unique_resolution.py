"""Secondary UNIQUE collisions resolve to the same table whatever the arrival order.

The first case is the divergence the simulator found (seed 13 of the long sweep): a row
that lost a collision used to be tombstoned at the winner's *current* version, which
depends on what the member had seen.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from replicaset.storage import Engine, EngineConfig

SCHEMA = "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, u INTEGER UNIQUE)"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> int:
        return self.ms


def open_engine(root: Path, name: str, instance_id: int, clock: Clock) -> Engine:
    return Engine.open(EngineConfig(data_dir=root / name, instance_id=instance_id), clock_ms=clock)


def write(engine: Engine, sql: str, *binds):
    txn = engine.begin()
    engine.execute(txn, sql, binds)
    committed = engine.commit(txn)
    engine.flush()
    return list(committed.records) if committed else []


def converge(tmp_path: Path, histories: dict[int, list], schema_records: list) -> set:
    """Apply every origin's rows to fresh observers in every interleaving of origins."""
    digests = set()
    origins = sorted(histories)
    for n, order in enumerate(itertools.permutations(origins)):
        observer = open_engine(tmp_path, f"observer{n}", 9, Clock())
        for record in schema_records:
            observer.apply(record)
        for origin in order:
            for record in histories[origin]:
                observer.apply(record)
        observer.flush()
        digests.add(str(observer.table_digest()) + str(observer._reader.execute("SELECT * FROM kv ORDER BY k").fetchall()))
        observer.close()
    return digests


def test_collision_loser_does_not_depend_on_what_the_winner_became(tmp_path):
    clock = Clock()
    a, b = open_engine(tmp_path, "a", 1, clock), open_engine(tmp_path, "b", 2, clock)
    schema = write(a, SCHEMA)
    b.apply(schema[0])
    b.flush()
    a_rows = write(a, "INSERT INTO kv VALUES (5, 'x', 1)")
    clock.ms += 1
    b_rows = write(b, "INSERT INTO kv VALUES (1, 'b', 3)")        # older
    clock.ms += 1
    a_rows += write(a, "UPDATE kv SET u = 3 WHERE k = 5")          # newer: kv:1 loses
    clock.ms += 1
    a_rows += write(a, "UPDATE kv SET v = 'y' WHERE k = 5")         # the winner moves on
    digests = converge(tmp_path, {1: a_rows, 2: b_rows}, schema)
    assert len(digests) == 1
    assert "[(5, 'y', 3)]" in digests.pop()
    a.close(), b.close()


def test_a_released_value_brings_the_loser_back_everywhere(tmp_path):
    clock = Clock()
    a, b = open_engine(tmp_path, "a", 1, clock), open_engine(tmp_path, "b", 2, clock)
    schema = write(a, SCHEMA)
    b.apply(schema[0])
    b.flush()
    b_rows = write(b, "INSERT INTO kv VALUES (1, 'b', 3)")
    clock.ms += 1
    a_rows = write(a, "INSERT INTO kv VALUES (5, 'a', 3)")         # newer, same u: kv:1 waits
    clock.ms += 1
    a_rows += write(a, "UPDATE kv SET u = 4 WHERE k = 5")          # releases u = 3
    digests = converge(tmp_path, {1: a_rows, 2: b_rows}, schema)
    assert len(digests) == 1
    (digest,) = digests
    assert "[(1, 'b', 3), (5, 'a', 4)]" in digest, "kv:1 is back once u = 3 is free"
    # The origin itself, which never saw the collision, agrees.
    for record in b_rows:
        a.apply(record)
    a.flush()
    assert a._reader.execute("SELECT * FROM kv ORDER BY k").fetchall() == [(1, "b", 3), (5, "a", 4)]
    a.close(), b.close()
