"""Generated WAL sets: clean ones pass (also with a GC horizon), each injected violation is
found and named with its rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

from replicaset.audit import EXIT_CLEAN, EXIT_ERROR, EXIT_VIOLATIONS, run_audit

from tests.audit.conftest import generate, member_dirs


def _audit(spark, dirs, **kwargs):  # type: ignore[no-untyped-def]
    out = io.StringIO()
    code, report = run_audit(dirs, spark=spark, stream=out, progress=False, **kwargs)
    return code, report, out.getvalue()


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


def test_clean_set_with_gc_horizon_passes_and_writes_reports(spark, tmp_path: Path) -> None:
    manifest = generate(tmp_path / "set", "--gc-segments", "2")
    assert manifest["gc"]["segments_removed"] == 2
    code, report, text = _audit(spark, member_dirs(manifest), json_out=tmp_path / "a.json",
                                html_out=tmp_path / "a.html")
    assert code == EXIT_CLEAN, text
    m3 = next(i for i in report["inputs"] if i["member"] == "m3")
    assert m3["wal_start_vclock"] and m3["horizon"] == m3["wal_start_vclock"]
    assert all(c["ok"] for c in report["checks"])
    assert _check(report, "convergence")["skipped"]
    assert report["rows_total"] == sum(r["rows"] for r in report["rows_per_member_origin"])
    assert json.loads((tmp_path / "a.json").read_text())["exit_code"] == 0
    page = (tmp_path / "a.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    assert "result: clean (exit 0)" in text


def test_each_injected_violation_is_named(spark, tmp_path: Path) -> None:
    manifest = generate(tmp_path / "set", "--inject", "duplicate,gap,swap,diverge,behind")
    injected = {i["kind"]: i for i in manifest["injected"]}
    code, report, text = _audit(spark, member_dirs(manifest))
    assert code == EXIT_VIOLATIONS, text

    dup = _check(report, "apply_once")
    d = injected["duplicate"]
    assert [(v["member"], v["origin"], v["lsn"]) for v in dup["violations"]] == [(d["member"], d["origin"], d["lsn"])]
    assert len(dup["violations"][0]["rows"]) == 2

    order = _check(report, "order")
    named = {(v["kind"], v["member"], v["origin"], v["lsn"]) for v in order["violations"]}
    g, s = injected["gap"], injected["swap"]
    assert named == {("gap", g["member"], g["origin"], g["lsn"]),
                     ("out_of_order", s["member"], s["origin"], s["after_lsn"])}, order
    assert all(len(v["rows"]) == 2 for v in order["violations"])

    agree = _check(report, "agreement")
    dv = injected["diverge"]
    assert [(v["origin"], v["lsn"]) for v in agree["violations"]] == [(dv["origin"], dv["lsn"])]
    assert {r["member"] for r in agree["violations"][0]["rows"]} == {"m1", "m2", "m3"}

    behind = _check(report, "completeness")
    b = injected["behind"]
    assert [(v["member"], v["origin"], v["behind"]) for v in behind["violations"]] == [
        (b["member"], b["origin"], b["missing"])]
    assert "FAILED" in text


def test_corrupt_record_is_a_read_error(spark, tmp_path: Path) -> None:
    manifest = generate(tmp_path / "set", "--inject", "corrupt", rows=3000)
    c = manifest["injected"][0]
    code, report, text = _audit(spark, member_dirs(manifest))
    assert code == EXIT_ERROR, text
    [error] = report["read_errors"]
    assert (error["member"], error["type"], error["offset"]) == (c["member"], "CORRUPT", c["offset"])
    assert "READ ERROR" in text


def test_not_a_wal_directory_is_a_usage_error(tmp_path: Path) -> None:
    from replicaset.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["audit", str(tmp_path / "empty")]) == EXIT_ERROR
