"""A real three-member run (bootstrap, two joins, writes on all) passes every check; a member
whose final table is changed behind the engine's back fails convergence."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from replicaset.audit import EXIT_CLEAN, EXIT_VIOLATIONS, run_audit
from tests.server.conftest import ReplicaSet

WRITES_PER_MEMBER = 40


@pytest.fixture
def stopped_set(tmp_path: Path) -> Iterator[list[Path]]:
    rs = ReplicaSet(tmp_path)
    try:
        first = rs.bootstrap()
        with first.client() as client:
            client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT, n INTEGER DEFAULT 0)")
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

    conn = apsw.Connection(str(stopped_set[1] / "db.sqlite"))
    conn.execute("UPDATE kv SET v = 'changed' WHERE k = (SELECT min(k) FROM kv)")
    conn.close()
    out = io.StringIO()
    code, report = run_audit(stopped_set, spark=spark, stream=out, progress=False)
    assert code == EXIT_VIOLATIONS, out.getvalue()
    convergence = next(c for c in report["checks"] if c["name"] == "convergence")
    names = {(v["member"], tuple(v["tables"])) for v in convergence["violations"]}
    assert ("m2", ("kv",)) in names
    assert all(c["ok"] for c in report["checks"] if c["name"] != "convergence")
