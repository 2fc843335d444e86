"""The HTML report's pictures say where a violation sits before its text does: every
listed violation becomes a mark on its member's WAL at its origin's LSNs; a clean audit
has no violation map. Built from a report as `run_audit` makes it, without Spark."""

from __future__ import annotations

from typing import Any

from replicaset.audit.report import Mark, render_html, violation_marks


def _report(checks: list[dict[str, Any]]) -> dict[str, Any]:
    members = ["m1", "m2", "m3"]
    return {
        "inputs": [{"member": m, "kind": "member", "instance_id": n, "segments": 1, "wal_start_vclock": {},
                    "horizon": {}, "wal_end_vclock": {1: 40, 2: 30}} for n, m in enumerate(members, 1)],
        "rows_total": 210,
        "rows_per_member_origin": [{"member": m, "origin": o, "rows": top, "min_lsn": 1, "max_lsn": top}
                                   for m in members for o, top in ((1, 40), (2, 30 if m != "m3" else 24))],
        "max_vclock": {1: 40, 2: 30},
        "checks": [{"name": name, "title": name, "ok": not violations, "count": len(violations),
                    "listed": len(violations), "skipped": None, "violations": violations}
                   for name, violations in checks],
        "read_errors": [],
        "warnings": [],
        "timeline": {"start_ms": 0, "bucket_ms": 1, "series": {}},
        "replication_delay": {},
        "timing_s": {"total": 1.0},
        "master": "local[2]",
        "exit_code": 1 if any(v for _, v in checks) else 0,
    }


def _checks(**violations: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    names = ("apply_once", "order", "agreement", "completeness", "convergence")
    return [(name, violations.get(name, [])) for name in names]


def test_each_kind_of_violation_is_a_mark_where_it_sits() -> None:
    report = _report(_checks(
        apply_once=[{"member": "m1", "origin": 1, "lsn": 7, "detail": "m1 logs 1:7 2 times", "rows": []}],
        order=[{"member": "m2", "origin": 1, "lsn": 12, "kind": "gap", "missing": [12, 15], "detail": "gap", "rows": []},
               {"member": "m2", "origin": 1, "lsn": 20, "kind": "out_of_order", "detail": "swap", "rows": []}],
        agreement=[{"member": None, "origin": 2, "lsn": 9, "detail": "2:9 differs", "rows": []}],
        completeness=[{"member": "m3", "origin": 2, "lsn": 25, "behind": 6, "missing": [25, 30],
                       "detail": "m3 is behind", "rows": []}],
        convergence=[{"member": "m3", "detail": "tables differ"}],  # no LSN: in the text only
    ))
    assert violation_marks(report) == {
        1: [Mark(member="m1", kind="duplicate", low=7, high=7),
            Mark(member="m2", kind="gap", low=12, high=15),
            Mark(member="m2", kind="out_of_order", low=20, high=20)],
        2: [Mark(member=None, kind="divergent", low=9, high=9),
            Mark(member="m3", kind="behind", low=25, high=30)],
    }
    page = render_html(report)
    where = page.index("Where the violations are")
    assert where < page.index("m1 logs 1:7 2 times"), "the picture comes before the lists"
    assert page[where:].startswith("Where the violations are</h2><img alt='Where the violations are' "
                                   "src='data:image/png;base64,")


def test_a_clean_audit_has_no_violation_map() -> None:
    report = _report(_checks())
    assert violation_marks(report) == {}
    page = render_html(report)
    assert "Where the violations are" not in page
    assert page.count("data:image/png;base64,") == 1  # the LSN frontier alone (no timeline, no delays here)
