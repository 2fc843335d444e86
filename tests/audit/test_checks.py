"""Generated WAL sets: clean ones pass (also with a GC horizon), each injected violation is
found and named with its rows; errors that stop the audit are exit code 2 with one line."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from replicaset.audit import (
    EXIT_CLEAN,
    EXIT_ERROR,
    EXIT_VIOLATIONS,
    AuditRunError,
    MemberInput,
    run_audit,
)
from replicaset.audit import run as audit_run
from wal import Wal

from tests.audit.conftest import ROOT, SPARK_TIMEOUT, generate, member_dirs

pytestmark = SPARK_TIMEOUT

BAD_MASTER_TIMEOUT_S = 120


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
    manifest = generate(tmp_path / "set", "--inject", "duplicate,gap,swap,diverge,behind,head")
    injected = {i["kind"]: i for i in manifest["injected"]}
    code, report, text = _audit(spark, member_dirs(manifest), json_out=tmp_path / "a.json",
                                html_out=tmp_path / "a.html")
    assert code == EXIT_VIOLATIONS, text
    assert json.loads((tmp_path / "a.json").read_text())["checks"] == report["checks"]
    page = (tmp_path / "a.html").read_text()
    # The map of where they sit comes first, then the lists; the other plots stay.
    assert page.index("Where the violations are") < page.index("<h3 class='bad'>")
    assert page.count("data:image/png;base64,") == 4

    dup = _check(report, "apply_once")
    d = injected["duplicate"]
    assert [(v["member"], v["origin"], v["lsn"]) for v in dup["violations"]] == [(d["member"], d["origin"], d["lsn"])]
    assert len(dup["violations"][0]["rows"]) == 2

    order = _check(report, "order")
    named = {(v["kind"], v["member"], v["origin"], v["lsn"]): v for v in order["violations"]}
    g, s, h = injected["gap"], injected["swap"], injected["head"]
    late_start = ("gap", h["member"], h["origin"], h["lsn"])
    assert set(named) == {("gap", g["member"], g["origin"], g["lsn"]),
                          ("out_of_order", s["member"], s["origin"], s["after_lsn"]), late_start}, order
    assert all(len(v["rows"]) == 2 for k, v in named.items() if k != late_start)
    # A start above the horizon names the missing range and the first row that is there.
    head_end = h["lsn"] + h["missing"] - 1
    assert named[late_start]["missing"] == [h["lsn"], head_end]
    [first_present] = named[late_start]["rows"]
    assert first_present["member"] == h["member"] and first_present["segment"]
    shown = f"missing {h['origin']}:{h['lsn']}..{h['origin']}:{head_end} ({h['missing']} rows)"
    assert shown in text and shown in page

    agree = _check(report, "agreement")
    dv = injected["diverge"]
    assert [(v["origin"], v["lsn"]) for v in agree["violations"]] == [(dv["origin"], dv["lsn"])]
    assert {r["member"] for r in agree["violations"][0]["rows"]} == {"m1", "m2", "m3"}

    behind = _check(report, "completeness")
    b = injected["behind"]
    assert [(v["member"], v["origin"], v["behind"]) for v in behind["violations"]] == [
        (b["member"], b["origin"], b["missing"])]
    # The missing tail is named as a range, after the member's last row of that origin.
    [v] = behind["violations"]
    behind_end = b["lsn"] + b["missing"] - 1
    assert v["missing"] == [b["lsn"], behind_end]
    [last_present] = v["rows"]
    assert last_present["member"] == b["member"] and last_present["segment"]
    shown = f"missing {b['origin']}:{b['lsn']}..{b['origin']}:{behind_end} ({b['missing']} rows)"
    assert shown in text and shown in page
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


def test_bad_master_is_exit_2_with_one_line(tmp_path: Path) -> None:
    """Through the CLI, in a process of its own: in the test process the shared session would
    be reused and the master ignored. Spark's launcher rejects the URL within seconds; the
    timeout only bounds a hang."""
    Wal.open(tmp_path / "wal").close()
    done = subprocess.run(
        [sys.executable, "-m", "replicaset.cli", "audit", "--master", "bogus://x", str(tmp_path / "wal")],
        capture_output=True, text=True, cwd=ROOT, timeout=BAD_MASTER_TIMEOUT_S,
    )
    assert done.returncode == EXIT_ERROR, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("replicaset audit: cannot start Spark with master bogus://x: "), done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(("text", "line"), [
    ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
     "  File \"source.py\", line 9, in read\n    open(path)\nFileNotFoundError: [Errno 2] no such file",
     "FileNotFoundError: [Errno 2] no such file"),
    ("An error occurred while calling None.org.apache.spark.api.java.JavaSparkContext.\n"
     ": org.apache.spark.SparkException: Could not parse Master URL: 'local[x]'\n\tat org.apache.spark.X(X.scala:1)",
     "org.apache.spark.SparkException: Could not parse Master URL: 'local[x]'"),
    ("An error occurred while calling o9.collect.\n: org.apache.spark.SparkException: Job aborted: "
     "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
     "  File \"replay.py\", line 3, in replay_member\n    spec['x']\nKeyError: 'x'\n\n\tat org.apache.spark.X(X.scala:1)",
     "KeyError: 'x'"),
])
def test_spark_error_is_told_in_its_one_telling_line(text: str, line: str) -> None:
    assert audit_run._one_line(Exception(text)) == line


def test_failed_read_job_is_a_run_error(spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executors do not see a DIR the driver saw (as on a cluster without the same paths):
    the Spark job fails, and that is an error with one line, not a failed check."""
    manifest = generate(tmp_path / "set", rows=300)
    dirs = member_dirs(manifest)
    seen_by_driver = audit_run.discover

    def discover_then_lose(directories: list[Path]) -> list[MemberInput]:
        members = seen_by_driver(directories)
        shutil.rmtree(dirs[0])
        return members

    monkeypatch.setattr(audit_run, "discover", discover_then_lose)
    with pytest.raises(AuditRunError) as raised:
        _audit(spark, dirs)
    message = str(raised.value)
    assert "\n" not in message
    assert message.endswith(f"AuditInputError: {dirs[0].resolve()} is not a directory"), message


def test_driver_memory_reaches_the_session_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --driver-memory the audit's JVM gets 896m (10M rows fit, under 2 GiB in all);
    with it, what the operator asked."""
    from replicaset.audit import session

    asked: list[str] = []

    def refuse(master: str | None = None, *, driver_memory: str, conf: object = None) -> object:
        asked.append(driver_memory)
        raise OSError("no Spark in this test")

    monkeypatch.setattr(session, "open_session", refuse)
    manifest = generate(tmp_path / "set", rows=30)
    dirs = [str(d) for d in member_dirs(manifest)]
    assert audit_run.main([*dirs, "--no-progress"]) == EXIT_ERROR
    assert audit_run.main([*dirs, "--no-progress", "--driver-memory", "3g"]) == EXIT_ERROR
    assert asked == ["896m", "3g"]
