"""A real three-member run (bootstrap, two joins, writes on all, virtual tables, a table
without a declared key and one with a VIRTUAL generated column renamed and cut while written
among them)
passes every check; a member whose final table or full-text index is changed behind the
engine's back fails convergence, one whose db.sqlite
cannot be read is a read error; a torn tail is a warning
for every check, convergence included; the replay of a joined member passes over a donor WAL
it cannot read or that does not reach back far enough."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from replicaset.audit import EXIT_CLEAN, EXIT_ERROR, EXIT_VIOLATIONS, run_audit
from tests.server.conftest import ReplicaSet
from wal.segment import list_segments, scan_segment
from tests.audit.conftest import SPARK_TIMEOUT

pytestmark = SPARK_TIMEOUT

WRITES_PER_MEMBER = 40
VIRTUAL_SCHEMA = (
    "CREATE TABLE docs(id INTEGER PRIMARY KEY, body TEXT)",
    "CREATE VIRTUAL TABLE docs_fts USING fts5(body, content='docs', content_rowid='id')",
    "CREATE TRIGGER docs_ai AFTER INSERT ON docs BEGIN INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE TRIGGER docs_au AFTER UPDATE ON docs BEGIN"
    " INSERT INTO docs_fts(docs_fts, rowid, body) VALUES ('delete', old.id, old.body);"
    " INSERT INTO docs_fts(rowid, body) VALUES (new.id, new.body); END",
    "CREATE VIRTUAL TABLE notes USING fts5(body)",
    "CREATE VIRTUAL TABLE geo USING rtree(id, minx, maxx, miny, maxy)",
    "CREATE TABLE log(who TEXT, what TEXT)",  # no declared key: keyed by its rowid
    "CREATE TABLE person(id INTEGER PRIMARY KEY, first TEXT, last TEXT, loud TEXT AS (upper(last)))",
)
# Renamed and dropped while the members write (docs/decisions.md, "Renames and dropped
# columns follow the schema id"): replay must carry the older rows the same way.
MIGRATIONS = ("ALTER TABLE person RENAME COLUMN last TO surname", "ALTER TABLE person RENAME TO people",
              "ALTER TABLE people DROP COLUMN first")


# Member i's person writes, one at j = 0, 13, 26 and 39, under the schema of that moment:
# member 1 writes before any migration, member 2 after the first two, member 3 after all.
PERSON_WRITES = (
    [("INSERT INTO person(first, last) VALUES (?, ?)", [f"a{n}", f"b{n}"]) for n in range(4)],
    [("INSERT INTO people(first, surname) VALUES (?, ?)", [f"c{n}", f"d{n}"]) for n in range(4)],
    [("INSERT INTO people(surname) VALUES (?)", [f"e{n}"]) for n in range(4)],
)


@pytest.fixture
def stopped_set(tmp_path: Path) -> Iterator[list[Path]]:
    rs = ReplicaSet(tmp_path)
    try:
        first = rs.bootstrap()
        with first.client() as client:
            client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER DEFAULT 0)")
            for ddl in VIRTUAL_SCHEMA:  # convergence covers virtual tables and their indexes too
                client.execute(ddl)
        second = rs.join(first)
        rs.join(second)
        rs.wait_converged()
        for i, member in enumerate(rs.members):
            with member.client() as client:
                for j in range(WRITES_PER_MEMBER):
                    key = 1000 * (i + 1) + j
                    client.execute("INSERT INTO kv(k, v) VALUES (?, ?)", [key, f"m{i + 1}"])
                    if j % 4 == 0:
                        client.execute("UPDATE kv SET n = n + 1 WHERE k = ?", [1000 + j])
                    if j % 7 == 0:
                        client.execute("DELETE FROM kv WHERE k = ?", [key])
                    if j % 3 == 0:
                        client.execute("INSERT INTO log VALUES (?, ?)", [f"m{i + 1}", f"entry {j}"])
                        client.execute("UPDATE log SET what = what || ' seen' WHERE rowid = (SELECT min(rowid) FROM log)")
                    if j % 9 == 0:
                        client.execute("DELETE FROM log WHERE rowid = (SELECT max(rowid) FROM log)")
                    if j % 13 == 0:
                        client.execute(*PERSON_WRITES[i][j // 13])
                    if j % 10 == 0:
                        client.execute("INSERT INTO docs(body) VALUES (?)", [f"words of m{i + 1} number {j}"])
                        client.execute("INSERT INTO notes(rowid, body) VALUES (?, ?)", [key, f"note {j} of m{i + 1}"])
                        client.execute("INSERT INTO geo VALUES (?, ?, ?, 0, 1)", [key, j, j + 1])
                client.execute("UPDATE docs SET body = body || ' edited' WHERE id = (SELECT min(id) FROM docs)")
                for migration in {0: MIGRATIONS[:2], 1: MIGRATIONS[2:]}.get(i, ()):
                    client.execute(migration)
            rs.wait_converged()  # the next member writes under the schema these left
        rs.wait_converged()
        for member in rs.members:
            assert member.stop() == 0
        yield [m.data_dir for m in rs.members]
    finally:
        rs.stop_all()


def test_real_set_passes_then_a_changed_table_is_found(spark, stopped_set: list[Path]) -> None:
    out = io.StringIO()
    code, report = run_audit(stopped_set, spark=spark, stream=out, progress=False)
    assert code == EXIT_CLEAN, out.getvalue()
    assert [i["kind"] for i in report["inputs"]] == ["member"] * 3
    convergence = next(c for c in report["checks"] if c["name"] == "convergence")
    assert convergence["ok"] and not convergence["skipped"]
    assert all(r["ok"] and r["rows_applied"] > 0 for r in report["replays"])
    assert {r["origin"] for r in report["rows_per_member_origin"]} >= {1, 2, 3}
    replays = {r["member"]: r for r in report["replays"]}
    assert Path(replays["m3"]["base"]).parent == stopped_set[2] / "snap", "a joiner replays from its join's checkpoint"
    assert "donors_passed_over" not in replays["m3"]

    conn = apsw.Connection(str(stopped_set[1] / "db.sqlite"))
    conn.execute("UPDATE kv SET v = 'changed' WHERE k = (SELECT min(k) FROM kv)")
    conn.execute("UPDATE log SET rowid = rowid + 1 WHERE rowid = (SELECT max(rowid) FROM log)")
    conn.close()
    conn = apsw.Connection(str(stopped_set[2] / "db.sqlite"))  # an index entry its rows do not hold
    conn.execute("INSERT INTO docs_fts(rowid, body) VALUES ((SELECT min(id) FROM docs), 'stray')")
    conn.close()
    out = io.StringIO()
    code, report = run_audit(stopped_set, spark=spark, stream=out, progress=False)
    assert code == EXIT_VIOLATIONS, out.getvalue()
    convergence = next(c for c in report["checks"] if c["name"] == "convergence")
    names = {(v["member"], tuple(v["tables"])) for v in convergence["violations"]}
    assert ("m2", ("kv", "log")) in names
    assert ("m3", ("docs_fts",)) in names
    assert all(c["ok"] for c in report["checks"] if c["name"] != "convergence")


def _last_record_bytes(segment: Path) -> bytes:
    data = segment.read_bytes()
    return data[scan_segment(segment).records[-1][0] :]


def forget_join_checkpoints(*members: Path) -> None:
    """As once `checkpoint_count` newer checkpoints replaced a joiner's join checkpoint: its
    WAL starts above every checkpoint it keeps, and its replay needs another member's rows."""
    for member in members:
        for snap in (member / "snap").glob("*.snap"):
            snap.unlink()


def test_torn_tail_is_a_warning_and_convergence_passes(spark, stopped_set: list[Path]) -> None:
    """m1 crashed mid-write: half a record after its last one. Recovery cuts it; so does the
    replay of m1, and of m3, whose rows from before its join come from m1's WAL."""
    forget_join_checkpoints(*stopped_set[1:])
    last = list_segments(stopped_set[0] / "wal")[-1]
    record = _last_record_bytes(last)
    with open(last, "ab") as f:
        f.write(record[: len(record) // 2])
    out = io.StringIO()
    code, report = run_audit(stopped_set, spark=spark, stream=out, progress=False)
    assert code == EXIT_CLEAN, out.getvalue()
    assert [(w["member"], w["segment"], w["type"]) for w in report["warnings"]] == [("m1", last.name, "TORN")]
    assert not report["read_errors"]
    convergence = next(c for c in report["checks"] if c["name"] == "convergence")
    assert convergence["ok"] and not convergence["skipped"], convergence
    replays = {r["member"]: r for r in report["replays"]}
    assert all(r["ok"] for r in replays.values())
    assert replays["m3"]["donors_passed_over"] == []  # m1's WAL, torn tail and all, was the donor
    assert "warning m1:" in out.getvalue()


def test_replay_passes_over_donors_it_cannot_use(spark, stopped_set: list[Path], tmp_path: Path) -> None:
    """Donors are tried in input order: a damaged copy of m1's WAL (a read error of its own),
    then m2, whose WAL starts at its join and lacks the first rows, then m1."""
    damaged = tmp_path / "damaged" / "wal"
    shutil.copytree(stopped_set[0] / "wal", damaged)
    segment = list_segments(damaged)[0]
    offset = scan_segment(segment).records[2][0]
    data = bytearray(segment.read_bytes())
    data[offset + 40] ^= 0xFF
    segment.write_bytes(bytes(data))
    m1, m2, m3 = stopped_set
    forget_join_checkpoints(m2, m3)
    out = io.StringIO()
    code, report = run_audit([damaged, m2, m1, m3], spark=spark, stream=out, progress=False)
    assert code == EXIT_ERROR, out.getvalue()  # the damaged copy is a read error
    assert [(e["member"], e["type"]) for e in report["read_errors"]] == [("damaged", "CORRUPT")]
    replays = {r["member"]: r for r in report["replays"]}
    assert set(replays) == {"m1", "m2", "m3"}
    assert all(r["ok"] for r in replays.values()), replays
    passed_over = replays["m3"]["donors_passed_over"]
    assert [reason.split(":")[0] for reason in passed_over] == [str(damaged.resolve()), str(m2.resolve() / "wal")]
    assert "corrupt" in passed_over[0] and "does not hold every row" in passed_over[1]


def test_unreadable_db_is_a_read_error(spark, stopped_set: list[Path]) -> None:
    """No verdict on m2's tables is possible: exit code 2, not 1 (which says a check failed)."""
    (stopped_set[1] / "db.sqlite").write_bytes(b"not a database" * 100)
    out = io.StringIO()
    code, report = run_audit(stopped_set, spark=spark, stream=out, progress=False)
    assert code == EXIT_ERROR, out.getvalue()
    [error] = report["read_errors"]
    assert error["member"] == "m2" and "cannot read db.sqlite" in error["error"]
    assert "READ ERROR m2" in out.getvalue()
