"""`replicaset audit DIR... [--master URL] [--json OUT] [--html OUT]`: the whole audit job.

Reading: every segment of every DIR through the `rswal` data source (one Spark task per segment,
progress on stderr), kept once (persisted) for the checks. Checks 1-4 run for every DIR, check 5
for data directories with `db.sqlite`. Exit code: 0 clean, 1 a check failed, 2 usage or read
errors (a DIR that is not one, damaged records or segment headers, Spark that does not start, a
Spark job or an OS call that fails). 1 says only that a check failed, so the Spark and OS errors
that stop the audit end in one line on stderr and exit code 2, not in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from replicaset.audit import checks
from replicaset.audit.inputs import AuditInputError, MemberInput, discover
from replicaset.audit.columns import CAPTURED_COLUMNS, COLUMNS, schema_ddl

EXIT_CLEAN = 0
EXIT_VIOLATIONS = 1
EXIT_ERROR = 2
READ_ERRORS_LISTED_MAX = 200
CHECKED_COLUMNS = [c for c in COLUMNS if c not in CAPTURED_COLUMNS]
"""What the checks read: every column but the captured rows' lists."""


class AuditRunError(Exception):
    """Spark did not start, or a Spark job failed while reading or checking: no check could give
    a verdict, so this is exit code 2, never 1."""


def _spark_errors() -> tuple[type[Exception], ...]:
    """What a failed Spark start or job raises: pyspark's errors (a Python worker's exception
    comes back as one) and py4j's (a JVM exception, a lost gateway). Imported late: pyspark is
    loaded only when an audit runs."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def _one_line(exc: BaseException) -> str:
    """The line of a Spark error that says what went wrong.

    Spark wraps the cause in tracebacks: a Python worker's (the exception is the first line at
    column 0 after the last `Traceback (most recent call last):`) or, through py4j, a JVM stack
    trace (the Java exception is the line that py4j starts with ": ").
    """
    lines = str(exc).splitlines()
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last):" in line]
    after_traceback = lines[starts[-1] + 1 :] if starts else []
    raised = [line for line in after_traceback if line.strip() and not line[0].isspace()]
    java = [line[2:] for line in lines if line.startswith(": ")]
    plain = [line for line in lines if line.strip()]
    return (raised or java or plain or [type(exc).__name__])[0].strip()


def load_records(spark: Any, members: list[MemberInput], columns: list[str] = CHECKED_COLUMNS) -> Any:
    """The data source's DataFrame for these members (one row per WAL row), of these columns."""
    paths = [str(m.directory) for m in members]
    return (spark.read.format("rswal").schema(schema_ddl(columns))
            .option("paths", json.dumps(paths)).load())


def _replay_specs(members: list[MemberInput], ends: dict[str, dict[int, int]]) -> list[dict[str, Any]]:
    specs = []
    for m in members:
        if m.kind != "member" or m.db_path is None:
            continue
        specs.append({
            "member": m.name, "instance_id": m.instance_id, "db_path": str(m.db_path),
            "wal_dir": str(m.wal_dir), "wal_start": m.wal_start, "wal_end": ends.get(m.name, {}),
            "checkpoints": [(str(c.path), c.vclock) for c in m.checkpoints],
            "local_tables": list(m.local_tables),
            "donors": [str(o.wal_dir) for o in members if o is not m],
        })
    return specs


def check_convergence(spark: Any, members: list[MemberInput], ends: dict[str, dict[int, int]]) -> tuple[checks.CheckResult, list[dict[str, Any]]]:
    from replicaset.audit.replay import replay_member

    result = checks.CheckResult(
        name="convergence",
        title="5. convergence: checkpoint + merged rows replayed with Engine.apply give db.sqlite")
    specs = _replay_specs(members, ends)
    if not specs:
        result.skipped = "no data directory with db.sqlite among the inputs"
        return result, []
    outcomes = spark.sparkContext.parallelize(specs, len(specs)).map(replay_member).collect()
    for o in outcomes:
        if not o["ok"]:
            result.add({"member": o["member"], "origin": None, "lsn": None, "detail": o["detail"],
                        "tables": o.get("tables", []), "rows": o.get("rows", [])})
    # Members at one vclock hold one set of tables (docs/design/README.md §4.2).
    by_vclock: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        if "digest" in o:
            key = json.dumps({k: v for k, v in sorted(o["final_vclock"].items()) if k != 0})
            by_vclock.setdefault(key, []).append(o)
    for key, group in by_vclock.items():
        digests = {json.dumps(o["digest"], sort_keys=True) for o in group}
        if len(digests) > 1:
            tables = sorted({t for o in group for t in o["digest"]
                             if len({g["digest"].get(t) for g in group}) > 1})
            result.add({"member": "/".join(o["member"] for o in group), "origin": None, "lsn": None,
                        "tables": tables, "rows": [],
                        "detail": f"members {', '.join(o['member'] for o in group)} hold vclock {key} "
                                  f"but differ in tables {', '.join(tables)}"})
    return result, outcomes


def run_audit(
    directories: list[Path], *, spark: Any = None, master: str | None = None,
    driver_memory: str | None = None, json_out: Path | None = None,
    html_out: Path | None = None, stream: TextIO | None = None, progress: bool = True,
) -> tuple[int, dict[str, Any]]:
    """Run every check; returns the exit code and the report (also written as asked)."""
    from replicaset.audit import report as reports
    from replicaset.audit.session import DEFAULT_DRIVER_MEMORY, DEFAULT_MASTER, Progress, open_session

    out = stream or sys.stdout
    started = time.monotonic()
    members = discover(directories)
    own_session = spark is None
    if spark is None:
        try:
            spark = open_session(master, driver_memory=driver_memory or DEFAULT_DRIVER_MEMORY)
        except (*_spark_errors(), OSError) as exc:
            raise AuditRunError(
                f"cannot start Spark with master {master or DEFAULT_MASTER}: {_one_line(exc)}") from exc
    session_s = time.monotonic() - started
    try:
        records = load_records(spark, members).persist()
        read_started = time.monotonic()
        with Progress(spark, "reading WAL segments", enabled=progress):
            total_rows = records.count()
        read_s = time.monotonic() - read_started
        damage = (records.filter("error is not null").orderBy("member", "pos")
                  .select("member", "segment", "offset", "type", "error", "origin", "lsn")
                  .limit(READ_ERRORS_LISTED_MAX).collect())
        last_segment = {m.name: m.segments[-1].path.name for m in members if m.segments}
        read_errors, warnings = [], []
        for m in members:
            read_errors.extend({"member": m.name, "error": e} for e in m.header_errors)
        for d in damage:
            entry = {"member": d["member"], "segment": d["segment"], "offset": d["offset"],
                     "type": d["type"], "error": d["error"], "origin": d["origin"], "lsn": d["lsn"]}
            if d["type"] == "TORN" and last_segment.get(d["member"]) == d["segment"]:
                warnings.append(entry)  # a crash mid-write: recovery cuts it, no row acknowledged
            elif d["type"] != "BAD_HEADER" or not any(e["member"] == d["member"] for e in read_errors):
                read_errors.append(entry)
        rows = records.filter("origin is not null")
        with Progress(spark, "checking", enabled=progress):
            stats = checks.segment_stats(rows)
            frontier_rows = checks.frontier(rows, stats)
            ends = checks.end_vclocks(members, frontier_rows)
            walk = checks.walk_logs(rows, members, stats)
            lsns = checks.per_lsn(rows)
            results = [
                checks.check_apply_once(rows, walk.irregular),
                checks.check_order(rows, members, frontier_rows, walk.irregular),
                checks.check_agreement(rows, lsns),
            ]
            completeness, top = checks.check_completeness(members, ends, frontier_rows)
            results.append(completeness)
            convergence, replays = check_convergence(spark, members, ends)
            results.append(convergence)
            # A replay that could not read what it needs gave no verdict: a read error, exit 2.
            read_errors.extend({"member": o["member"], "error": o["detail"]} for o in replays if o.get("error"))
            timeline = checks.timeline(lsns, frontier_rows)
            delay = checks.replication_delay(walk, members)
        lsns.unpersist()
        records.unpersist()
        audit_s = time.monotonic() - started
        report = {
            "inputs": [{"member": m.name, "directory": str(m.directory), "kind": m.kind,
                        "instance_id": m.instance_id, "segments": len(m.segments),
                        "wal_bytes": sum(s.size_bytes for s in m.segments),
                        "wal_start_vclock": m.wal_start,
                        "checkpoints": [{"path": str(c.path), "vclock": c.vclock} for c in m.checkpoints],
                        "horizon": m.horizon, "wal_end_vclock": ends.get(m.name, {}),
                        "checks": "1-5" if m.kind == "member" else "1-4"}
                       for m in members],
            "rows_total": total_rows,
            "rows_per_member_origin": [
                {"member": r["member"], "origin": r["origin"], "rows": r["rows"],
                 "min_lsn": r["min_lsn"], "max_lsn": r["max_lsn"], "changes": r["changes"]}
                for r in frontier_rows],
            "max_vclock": top,
            "checks": [r.to_dict() for r in results],
            "replays": replays,
            "read_errors": read_errors,
            "warnings": warnings,
            "timeline": timeline,
            "replication_delay": delay,
            "timing_s": {"session": round(session_s, 3), "read": round(read_s, 3),
                         "total": round(audit_s, 3)},
            "master": spark.sparkContext.master,
        }
    except _spark_errors() as exc:
        raise AuditRunError(f"the Spark job reading and checking the WALs failed: {_one_line(exc)}") from exc
    finally:
        if own_session:
            spark.stop()
    failed = any(not r.ok for r in results)
    code = EXIT_ERROR if read_errors else EXIT_VIOLATIONS if failed else EXIT_CLEAN
    report["exit_code"] = code
    # The files first: a summary ending in "exit 0" must not be followed by a failed write.
    if json_out is not None:
        Path(json_out).write_text(json.dumps(report, indent=2, default=str))
    if html_out is not None:
        Path(html_out).write_text(reports.render_html(report))
    reports.print_summary(report, out)
    return code, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                        help="a member's data directory (all checks) or a bare WAL directory (checks 1-4)")
    parser.add_argument("--master", help="Spark master URL (default local[2])")
    parser.add_argument("--driver-memory", default=None, metavar="SIZE",
                        help="the driver JVM's heap, e.g. 4g (default 896m; under spark-submit, its own)")
    parser.add_argument("--json", type=Path, dest="json_out", metavar="OUT", help="write the report as JSON")
    parser.add_argument("--html", type=Path, dest="html_out", metavar="OUT", help="write the HTML report with plots")
    parser.add_argument("--no-progress", action="store_true", help="do not print progress on stderr")


def run_from_args(args: argparse.Namespace) -> int:
    """Exit code 2 with one line on stderr for usage and read errors, OS errors included (an
    unreadable segment, an --html path that cannot be written)."""
    try:
        code, _ = run_audit(args.dirs, master=args.master, driver_memory=args.driver_memory,
                            json_out=args.json_out, html_out=args.html_out,
                            progress=not args.no_progress)
    except (AuditInputError, AuditRunError, OSError) as exc:
        print(f"replicaset audit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replicaset audit", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_ERROR if exc.code else EXIT_CLEAN
    return run_from_args(args)
