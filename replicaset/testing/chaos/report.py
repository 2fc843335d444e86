"""The run's report: one JSON document and a one-line verdict.

A run passes when every workload's check passed, no acknowledged write was lost, nothing is
present twice, every member converged within the bound with no divergent row, every member
came back from every fault, and the Spark audit (when it ran) found its five checks clean.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replicaset.testing.chaos.history import Check

AUDIT_TIMEOUT_S = 600.0


@dataclass
class Audit:
    ran: bool
    exit_code: int | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.ran or self.exit_code == 0

    def describe(self) -> dict[str, Any]:
        return {"ran": self.ran, "exit_code": self.exit_code, "checks": self.checks, "seconds": round(self.seconds, 1),
                "note": self.note}


def run_audit(data_dirs: list[Path], out: Path, timeout_s: float = AUDIT_TIMEOUT_S) -> Audit:
    """`replicaset audit` over the members' data directories (all five checks), in a child
    process with its own JVM; its JSON report goes to `out`."""
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "replicaset.cli", "audit", *map(str, data_dirs), "--json", str(out),
                               "--no-progress"], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Audit(ran=True, exit_code=None, seconds=time.monotonic() - started,
                     note=f"the audit did not finish within {timeout_s} s")
    audit = Audit(ran=True, exit_code=done.returncode, seconds=time.monotonic() - started)
    try:
        found = json.loads(out.read_text())
        audit.checks = {c["name"]: bool(c["ok"]) for c in found.get("checks", [])}
    except (OSError, ValueError, KeyError) as exc:
        audit.note = f"no readable report ({exc}); stderr: {done.stderr.strip()[-400:]}"
    return audit


def verdict(report: dict[str, Any]) -> str:
    """One line: PASS or FAIL, the seed, and the figures that decide it."""
    failed = list(report["problems"])
    word = "FAIL" if failed else "PASS"
    audit = report["audit"]
    audit_text = "not run" if not audit["ran"] else ("clean" if audit["exit_code"] == 0 else f"exit {audit['exit_code']}")
    converge = report["converge_s"]
    return (f"chaos {word} seed={report['seed']} faults={len(report['faults'])} ops={report['operations_total']} "
            f"lost={report['acknowledged_writes_lost']} duplicates={report['duplicates']} "
            f"divergent_rows={report['divergent_rows_total']} "
            f"converged_in={'never' if converge is None else f'{converge:.2f}s'} audit={audit_text}"
            + (f" first problem: {failed[0]}" if failed else ""))


def problems_of(checks: list[Check], *, converge_s: float | None, divergent: dict[str, int], faults: list[dict[str, Any]],
                audit: Audit, stuck_workers: list[str]) -> list[str]:
    found = [f"{c.workload}: {p}" for c in checks for p in c.problems]
    if converge_s is None:
        found.append("the members did not converge within the bound")
    if divergent:
        found.append(f"divergent rows after healing: {divergent}")
    found += [f"fault {f['kind']} at {f['at_s']} s: {n}" for f in faults for n in f["notes"]
              if "did not restart" in n or "could not heal" in n]
    if not audit.ok:
        found.append(f"the audit failed (exit {audit.exit_code}): "
                     f"{[name for name, ok in audit.checks.items() if not ok] or audit.note}")
    if stuck_workers:
        found.append(f"workers still running after the end: {stuck_workers}")
    return found


def write_report(report: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2, default=str))
