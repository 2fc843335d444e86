"""Where the time of one QUORUM commit goes: a set of ours of its own (so that tracing does not
touch the measured loads), started at `default_write_consistency = "quorum"` with each member
writing the driver's trace (`[debug] trace_file`, one JSON line per spec action with
CLOCK_MONOTONIC, which the client shares on this host). One connector connection sends
`commits` single-row commits, one every `pace_s`, so that no two overlap; for each, the
first of these events after the request was sent, in ms from the send:

- `m1 row written`: member 1's WalFlush, its decided row written (capture, the PENDING record,
  the intents, the PREPARE round trip to both peers and their synced writes come before it);
- `m1 fsync`: member 1's WalSync, its own WAL fsync (asked for once the row is written);
- `peer 1st` / `peer 2nd applied`: the WalFlush of the COMMIT's row on the first and the
  second other member;
- `reply`: the client has the answer.

The trace carries no quorum events (PREPARE, votes, decisions), so the phases before the row
are one figure."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from bench.kit.client import VALUE_BYTES, connect
from bench.kit.procs import read_lines
from bench.kit.report import fmt_ms, percentile, progress
from bench.kit.sets import CLIENT_SOCKET_TIMEOUT_S, OurSet
from bench.scenarios.quorum_writes import SQL_INSERT

TRACE_FILE = "trace.jsonl"
PHASES = ("m1 row written", "m1 fsync", "peer 1st applied", "peer 2nd applied", "reply")


def member_events(rs: OurSet) -> list[tuple[int, int, str]]:
    """(clock_ns, member, event) of every WalFlush and WalSync in the members' traces."""
    events = []
    for n in (1, 2, 3):
        for line in read_lines(rs.data_dir(n) / TRACE_FILE):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") in ("WalFlush", "WalSync"):
                events.append((int(event["clock_ns"]), n, event["event"]))
    return sorted(events)


def phases_of(events: list[tuple[int, int, str]], sent_ns: int, reply_ns: int, until_ns: int) -> dict[str, float]:
    """The phases of the commit sent at `sent_ns`, from the events before `until_ns`."""
    found: dict[str, float] = {"reply": (reply_ns - sent_ns) / 1e6}
    peers: list[int] = []
    for clock_ns, member, name in events:
        if not sent_ns <= clock_ns < until_ns:
            continue
        at = (clock_ns - sent_ns) / 1e6
        if member == 1 and name == "WalFlush":
            found.setdefault("m1 row written", at)
        elif member == 1 and name == "WalSync":
            found.setdefault("m1 fsync", at)
        elif name == "WalFlush" and member not in peers:
            peers.append(member)
            found["peer 1st applied" if len(peers) == 1 else "peer 2nd applied"] = at
    return found


def run(work: Path, commits: int, pace_s: float) -> dict[str, Any]:
    """Start the traced set, send the paced commits, stop it, read the traces."""
    rs = OurSet(work, name="ours_quorum_traced", consistency="quorum", trace_file=TRACE_FILE)
    entry: dict[str, Any] = {"commits": commits, "pace_s": pace_s}
    marks: list[tuple[int, int]] = []
    try:
        progress(f"{rs.name}: starting three members, then {commits} paced commits")
        rs.start()
        conn = connect(rs.ports[0], CLIENT_SOCKET_TIMEOUT_S)
        try:
            for k in range(commits):
                time.sleep(pace_s)
                sent_ns = time.monotonic_ns()
                conn.execute(SQL_INSERT, [k, "t" * VALUE_BYTES])
                marks.append((sent_ns, time.monotonic_ns()))
        finally:
            conn.close()
        time.sleep(pace_s)  # the last commit's peers apply after the reply
    except Exception as exc:  # noqa: BLE001 - a failed diagnosis must not stop the report
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"{rs.name}: FAILED: {entry['failure']}")
    finally:
        entry["exit_codes"] = rs.stop()
    events = member_events(rs)
    bounds = [sent for sent, _ in marks[1:]] + [marks[-1][1] + int(pace_s * 1e9)] if marks else []
    per_commit = [phases_of(events, sent, reply, until) for (sent, reply), until in zip(marks, bounds)]
    entry["phases"] = {phase: sorted(c[phase] for c in per_commit if phase in c) for phase in PHASES}
    return entry


def report_lines(entry: dict[str, Any]) -> list[str]:
    out = [f"6. ONE QUORUM COMMIT  {entry['commits']} single-row commits, one every {entry['pace_s'] * 1000:g} ms, "
           "on a traced set of ours of its own; ms from the request, p50 / p90 over the commits"]
    if "failure" in entry:
        out.append(f"  FAILED: {entry['failure'].splitlines()[0][:200]}")
    for phase in PHASES:
        values = entry.get("phases", {}).get(phase, [])
        out.append(f"  {phase:<18} {fmt_ms(percentile(values, 0.5) * 1e6):>8} / {fmt_ms(percentile(values, 0.9) * 1e6):>8}"
                   f"   ({len(values)} seen)")
    out.append("  (before 'm1 row written': capture, PREPARE to both peers while m1 syncs its PENDING record, each "
               "peer's intents and PENDING record synced by one fsync, the votes; COMMIT leaves at 'm1 fsync'; the "
               "trace has no quorum events to split it)")
    return out
