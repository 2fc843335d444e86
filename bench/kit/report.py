"""How the benchmarks speak: progress on stderr (stdout holds only the report, so it can be
saved as it is), the number formats of every table, percentiles, the facts of a run that make
two reports comparable (machine, command, commit, load average), and the TARGETS and NOTES
lines."""

from __future__ import annotations

import array
import datetime
import os
import platform
import shlex
import subprocess
import sys
import time
from typing import Any

from bench.kit import REPO

MIB = 1024 * 1024


def progress(message: str) -> None:
    """Progress on stderr, so stdout holds only the report."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(ordered: list[int] | list[float] | array.array, fraction: float) -> float:
    """The nearest-rank value at `fraction` of already sorted values; NaN when there are none,
    so a missing figure prints as '-' instead of failing the report."""
    if not ordered:
        return float("nan")
    return float(ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))])


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either side is missing (a skipped server, a failed run)."""
    if a is None or b is None or a != a or b != b or b <= 0:
        return None
    return a / b


def fmt_int(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:,.0f}"


def fmt_ms(value_ns: float | None) -> str:
    return "-" if value_ns is None or value_ns != value_ns else f"{value_ns / 1e6:.3f}"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None or value != value else f"{value:.2f}x"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value * 100:.0f}%"


def fmt_cpu(shares: list[float | None] | None) -> str:
    """CPU shares of several processes as '37/23/24%'."""
    if not shares:
        return "-"
    return "/".join("-" if v is None else f"{v * 100:.0f}" for v in shares) + "%"


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("MET" if met else "MISSED")


def load_average() -> str:
    """/proc/loadavg's first three fields: other work on the machine skews every figure."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def git_commit() -> str:
    """The checked-out commit, read-only (`git rev-parse`, `git status`); '?' without git."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + (" +uncommitted changes" if dirty else "")


def run_facts() -> dict[str, Any]:
    """What a report must say for its figures to be compared with another's: when, where,
    with which command, at which commit, and how busy the machine was at the start."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "commit": git_commit(),
        "loadavg_start": load_average(),
    }


def header_lines(name: str, facts: dict[str, Any]) -> list[str]:
    """The first two lines of every report, from `run_facts()`."""
    return [
        f"{name}  {facts['date']}  host {facts['host']}  cpus {facts['cpus']}  python {facts['python']}",
        f"command: {facts['command']}   (cwd {os.getcwd()}, repo at {facts['commit']})",
    ]


def target_lines(targets: list[tuple[str, str, bool | None]], label_width: int, value_width: int) -> list[str]:
    """One line per (label, value, met) target, with MET / MISSED / n/a."""
    return [f"  {label:<{label_width}} {value:>{value_width}}  {verdict(met)}" for label, value, met in targets]


def notes_lines(notes: list[str]) -> list[str]:
    """A NOTES section, or nothing when there is nothing to note."""
    return ["NOTES", *(f"  {note}" for note in notes)] if notes else []
