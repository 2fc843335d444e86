"""Tombstone purge in the storage (`replicaset.storage.tombstones`, Engine.purge_tombstones):
exactly the tombstones under the bound go, the clock never goes below what went, members
that hold the same rows still compare equal, and with the core's rule a late row older
than a purged delete stays deleted (docs/design/tombstone-purge.md)."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from replicaset.core.purge import PurgeUnder, TombstonePurge
from replicaset.storage import BatchKindError, Engine
from replicaset.storage.recovery import hlc_seed
from replicaset.storage.schema import create_internal
from replicaset.storage.tombstones import purged_hlc, tombstone_count
from tests.storage.enginekit import FakeClock, apply_all, close_all, open_engine, run, select, ship, wal_records
from wal import Record

KV = "CREATE TABLE kv(id INTEGER PRIMARY KEY, v TEXT)"


@pytest.fixture(autouse=True)
def _close() -> None:
    yield
    close_all()


def pair(root: Path) -> tuple[Engine, Engine]:
    clock = FakeClock()
    one, two = open_engine(root / "e1", 1, clock), open_engine(root / "e2", 2, clock)
    run(one, KV)
    ship(one, two)
    return one, two


def stored(engine: Engine) -> list[tuple[str, int, int, int]]:
    return [tuple(r) for r in engine.connections.reader.execute(
        "SELECT key, origin, lsn, deleted FROM _rs_version WHERE tbl = 'kv' ORDER BY key")]


def test_versions_keep_the_row_that_wrote_them(tmp_path: Path) -> None:
    one, two = pair(tmp_path)
    first = run(one, "INSERT INTO kv VALUES (1, 'a')")
    run(one, "INSERT INTO kv VALUES (2, 'b')", "DELETE FROM kv WHERE id = 1")
    assert first is not None
    lsn_of_second = one.vclock.get(1)
    assert stored(one) == [("kv:1", 1, lsn_of_second, 1), ("kv:2", 1, lsn_of_second, 0)]
    ship(one, two)
    assert stored(two) == stored(one), "an applied row stores the LSN its origin gave it"


def test_a_purge_takes_exactly_the_tombstones_under_the_bound(tmp_path: Path) -> None:
    one, _ = pair(tmp_path)
    for i in range(1, 5):
        run(one, ("INSERT INTO kv VALUES (?, 'x')", (i,)))
    run(one, "DELETE FROM kv WHERE id = 1")
    cut = one.vclock.get(1)
    run(one, "DELETE FROM kv WHERE id = 2")
    run(one, "UPDATE kv SET v = 'y' WHERE id = 3")
    assert tombstone_count(one.connections.reader) == 2
    before = one.table_digest()
    done = one.purge_tombstones({1: cut})
    assert done.tombstones == 1
    assert [k for k, _, _, deleted in stored(one) if deleted] == ["kv:2"], "the later delete stays"
    assert [k for k, _, _, deleted in stored(one) if not deleted] == ["kv:3", "kv:4"], "live versions stay"
    assert one.table_digest() == before, "a tombstone and no version compare alike"
    assert one.purge_tombstones({1: cut}).tombstones == 0
    assert one.purge_tombstones({2: 10**6}).tombstones == 0, "another origin's bound takes none of 1's"


def test_the_clock_seed_stays_above_what_was_purged(tmp_path: Path) -> None:
    one, _ = pair(tmp_path)
    run(one, "INSERT INTO kv VALUES (1, 'a')")
    deleted = run(one, "DELETE FROM kv WHERE id = 1")
    assert deleted is not None
    one.purge_tombstones(dict(one.vclock.items()))
    writer = one.connections.writer
    assert purged_hlc(writer) == deleted.txn_id, "the delete's stamp is kept"

    class EmptyLog:  # a log WAL GC emptied of the rows that held those stamps
        max_txn_id = 0

    assert hlc_seed(EmptyLog(), writer) >= deleted.txn_id  # type: ignore[arg-type]


def test_no_purge_while_a_batch_is_open(tmp_path: Path) -> None:
    one, _ = pair(tmp_path)
    txn = one.begin()
    one.execute(txn, "INSERT INTO kv VALUES (1, 'a')")
    one.commit(txn)
    with pytest.raises(BatchKindError):
        one.purge_tombstones({1: 100})
    one.flush()


def test_a_database_made_before_versions_kept_their_lsn_is_upgraded(tmp_path: Path) -> None:
    conn = apsw.Connection(str(tmp_path / "old.sqlite"))
    conn.execute("CREATE TABLE _rs_vclock(origin INTEGER PRIMARY KEY, lsn INTEGER NOT NULL)")
    conn.execute("CREATE TABLE _rs_version(tbl TEXT NOT NULL, key TEXT NOT NULL, hlc INTEGER NOT NULL,"
                 " origin INTEGER NOT NULL, deleted INTEGER NOT NULL, PRIMARY KEY (tbl, key)) WITHOUT ROWID")
    conn.execute("INSERT INTO _rs_vclock VALUES (1, 7), (2, 3)")
    conn.execute("INSERT INTO _rs_version VALUES ('kv', 'kv:1', 5, 1, 1), ('kv', 'kv:2', 6, 2, 0),"
                 " ('kv', 'kv:3', 7, 4, 1)")
    create_internal(conn)
    rows = conn.execute("SELECT key, lsn FROM _rs_version ORDER BY key").fetchall()
    assert rows == [("kv:1", 7), ("kv:2", 3), ("kv:3", 0)], "its origin's LSN: an upper bound, purged later"
    create_internal(conn)  # idempotent
    conn.close()


def test_a_prepare_sees_a_purged_tombstone_as_no_version(tmp_path: Path) -> None:
    """What a PREPARE compares while members purge at different times: the coordinator that
    still holds the tombstone reads its version, the participant that purged it has none,
    and the participant answers CONFLICT until both purged (docs/design/tombstone-purge.md)."""
    one, two = pair(tmp_path)
    run(one, "INSERT INTO kv VALUES (1, 'a')")
    run(one, "DELETE FROM kv WHERE id = 1")
    ship(one, two)
    one.purge_tombstones(dict(one.vclock.items()))
    txn = two.begin(quorum=True)
    two.execute(txn, "INSERT INTO kv VALUES (1, 'c')")
    read = two.capture(txn).reads[("kv", "kv:1")]
    assert read is not None and read == two.stored_versions([("kv", "kv:1")])[("kv", "kv:1")]
    assert one.stored_versions([("kv", "kv:1")]) == {}, "purged: the participant's answer differs"
    two.flush()
    two.purge_tombstones(dict(two.vclock.items()))
    txn = two.begin(quorum=True)
    two.execute(txn, "INSERT INTO kv VALUES (1, 'c')")
    assert two.capture(txn).reads == {("kv", "kv:1"): None}, "both purged: both say no version"


# ------------------------------------------------------------------ the counter-example, for real
#
# Member 1 inserts k and updates it (U); member 2 applies the insert only, then deletes k
# (T, newer than U). Member 1 applies T: both hold the tombstone, and U is still on its way
# to member 2.


def late_row_setup(root: Path) -> tuple[Engine, Engine, Record]:
    one, two = pair(root)
    run(one, "INSERT INTO kv VALUES (1, 'a')")
    ship(one, two)
    run(one, "UPDATE kv SET v = 'late' WHERE id = 1")
    late = wal_records(one)[-1]
    run(two, "DELETE FROM kv WHERE id = 1")
    apply_all(one, [r for r in wal_records(two) if r.origin == 2])
    assert select(one, "SELECT * FROM kv") == [] and select(two, "SELECT * FROM kv") == []
    return one, two, late


def test_purging_by_what_every_member_holds_brings_the_row_back(tmp_path: Path) -> None:
    """What the rule prevents: the storage really resurrects the row without it."""
    one, two, late = late_row_setup(tmp_path)
    everyone = {o: min(one.vclock.get(o), two.vclock.get(o)) for o in (1, 2)}
    assert two.purge_tombstones(everyone).tombstones == 1
    apply_all(two, [late])
    assert select(two, "SELECT * FROM kv") == [[1, "late"]], "the deleted row is back on member 2 only"


def test_the_rule_waits_for_the_late_row_and_the_delete_stays(tmp_path: Path) -> None:
    one, two, late = late_row_setup(tmp_path)
    core = TombstonePurge(settle_s=0.0)

    def pass_on_two(now_s: float) -> int:
        acks = {1: dict(one.vclock.items()), 2: dict(two.vclock.items())}
        gone = 0
        for action in core.passed(now_s, 2, {m: {o: n for o, n in v.items() if o} for m, v in acks.items()}):
            if isinstance(action, PurgeUnder):
                gone += two.purge_tombstones(action.bound).tombstones
        return gone

    assert sum(pass_on_two(float(t)) for t in range(5)) == 0, "member 2 lacks U, which may be older than T"
    apply_all(two, [late])
    assert select(two, "SELECT * FROM kv") == [], "U loses to the tombstone"
    assert sum(pass_on_two(float(t)) for t in range(5, 10)) == 1
    apply_all(two, [late])  # a copy still in flight: apply-once drops it
    assert select(two, "SELECT * FROM kv") == [] and tombstone_count(two.connections.reader) == 0
    assert one.table_digest() == two.table_digest()
