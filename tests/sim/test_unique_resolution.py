"""Secondary UNIQUE collisions resolve to the same table whatever the arrival order.

The first case is the divergence the simulator found (seed 13 of the long sweep): a row
that lost a collision used to be tombstoned at the winner's *current* version, which
depends on what the member had seen.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
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


INTERLEAVINGS_MAX = 200  # each one is a fresh engine: keeps a case within a few seconds


def interleavings(histories: dict[int, list]) -> Iterator[list]:
    """Every merge of the origins' sequences that keeps each origin's own order: the
    arrival orders a member can see (rows of one origin arrive in LSN order)."""
    origins = [origin for origin in sorted(histories) if histories[origin]]
    if not origins:
        yield []
        return
    for origin in origins:
        first, *rest = histories[origin]
        for tail in interleavings({**histories, origin: rest}):
            yield [first, *tail]


def interleaving_count(histories: dict[int, list]) -> int:
    """The multinomial coefficient: (sum of lengths)! / product of each length!."""
    count = math.factorial(sum(map(len, histories.values())))
    for history in histories.values():
        count //= math.factorial(len(history))
    return count


def converge(tmp_path: Path, histories: dict[int, list], schema_records: list) -> set[tuple[str, tuple]]:
    """Apply every origin's rows to fresh observers in every interleaving of the rows; returns the distinct (digest, rows) the observers end with."""
    assert interleaving_count(histories) <= INTERLEAVINGS_MAX, "the case grew past the bound: shrink it"
    outcomes = set()
    seen = 0
    for n, order in enumerate(interleavings(histories)):
        observer = open_engine(tmp_path, f"observer{n}", 9, Clock())
        for record in [*schema_records, *order]:
            observer.apply(record)
        observer.flush()
        outcomes.add((str(observer.table_digest()), tuple(map(tuple, observer.query("SELECT * FROM kv ORDER BY k").rows))))
        observer.close()
        seen += 1
    assert seen == interleaving_count(histories)
    return outcomes


def test_interleavings_are_every_merge_that_keeps_each_origin_in_order() -> None:
    histories = {1: ["a1", "a2", "a3"], 2: ["b1", "b2"], 3: ["c1"]}
    merges = list(interleavings(histories))
    assert len(merges) == len(set(map(tuple, merges))) == interleaving_count(histories) == 60
    for merge in merges:
        assert sorted(merge) == sorted(sum(histories.values(), []))
        for history in histories.values():
            assert [row for row in merge if row in history] == history
    assert ["a1", "b1", "a2", "c1", "b2", "a3"] in merges  # not a permutation of whole blocks


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
    outcomes = converge(tmp_path, {1: a_rows, 2: b_rows}, schema)
    assert len(outcomes) == 1
    ((_, rows),) = outcomes
    assert rows == ((5, "y", 3),)
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
    outcomes = converge(tmp_path, {1: a_rows, 2: b_rows}, schema)
    assert len(outcomes) == 1
    ((_, rows),) = outcomes
    assert rows == ((1, "b", 3), (5, "a", 4)), "kv:1 is back once u = 3 is free"
    # The origin itself, which never saw the collision, agrees.
    for record in b_rows:
        a.apply(record)
    a.flush()
    assert a.query("SELECT * FROM kv ORDER BY k").rows == [[1, "b", 3], [5, "a", 4]]
    a.close(), b.close()


def test_a_value_passed_from_hand_to_hand_ends_with_its_oldest_holder_everywhere(tmp_path):
    """Three origins want u = 7, each newer than the last; the two newer ones let it go
    again. Whatever order the five rows arrive in, the oldest holder has it back."""
    clock = Clock()
    a, b, c = (open_engine(tmp_path, name, i, clock) for i, name in enumerate("abc", start=1))
    schema = write(a, SCHEMA)
    for member in (b, c):
        member.apply(schema[0])
        member.flush()
    c_rows = write(c, "INSERT INTO kv VALUES (1, 'c', 7)")
    clock.ms += 1
    b_rows = write(b, "INSERT INTO kv VALUES (2, 'b', 7)")          # newer: kv:1 waits
    clock.ms += 1
    a_rows = write(a, "INSERT INTO kv VALUES (3, 'a', 7)")          # newer still: kv:2 waits
    clock.ms += 1
    b_rows += write(b, "UPDATE kv SET u = 8 WHERE k = 2")           # kv:2 moves off
    clock.ms += 1
    a_rows += write(a, "DELETE FROM kv WHERE k = 3")                # u = 7 is free again
    outcomes = converge(tmp_path, {1: a_rows, 2: b_rows, 3: c_rows}, schema)
    assert len(outcomes) == 1
    ((_, rows),) = outcomes
    assert rows == ((1, "c", 7), (2, "b", 8))
    a.close(), b.close(), c.close()
