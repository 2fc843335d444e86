"""From a member's crash to DEAD on every other member, with the default `[cluster]` timers.

Three members of ours with no `[cluster]` options (the defaults in `replicaset.config`). A
run: wait until members 1 and 2 both hold member 3 `alive` in `box.info.members`; SIGKILL
member 3's pid; poll both views every POLL_INTERVAL_S (console EVAL over iproto) until each
shows member 3 `dead`. The figure is the time from the kill until the later of the two
(DEAD everywhere); the time to the first `suspect` is kept beside it. Member 3 is then
started again on its data directory and port (`replicaset serve`) for the next run, and
the time until both views hold it alive again is kept too (its refutation). Before each kill
the script also waits until both observers have heard from member 3 themselves within
HEARD_WITHIN_S (`idle` in their views), so every run starts from the same steady state."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.kit.report import progress
from bench.kit.sets import OurSet
from replicaset.config import OPTIONS

POLL_INTERVAL_S = 0.05
ALIVE_TIMEOUT_S = 90.0
HEARD_WITHIN_S = 1.0  # before a kill, each observer heard from member 3 itself at most this long ago
DEAD_TIMEOUT_S = 120.0
VICTIM = 3
OBSERVERS = (1, 2)


def timers() -> dict[str, int]:
    """The `[cluster]` defaults the members run with."""
    return {name.split(".", 1)[1]: OPTIONS[name].default for name in OPTIONS if name.startswith("cluster.")}


def views(rs: OurSet) -> dict[int, str]:
    """Member 3's state in each observer's view ('?' when the view failed or lacks it)."""
    found = {}
    for n in OBSERVERS:
        try:
            found[n] = rs.members_view(rs.ports[n - 1]).get(VICTIM, "?")
        except Exception as exc:  # noqa: BLE001 - one failed poll is retried
            found[n] = f"? ({type(exc).__name__})"
    return found


def wait_alive(rs: OurSet, since: float) -> float:
    """Seconds from `since` until every observer holds member 3 alive, then (not counted) until
    every observer has heard from it itself within HEARD_WITHIN_S: a view can hold it alive
    from another member's gossip alone, and its DEAD is then due sooner (the silence is
    counted from the last message the observer itself got)."""
    alive_s = None
    while True:
        if alive_s is None:
            seen: dict[int, Any] = views(rs)
            if all(state == "alive" for state in seen.values()):
                alive_s = time.monotonic() - since
        else:
            seen = idle_of_victim(rs)
            if all(isinstance(idle, (int, float)) and idle <= HEARD_WITHIN_S for idle in seen.values()):
                return alive_s
        if time.monotonic() - since > ALIVE_TIMEOUT_S:
            raise RuntimeError(f"member 3 not alive and heard from in every view after {ALIVE_TIMEOUT_S:.0f} s: {seen}")
        time.sleep(POLL_INTERVAL_S)


def idle_of_victim(rs: OurSet) -> dict[int, Any]:
    """Seconds since each observer last heard from member 3 (`idle` in its view)."""
    found: dict[int, Any] = {}
    for n in OBSERVERS:
        try:
            view = rs.info(rs.ports[n - 1]).get("members", [])
            found[n] = next((m.get("idle") for m in view if m.get("id") == VICTIM), None)
        except Exception as exc:  # noqa: BLE001 - only a missing column
            found[n] = f"? {type(exc).__name__}"
    return found


def one_run(rs: OurSet) -> dict[str, Any]:
    """Kill member 3, poll until every observer says dead; per observer the first suspect
    and dead times (s after the kill), and how long it had not heard from member 3 just
    before."""
    suspect: dict[int, float] = {}
    dead: dict[int, float] = {}
    idle_before = idle_of_victim(rs)
    t_kill = time.monotonic()
    code = rs.kill_member(VICTIM)
    states_seen: dict[int, list[str]] = {n: [] for n in OBSERVERS}
    while len(dead) < len(OBSERVERS):
        at = time.monotonic() - t_kill
        if at > DEAD_TIMEOUT_S:
            raise RuntimeError(f"member 3 not dead in every view after {DEAD_TIMEOUT_S:.0f} s: {states_seen}")
        for n, state in views(rs).items():
            if not states_seen[n] or states_seen[n][-1] != state:
                states_seen[n].append(state)
            if state == "suspect":
                suspect.setdefault(n, at)
            if state == "dead":
                suspect.setdefault(n, at)  # a suspicion between two polls
                dead.setdefault(n, at)
        time.sleep(POLL_INTERVAL_S)
    return {"exit_code": code, "idle_before_s": idle_before, "suspect_s": suspect, "dead_s": dead, "dead_everywhere_s": max(dead.values()),
            "states_seen": states_seen}


def run(work: Path, runs: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"notes": [], "timers": timers(), "runs": []}
    rs = OurSet(work, name="dead")
    try:
        progress("dead: starting three members (default [cluster] timers)")
        rs.start()
        if rs.startup_note:
            entry["notes"].append(rs.startup_note)
        entry["first_alive_s"] = wait_alive(rs, time.monotonic())
        for i in range(runs):
            result = one_run(rs)
            entry["runs"].append(result)
            progress(f"dead: run {i + 1}/{runs}: dead everywhere {result['dead_everywhere_s']:.2f} s after the kill "
                     f"(suspect {sorted(result['suspect_s'].values())})")
            restarted = time.monotonic()
            rs.restart_member(VICTIM)
            result["alive_again_s"] = wait_alive(rs, restarted)
    except Exception as exc:  # noqa: BLE001 - one section failing must not stop the rest
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"dead: FAILED: {entry['failure']}")
    finally:
        entry["exit_codes"] = rs.stop()
        entry["log_notes"] = rs.log_notes()
    return entry


def dead_figures(entry: dict[str, Any] | None) -> tuple[float, float] | None:
    """(min, median) seconds from the kill to DEAD everywhere over the runs."""
    values = [r["dead_everywhere_s"] for r in (entry or {}).get("runs", [])]
    return (min(values), statistics.median(values)) if values else None


def report_lines(entry: dict[str, Any]) -> list[str]:
    t = entry["timers"]
    out = [f"  default [cluster] timers: gossip_interval_ms {t['gossip_interval_ms']}, gossip_fanout {t['gossip_fanout']}, "
           f"suspect_timeout_ms {t['suspect_timeout_ms']}, dead_timeout_ms {t['dead_timeout_ms']}; "
           f"box.info.members of members 1 and 2 polled every {POLL_INTERVAL_S * 1000:.0f} ms"]
    for i, r in enumerate(entry["runs"], start=1):
        suspect = "/".join(f"{r['suspect_s'].get(n, float('nan')):.2f}" for n in OBSERVERS)
        dead = "/".join(f"{r['dead_s'][n]:.2f}" for n in OBSERVERS)
        again = r.get("alive_again_s")
        idle = "/".join(str(r.get("idle_before_s", {}).get(n, "-")) for n in OBSERVERS)
        out.append(f"  run {i}: idle on m1/m2 {idle} s; kill -9 member 3 -> suspect +{suspect} s, dead +{dead} s, "
                   f"dead everywhere +{r['dead_everywhere_s']:.2f} s; restarted, alive in both views after "
                   f"{'-' if again is None else f'{again:.2f}'} s")
    figures = dead_figures(entry)
    if figures:
        out.append(f"  crash -> DEAD everywhere: min {figures[0]:.2f} s, median {figures[1]:.2f} s over "
                   f"{len(entry['runs'])} runs (suspect_timeout {t['suspect_timeout_ms'] / 1000:g} s, "
                   f"dead_timeout {t['dead_timeout_ms'] / 1000:g} s)")
    if entry.get("failure"):
        out.append(f"  FAILED: {entry['failure'][:300]}")
    return out
