"""Apply: each (origin, LSN) once and in order, last-writer-wins by version, and members that
hold the same rows hold the same tables and versions whatever order the rows came in
(docs/design/README.md §4.2, 4.3, 4.6)."""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replicaset.storage import ApplyError, Engine, GapError, SchemaDivergence
from replicaset.storage.errors import SchemaPending
from replicaset.storage.rows import CapturedRow, DmlPayload, Op
from replicaset.testing import lww
from tests.storage.enginekit import (
    START_MS,
    FakeClock,
    apply_all,
    bootstrap,
    close_all,
    ddl,
    exchange,
    open_engine,
    run,
    select,
    ship,
    versions,
    wal_records,
)
from wal import Record, RecordType, VClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def state(engine: Engine) -> tuple:
    return engine.table_digest(), engine.vclock.copy(), engine.pending_vclock.copy(), len(wal_records(engine))


KV = "CREATE TABLE kv(id INTEGER PRIMARY KEY, v TEXT)"
ACCT = "CREATE TABLE acct(id INTEGER PRIMARY KEY, email TEXT UNIQUE, v TEXT)"


# ------------------------------------------------------------------ apply-once


def test_a_record_applied_twice_changes_nothing_the_second_time(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    record = run(e1, "INSERT INTO kv VALUES (1, 'a')").records[0]
    assert e2.apply(record) is True
    assert e2.apply(record) is False  # still queued: the pending vclock already holds it
    e2.flush()
    after_first = state(e2)
    assert e2.apply(record) is False
    e2.flush()
    assert state(e2) == after_first
    assert select(e2, "SELECT * FROM kv") == [[1, "a"]]
    assert [(r.origin, r.lsn) for r in wal_records(e2)] == [(1, 1), (1, 2)]


def test_an_old_copy_does_not_undo_later_rows(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    first = run(e1, "INSERT INTO kv VALUES (1, 'a')").records[0]
    run(e1, "UPDATE kv SET v = 'b' WHERE id = 1")
    ship(e1, e2)
    before = state(e2)
    assert e2.apply(first) is False
    e2.flush()
    assert state(e2) == before
    assert select(e2, "SELECT v FROM kv") == [["b"]]


def test_a_gap_raises_and_changes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    second_row = run(e1, "INSERT INTO kv VALUES (1, 'a')").records[0]
    third_row = run(e1, "INSERT INTO kv VALUES (2, 'b')").records[0]
    assert (second_row.lsn, third_row.lsn) == (2, 3)
    before = state(e2)
    with pytest.raises(GapError, match="1:3"):
        e2.apply(third_row)
    e2.flush()
    assert state(e2) == before
    # once the missing row arrives, both apply in order
    assert e2.apply(second_row) and e2.apply(third_row)
    e2.flush()
    assert select(e2, "SELECT * FROM kv") == [[1, "a"], [2, "b"]]
    assert e2.vclock == VClock({1: 3})


def test_rows_of_our_own_origin_from_a_peer_are_dropped(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    run(e1, "INSERT INTO kv VALUES (1, 'a')")
    ship(e1, e2)
    before = state(e1)
    # e2 relays e1's rows back: e1 drops them
    assert ship(e2, e1) == 0
    assert state(e1) == before
    # a row claiming our origin with the next LSN (another member reusing our id) is dropped too
    forged_payload = DmlPayload(
        hlc=START_MS << 22,
        schema_id=(1, 1),
        rows=[CapturedRow(table="kv", op=Op.INSERT, key="kv:9", new={"id": 9, "v": "forged"})],
    ).pack()
    forged = Record(type=RecordType.DML, origin=1, lsn=3, txn_id=START_MS << 22, payload=forged_payload)
    assert e1.apply(forged) is False
    e1.flush()
    assert state(e1) == before
    assert only_lsn_of(run(e1, "INSERT INTO kv VALUES (2, 'b')")) == 3


def only_lsn_of(committed) -> int:
    [record] = committed.records
    return record.lsn


def test_a_row_that_cannot_be_applied_raises_and_changes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    ship(e1, e2)
    payload = DmlPayload(
        hlc=START_MS << 22,
        schema_id=(1, 1),
        rows=[
            CapturedRow(table="kv", op=Op.INSERT, key="kv:1", new={"id": 1, "v": "a"}),
            CapturedRow(table="nosuch", op=Op.INSERT, key="nosuch:1", new={"id": 1}),
        ],
    ).pack()
    record = Record(type=RecordType.DML, origin=3, lsn=1, txn_id=START_MS << 22, payload=payload)
    before = state(e2)
    with pytest.raises(ApplyError, match="nosuch"):
        e2.apply(record)
    e2.flush()
    assert state(e2) == before  # the first row of the record is gone too
    assert select(e2, "SELECT * FROM kv") == []
    bad_column = replace(
        record,
        payload=DmlPayload(
            hlc=START_MS << 22,
            schema_id=(1, 1),
            rows=[CapturedRow(table="kv", op=Op.INSERT, key="kv:1", new={"id": 1, "nosuch": 2})],
        ).pack(),
    )
    with pytest.raises(ApplyError, match="nosuch"):
        e2.apply(bad_column)
    e2.flush()
    assert state(e2) == before


def test_a_corrupt_payload_raises_and_changes_nothing(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    record = run(e1, "INSERT INTO kv VALUES (1, 'a')").records[0]
    before = state(e2)
    for payload in (b"\xc1", b"\x92\x01\x02", DmlPayload(hlc=1, schema_id=(1, 1), rows=[]).pack()[:-1]):
        with pytest.raises(ApplyError):
            e2.apply(replace(record, payload=payload))
    e2.flush()
    assert state(e2) == before
    assert e2.apply(record)


def test_a_data_row_waits_for_the_schema_it_was_written_against(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2, e3 = bootstrap(tmp_path, clock, 3, KV)
    create = run(e1, "CREATE TABLE extra(id INTEGER PRIMARY KEY, v TEXT)").records[0]
    ship(e1, e2)
    row = run(e2, "INSERT INTO extra VALUES (1, 'from e2')").records[0]
    before = state(e3)
    with pytest.raises(SchemaPending) as raised:
        e3.apply(row)  # came by a faster path than e1's DDL
    assert raised.value.schema_id == (1, 2)
    e3.flush()
    assert state(e3) == before
    assert e3.apply(create) and e3.apply(row)
    e3.flush()
    assert select(e3, "SELECT * FROM extra") == [[1, "from e2"]]


def test_ddl_against_a_different_schema_is_refused_naming_both_hashes(tmp_path: Path, clock: FakeClock) -> None:
    e1 = open_engine(tmp_path / "e1", 1, clock)
    e2 = open_engine(tmp_path / "e2", 2, clock)
    run(e1, KV)
    record = run(e1, "CREATE TABLE extra(id INTEGER PRIMARY KEY)").records[0]
    run(e2, "CREATE TABLE other(id INTEGER PRIMARY KEY)")  # e2 went its own way
    before = state(e2)
    payload = ddl(wal_records(e1)[0])
    with pytest.raises(SchemaDivergence, match=f"{payload.hash_before:016x}"):
        e2.apply(wal_records(e1)[0])
    with pytest.raises(GapError):
        e2.apply(record)
    e2.flush()
    assert state(e2) == before
    assert select(e2, "SELECT name FROM sqlite_schema WHERE name IN ('kv', 'extra')") == []


def test_a_peer_drop_table_of_an_integer_key_table_applies(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV, ACCT)
    run(e1, "INSERT INTO kv VALUES (1, 'a')")
    ship(e1, e2)
    run(e1, "DROP TABLE kv")
    ship(e1, e2)
    assert select(e2, "SELECT name FROM sqlite_schema WHERE name = 'kv'") == []
    run(e2, "INSERT INTO acct(email) VALUES ('x@y')")
    assert e2.vclock == VClock({1: 4, 2: 1})


# ------------------------------------------------------------------ last writer wins


def observe(root: Path, clock: FakeClock, name: str, records: list[Record]) -> Engine:
    observer = open_engine(root / name, 9, clock)
    apply_all(observer, records)
    return observer


@pytest.mark.parametrize("newer", ["delete", "update"])
def test_concurrent_delete_and_update_converge_to_the_newer(tmp_path: Path, clock: FakeClock, newer: str) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    run(e1, "INSERT INTO kv VALUES (1, 'old')")
    exchange(e1, e2)
    # neither member has seen the other's change; the clock makes e2's the newer one
    older, newer_sql = "UPDATE kv SET v = 'updated' WHERE id = 1", "DELETE FROM kv WHERE id = 1"
    if newer == "update":
        older, newer_sql = newer_sql, older
    older_record = run(e1, older).records[0]
    newer_record = run(e2, newer_sql).records[0]
    assert newer_record.txn_id > older_record.txn_id
    schema_and_insert = [r for r in wal_records(e1) if r.origin == 1][:2]
    expected = [] if newer == "delete" else [[1, "updated"]]
    obs_a = observe(tmp_path, clock, "a", [*schema_and_insert, older_record, newer_record])
    obs_b = observe(tmp_path, clock, "b", [*schema_and_insert, newer_record, older_record])
    exchange(e1, e2)
    for member in (e1, e2, obs_a, obs_b):
        assert select(member, "SELECT * FROM kv") == expected, member.instance_id
        assert member.table_digest() == e1.table_digest()
        assert member.vclock == e1.vclock
    assert versions(e1, "kv")["kv:1"] == (newer_record.txn_id, 2, 1 if newer == "delete" else 0)


def test_a_delete_then_reinsert_wins_over_an_older_concurrent_update(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    run(e1, "INSERT INTO kv VALUES (1, 'old')")
    exchange(e1, e2)
    run(e2, "UPDATE kv SET v = 'from e2' WHERE id = 1")
    run(e1, "DELETE FROM kv WHERE id = 1")
    run(e1, "INSERT INTO kv VALUES (1, 'reborn')")
    exchange(e1, e2)
    for member in (e1, e2):
        assert select(member, "SELECT * FROM kv") == [[1, "reborn"]]
    assert e1.table_digest() == e2.table_digest()


@pytest.mark.parametrize("order", ["older first", "newer first"])
def test_a_unique_collision_between_two_origins_keeps_the_newer_row(
    tmp_path: Path, clock: FakeClock, order: str
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, ACCT)
    older = run(e1, "INSERT INTO acct VALUES (1, 'same@x', 'from e1')").records[0]
    newer = run(e2, "INSERT INTO acct VALUES (2, 'same@x', 'from e2')").records[0]
    assert newer.txn_id > older.txn_id
    schema = wal_records(e1)[:1]
    obs = observe(tmp_path, clock, "obs", schema + ([older, newer] if order == "older first" else [newer, older]))
    exchange(e1, e2)
    for member in (e1, e2, obs):
        assert select(member, "SELECT * FROM acct") == [[2, "same@x", "from e2"]]
        assert member.table_digest() == e1.table_digest()
        assert member.vclock == e1.vclock


def test_a_unique_loser_comes_back_everywhere_when_the_winner_releases_the_value(
    tmp_path: Path, clock: FakeClock
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, ACCT)
    older = run(e1, "INSERT INTO acct VALUES (1, 'same@x', 'from e1')").records[0]
    newer = run(e2, "INSERT INTO acct VALUES (2, 'same@x', 'from e2')").records[0]
    exchange(e1, e2)
    assert select(e1, "SELECT id FROM acct") == select(e2, "SELECT id FROM acct") == [[2]]
    release = run(e2, "UPDATE acct SET email = 'other@x' WHERE id = 2").records[0]
    schema = wal_records(e1)[:1]
    obs = observe(tmp_path, clock, "obs", [*schema, newer, release, older])
    exchange(e1, e2)
    for member in (e1, e2, obs):
        assert select(member, "SELECT * FROM acct") == [[1, "same@x", "from e1"], [2, "other@x", "from e2"]]
        assert member.table_digest() == e1.table_digest()


def test_rows_of_one_transaction_apply_together(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, KV)
    run(e1, "INSERT INTO kv VALUES (1, 'a'), (2, 'b')")
    run(e1, "DELETE FROM kv WHERE id = 1", "INSERT INTO kv VALUES (1, 'again')", "UPDATE kv SET id = 3 WHERE id = 2", explicit=True)
    ship(e1, e2)
    assert select(e2, "SELECT * FROM kv") == [[1, "again"], [3, "b"]]
    assert e2.table_digest() == e1.table_digest()


def test_a_write_made_after_seeing_a_peer_row_wins_everywhere(tmp_path: Path) -> None:
    still = FakeClock(step_ms=0)  # both members read the same millisecond
    e1, e2 = bootstrap(tmp_path, still, 2, KV)
    run(e2, "INSERT INTO kv VALUES (1, 'from e2')")
    ship(e2, e1)
    run(e1, "UPDATE kv SET v = 'from e1, later' WHERE id = 1")  # e1 has seen e2's row
    exchange(e1, e2)
    assert select(e2, "SELECT v FROM kv") == [["from e1, later"]]
    assert e1.table_digest() == e2.table_digest()


def test_an_update_that_moves_off_a_unique_value_survives_a_newer_rival(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, ACCT)
    run(e1, "INSERT INTO acct VALUES (1, 'x@x', 'a')")  # v1
    run(e1, "UPDATE acct SET email = 'y@y' WHERE id = 1")  # v2: no longer collides
    run(e2, "INSERT INTO acct VALUES (2, 'x@x', 'b')")  # v3, before e2 hears of e1
    exchange(e1, e2)
    # in version order no row ever collided: both rows stay, on every member
    assert select(e1, "SELECT * FROM acct") == [[1, "y@y", "a"], [2, "x@x", "b"]]
    assert select(e2, "SELECT * FROM acct") == select(e1, "SELECT * FROM acct")


def test_a_unique_rival_deleted_before_the_older_row_arrives_converges(tmp_path: Path, clock: FakeClock) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, ACCT)
    run(e1, "INSERT INTO acct VALUES (1, 'x@x', 'a')")  # v1
    run(e2, "INSERT INTO acct VALUES (2, 'x@x', 'b')")  # v2 evicts row 1 where both are seen
    run(e2, "DELETE FROM acct WHERE id = 2")  # v3
    exchange(e1, e2)
    # e1 saw row 1 lose to row 2 and come back when row 2 went; e2 never saw them collide
    for member in (e1, e2):
        assert select(member, "SELECT * FROM acct") == [[1, "x@x", "a"]], member.instance_id
        assert {k: deleted for k, (_, _, deleted) in versions(member, "acct").items()} == {"acct:1": 0, "acct:2": 1}
    assert e1.table_digest() == e2.table_digest()


@pytest.mark.parametrize(
    ("create", "mine", "theirs", "kept"),
    [
        ("CREATE TABLE k(id TEXT COLLATE NOCASE PRIMARY KEY, v TEXT)", "Ann", "ann", ["ann", "text"]),
        ("CREATE TABLE k(id PRIMARY KEY, v TEXT)", 1, 1.0, [1.0, "real"]),
    ],
    ids=["nocase", "integer-and-real"],
)
def test_concurrent_inserts_of_keys_the_table_treats_as_equal_converge(
    tmp_path: Path, clock: FakeClock, create: str, mine: object, theirs: object, kept: list
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, create)
    run(e1, ("INSERT INTO k VALUES (?, 'from e1')", [mine]))
    run(e2, ("INSERT INTO k VALUES (?, 'from e2')", [theirs]))  # newer
    exchange(e1, e2)
    # The newer row whole, its key's spelling and type included (1 == 1.0 in Python: typeof).
    for member in (e1, e2):
        assert select(member, "SELECT id, typeof(id), v FROM k") == [[*kept, "from e2"]], member.instance_id
    assert e1.table_digest() == e2.table_digest()


ORDERS = (
    "CREATE TABLE ord(id INTEGER PRIMARY KEY, customer TEXT, status TEXT COLLATE NOCASE)",
    "CREATE UNIQUE INDEX ord_one_open ON ord(customer) WHERE status = 'open'",
)


def test_rows_a_partial_unique_index_lets_coexist_in_one_transaction_reach_a_peer(
    tmp_path: Path, clock: FakeClock
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, *ORDERS)
    run(e1, "INSERT INTO ord VALUES (1, 'acme', 'closed'), (2, 'acme', 'open')")
    ship(e1, e2)
    assert select(e2, "SELECT * FROM ord") == [[1, "acme", "closed"], [2, "acme", "open"]]
    assert e2.table_digest() == e1.table_digest()
    assert e2.vclock == e1.vclock


@pytest.mark.parametrize("order", ["older first", "newer first"])
def test_rows_a_partial_unique_index_lets_coexist_replicate_in_either_order(
    tmp_path: Path, clock: FakeClock, order: str
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, *ORDERS)
    older = run(e1, "INSERT INTO ord VALUES (1, 'acme', 'open')").records[0]
    newer = run(e2, "INSERT INTO ord VALUES (2, 'acme', 'closed')").records[0]
    schema = wal_records(e1)[:2]
    obs = observe(tmp_path, clock, "obs", schema + ([older, newer] if order == "older first" else [newer, older]))
    exchange(e1, e2)
    for member in (e1, e2, obs):
        assert select(member, "SELECT * FROM ord") == [[1, "acme", "open"], [2, "acme", "closed"]]
        assert member.table_digest() == e1.table_digest()
        assert member.vclock == e1.vclock


def test_rows_a_partial_unique_index_holds_collide_and_the_loser_returns_when_the_winner_leaves_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    e1, e2 = bootstrap(tmp_path, clock, 2, *ORDERS)
    older = run(e1, "INSERT INTO ord VALUES (1, 'acme', 'open')").records[0]
    newer = run(e2, "INSERT INTO ord VALUES (2, 'acme', 'OPEN'), (3, 'acme', 'closed')").records[0]
    exchange(e1, e2)
    # 'OPEN' satisfies the predicate under the column's NOCASE: the newer open order wins
    for member in (e1, e2):
        assert select(member, "SELECT id FROM ord") == [[2], [3]], member.instance_id
    release = run(e2, "UPDATE ord SET status = 'closed' WHERE id = 2").records[0]
    schema = wal_records(e1)[:2]
    obs = observe(tmp_path, clock, "obs", [*schema, newer, release, older])
    exchange(e1, e2)
    for member in (e1, e2, obs):
        assert select(member, "SELECT * FROM ord") == [
            [1, "acme", "open"], [2, "acme", "closed"], [3, "acme", "closed"]]
        assert member.table_digest() == e1.table_digest()


def test_versions_work_after_2039(tmp_path: Path) -> None:
    late = FakeClock(start_ms=2_208_988_800_000)  # 2040-01-01
    e1, e2 = bootstrap(tmp_path, late, 2, KV)
    run(e1, "INSERT INTO kv VALUES (1, 'a')")
    ship(e1, e2)
    assert select(e2, "SELECT * FROM kv") == [[1, "a"]]


# ------------------------------------------------------------------ the convergence property

PK_SCHEMA = (
    "CREATE TABLE kv(id INTEGER PRIMARY KEY, v TEXT, n INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE pair(a TEXT, b INTEGER, v TEXT, PRIMARY KEY (b, a)) WITHOUT ROWID",
)
UNIQUE_SCHEMA = (*PK_SCHEMA, ACCT)

KEYS = st.integers(1, 4)
VALUES = st.sampled_from(["p", "q", "r", "s"])
EMAILS = st.sampled_from(["x@x", "y@y", "z@z"])

_PUT = st.tuples(st.just("put"), KEYS, VALUES)
_PAIR_PUT = st.tuples(st.just("pair_put"), st.sampled_from("ab"), KEYS, VALUES)
_CLAIM = st.tuples(st.just("claim"), KEYS, EMAILS)
_RECLAIM = st.tuples(st.just("reclaim"), KEYS, EMAILS)
PK_OPS = st.one_of(
    _PUT,
    _PUT,
    st.tuples(st.just("insert"), KEYS, VALUES),
    st.tuples(st.just("update"), KEYS, VALUES),
    st.tuples(st.just("update"), KEYS, VALUES),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("delete"), KEYS),
    st.tuples(st.just("move"), KEYS, KEYS),
    st.tuples(st.just("replace"), KEYS, VALUES),
    st.tuples(st.just("bump_all")),
    _PAIR_PUT,
    _PAIR_PUT,
    st.tuples(st.just("pair_delete"), KEYS),
    st.tuples(st.just("pair_move"), st.sampled_from("ab"), st.sampled_from("ab")),
)
UNIQUE_OPS = st.one_of(
    PK_OPS,
    _CLAIM,
    _CLAIM,
    _RECLAIM,
    _RECLAIM,
    st.tuples(st.just("unclaim"), KEYS),
    st.tuples(st.just("drop"), KEYS),
)
# Rows every member holds before the program runs, so that most operations change something.
PK_SEED = ("INSERT INTO kv(id, v) VALUES (1, 's'), (2, 's'), (3, 's')", "INSERT INTO pair VALUES ('a', 1, 's'), ('b', 2, 's')")
UNIQUE_SEED = (*PK_SEED, "INSERT INTO acct VALUES (1, 'x@x', 's'), (2, 'y@y', 's'), (3, NULL, 's')")

SQL = {
    "put": ("INSERT INTO kv(id, v) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET v = excluded.v, n = n + 1", 2),
    "insert": ("INSERT INTO kv(id, v) SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM kv WHERE id = ?1)", 2),
    "update": ("UPDATE kv SET v = ?2, n = n + 1 WHERE id = ?1", 2),
    "delete": ("DELETE FROM kv WHERE id = ?1", 1),
    "move": ("UPDATE kv SET id = ?2 WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM kv WHERE id = ?2)", 2),
    "replace": ("INSERT OR REPLACE INTO kv(id, v) VALUES (?1, ?2)", 2),
    "bump_all": ("UPDATE kv SET n = n + 1", 0),
    "pair_put": ("INSERT OR REPLACE INTO pair(a, b, v) VALUES (?1, ?2, ?3)", 3),
    "pair_delete": ("DELETE FROM pair WHERE b = ?1", 1),
    "pair_move": ("UPDATE OR IGNORE pair SET a = ?2 WHERE a = ?1", 2),
    "claim": ("INSERT OR REPLACE INTO acct(id, email, v) VALUES (?1, ?2, 'c')", 2),
    "reclaim": ("UPDATE OR REPLACE acct SET email = ?2 WHERE id = ?1", 2),
    "unclaim": ("UPDATE acct SET email = NULL WHERE id = ?1", 1),
    "drop": ("DELETE FROM acct WHERE id = ?1", 1),
}


# Engines of the property tests live in memory when the machine offers a tmpfs.
SCRATCH_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def steps(ops: st.SearchStrategy) -> st.SearchStrategy:
    """("txn", origin index, [op, ...]) or ("sync", origin index, from origin index)."""
    return st.lists(
        st.one_of(
            st.tuples(st.just("txn"), st.integers(0, 2), st.lists(ops, min_size=1, max_size=3)),
            st.tuples(st.just("txn"), st.integers(0, 2), st.lists(ops, min_size=1, max_size=3)),
            st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2)),
        ),
        min_size=8,
        max_size=30,
    )


def run_op(engine: Engine, txn, op: tuple) -> None:
    sql, arity = SQL[op[0]]
    engine.execute(txn, sql, op[1 : 1 + arity])


def check_convergence(
    origins_count: int,
    program: list,
    interleavings: list[int],
    schema: tuple[str, ...],
    clocks: list[FakeClock],
) -> None:
    observer_clock = FakeClock()
    with tempfile.TemporaryDirectory(dir=SCRATCH_DIR) as tmp:
        try:
            converge(Path(tmp), origins_count, program, interleavings, schema, clocks, observer_clock)
        finally:
            close_all()


def converge(
    root: Path,
    origins_count: int,
    program: list,
    interleavings: list[int],
    schema: tuple[str, ...],
    clocks: list[FakeClock],
    observer_clock: FakeClock,
) -> None:
    origins = [open_engine(root / f"o{i + 1}", i + 1, clocks[i]) for i in range(origins_count)]
    for sql in schema:
        run(origins[0], sql)
    bootstrap_count = len(schema)
    run(origins[0], *(UNIQUE_SEED if "acct" in " ".join(schema) else PK_SEED), explicit=True)
    for other in origins[1:]:
        ship(origins[0], other)

    for kind, who, arg in program:
        engine = origins[who % origins_count]
        if kind == "sync":
            source = origins[arg % origins_count]
            if source is not engine:
                ship(source, engine)
            continue
        txn = engine.begin(explicit=True)
        for op in arg:
            run_op(engine, txn, op)
        engine.commit(txn)
        engine.flush()

    own = [[r for r in wal_records(e) if r.origin == e.instance_id] for e in origins]
    schema_rows, own[0] = own[0][:bootstrap_count], own[0][bootstrap_count:]
    members = list(origins)
    for n, seed in enumerate(interleavings):
        rng = random.Random(seed)
        queues = [list(rows) for rows in own]
        order = list(schema_rows)
        while any(queues):
            queue = rng.choice([q for q in queues if q])
            order.append(queue.pop(0))
        observer = open_engine(root / f"obs{n}", 31 - n, observer_clock)
        # group commits of random sizes, like an applier's batches
        for i, record in enumerate(order):
            assert observer.apply(record)
            if rng.random() < 0.3 or i == len(order) - 1:
                observer.flush()
        members.append(observer)
    for _ in range(2):
        exchange(*origins)

    # The expected answer is the reference model's, computed from the rows the origins
    # wrote, not any member's: a rule wrong on every member alike must fail here too.
    written = [*schema_rows, *(r for rows in own for r in rows)]
    expected = lww.Model().add_all(written).state()
    expected_vclock = VClock({r.origin: r.lsn for r in written})
    held = {(r.origin, r.lsn, r.txn_id, r.payload) for r in written}
    for member in members:
        assert member.vclock == expected_vclock
        wrong = lww.differences(expected, lww.engine_state(member))
        assert not wrong, (member.instance_id, wrong)
        # every member stores every row byte-for-byte as its origin wrote it
        assert {(r.origin, r.lsn, r.txn_id, r.payload) for r in wal_records(member)} == held
    # and nothing more is applied a second time
    before = members[-1].table_digest()
    assert not any(members[-1].apply(r) for r in written)
    members[-1].flush()
    assert members[-1].table_digest() == before


def shared_clocks() -> list[FakeClock]:
    shared = FakeClock(step_ms=1)
    return [shared, shared, shared]


PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@PROPERTY_SETTINGS
@given(
    origins_count=st.integers(2, 3),
    program=steps(PK_OPS),
    interleavings=st.lists(st.integers(0, 2**32), min_size=2, max_size=2),
)
def test_members_holding_the_same_rows_hold_the_same_tables(
    origins_count: int, program: list, interleavings: list[int]
) -> None:
    check_convergence(origins_count, program, interleavings, PK_SCHEMA, shared_clocks())


@PROPERTY_SETTINGS
@given(
    origins_count=st.integers(2, 3),
    program=steps(UNIQUE_OPS),
    interleavings=st.lists(st.integers(0, 2**32), min_size=2, max_size=2),
)
@example(
    origins_count=2,
    program=[
        ("txn", 0, [("claim", 1, "x@x")]),
        ("txn", 1, [("claim", 2, "x@x")]),
        ("txn", 1, [("drop", 2)]),
    ],
    interleavings=[0, 1],
)
def test_members_converge_with_unique_collisions(origins_count: int, program: list, interleavings: list[int]) -> None:
    check_convergence(origins_count, program, interleavings, UNIQUE_SCHEMA, shared_clocks())


@PROPERTY_SETTINGS
@given(
    origins_count=st.integers(2, 3),
    program=steps(PK_OPS),
    interleavings=st.lists(st.integers(0, 2**32), min_size=2, max_size=2),
    skew=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1)), min_size=3, max_size=3),
)
@example(
    origins_count=2,
    program=[("txn", 1, [("put", 1, "p")]), ("sync", 0, 1), ("txn", 0, [("put", 1, "q")])],
    interleavings=[0, 1],
    skew=[(0, 0), (0, 0), (0, 0)],
)
def test_members_converge_with_clocks_that_stand_still_or_lag(
    origins_count: int, program: list, interleavings: list[int], skew: list[tuple[int, int]]
) -> None:
    clocks = [FakeClock(start_ms=START_MS + offset, step_ms=step) for offset, step in skew]
    check_convergence(origins_count, program, interleavings, PK_SCHEMA, clocks)
