"""Delta sync: a member that was down catches up by streaming the rows it missed.

Three members of ours (`default_write_consistency = "one"`, as the other set figures;
`[replication] delta_sync_threshold_transactions` above the row count, so anti-entropy
never finds the member past the threshold; `auto_rejoin` is turned off, so even then it
would only log). Member 3 is stopped cleanly (SIGTERM); `rows` rows are written on member 1
in multi-row INSERTs of `batch_rows` (one transaction, so one WAL record, each); member 2
follows, and the script waits until it holds them all. Then member 3 is started again
(`replicaset serve` on its data directory and port) and timed from its process start until
its `box.info.vclock` equals member 1's; rows/s = rows / that time. Its vclock is polled
every POLL_INTERVAL_S, which dates the first streamed row and gives the streaming rate
without the start-up. The members' CPU over the catch-up says who worked."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path
from typing import Any

from bench.kit.client import VALUE_BYTES
from bench.kit.procfs import CpuWindow, read_cpu_seconds
from bench.kit.procs import HOST, log_events, read_lines
from bench.kit.report import fmt_cpu, fmt_int, progress
from bench.kit.sets import CLIENT_SOCKET_TIMEOUT_S, OurSet, norm_vclock, wait_converged
from bench.scenarios.join_ours import iso_to_epoch
from replicaset.iproto.client import Client

POLL_INTERVAL_S = 0.05
FILL_TIMEOUT_S = 3600.0
CATCH_UP_TIMEOUT_MIN_S = 120.0
CATCH_UP_ROWS_PER_S_FLOOR = 2_000  # the catch-up deadline assumes at least this rate
PROGRESS_EVERY_S = 5.0
DEFAULT_DELTA_THRESHOLD = 10_000  # replication.delta_sync_threshold_transactions' default


def random_values(count: int) -> list[str]:
    """`count` random text values of VALUE_BYTES characters."""
    text = base64.b64encode(os.urandom(count * VALUE_BYTES * 3 // 4 + 3)).decode()
    return [text[i * VALUE_BYTES:(i + 1) * VALUE_BYTES] for i in range(count)]


def fill(port: int, rows: int, batch_rows: int) -> dict[str, Any]:
    """Keys 1..rows with random values, `batch_rows` per INSERT; seconds and transactions."""
    statement = "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * batch_rows)
    t0 = time.monotonic()
    shown = t0
    txns = 0
    with Client.connect(HOST, port, timeout_s=300) as client:
        next_key = 1
        while next_key <= rows:
            count = min(batch_rows, rows - next_key + 1)
            sql = statement if count == batch_rows else "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * count)
            binds: list[Any] = []
            for k, value in zip(range(next_key, next_key + count), random_values(count)):
                binds += [k, value]
            client.execute(sql, binds)
            txns += 1
            next_key += count
            if time.monotonic() - shown > PROGRESS_EVERY_S:
                shown = time.monotonic()
                progress(f"delta: written {next_key - 1:,} / {rows:,} rows")
            if time.monotonic() - t0 > FILL_TIMEOUT_S:
                raise RuntimeError(f"the fill took more than {FILL_TIMEOUT_S:.0f} s")
    return {"fill_s": time.monotonic() - t0, "transactions": txns}


def info(port: int, timeout_s: float = CLIENT_SOCKET_TIMEOUT_S) -> dict[str, Any]:
    with Client.connect(HOST, port, timeout_s=timeout_s) as client:
        return client.eval("box.info")[0]


def count_rows(port: int) -> int:
    with Client.connect(HOST, port, timeout_s=300) as client:
        return int(client.execute("SELECT count(*) FROM kv").rows[0][0])


FRAME_LIMIT_MARK = "exceeds the limit"
STUCK_AFTER_REFUSALS = 5


def check_not_stuck(rs: OurSet, n: int) -> None:
    """Raise when member `n`'s log shows its upstream refusing the same oversized frame again
    and again: it will never catch up, and waiting for the deadline only hides why."""
    refusals = [line for line in read_lines(rs.members[n - 1].log_path) if FRAME_LIMIT_MARK in line]
    if len(refusals) >= STUCK_AFTER_REFUSALS:
        reason = next((e.get("reason") for e in log_events(refusals[-1:])), refusals[-1][:200])
        raise RuntimeError(f"member {n} cannot catch up: its upstream refused {len(refusals)} times: {reason}")


def since_last_start(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of a member's log since its last start (the log is appended to)."""
    starts = [i for i, e in enumerate(events) if e.get("event") == "listening"]
    return events[starts[-1]:] if starts else events


TIMELINE_EVENTS = ("listening", "upstream_subscribed", "upstream_disconnected", "connect_quorum_reached",
                   "snapshot_transfer_needed", "snapshot_transfer", "rejoin_needed")
TIMELINE_MAX = 16


def timeline(events: list[dict[str, Any]], started_wall: float, done_s: float) -> list[str]:
    """The restarted member's link events until it caught up (and a second after), as
    '+s event peer state/reason', from its log's timestamps."""
    out = []
    for event in events:
        at = iso_to_epoch(event.get("timestamp"))
        if event.get("event") not in TIMELINE_EVENTS or at is None or at - started_wall > done_s + 1:
            continue
        detail = event.get("state") or event.get("reason") or ""
        out.append(f"+{at - started_wall:.2f} {event['event']} {event.get('peer', '')} {str(detail)[:60]}".rstrip())
    return out[:TIMELINE_MAX]


def run(work: Path, rows: int, batch_rows: int, replication_timeout_s: float) -> dict[str, Any]:
    """Stop member 3, write, restart it, time its catch-up; the figures, or `failure`."""
    threshold = max(DEFAULT_DELTA_THRESHOLD, 2 * rows)  # above the rows, so above the transactions too
    entry: dict[str, Any] = {"notes": [], "rows": rows, "batch_rows": batch_rows, "threshold": threshold,
                             "replication_timeout_s": replication_timeout_s}
    rs = OurSet(work, name="delta", options={"replication.delta_sync_threshold_transactions": threshold,
                                             "replication.auto_rejoin": False,
                                             "replication_timeout": replication_timeout_s})
    try:
        progress("delta: starting three members")
        rs.start()
        if rs.startup_note:
            entry["notes"].append(rs.startup_note)
        took, _ = wait_converged(rs)
        if took is None:
            raise RuntimeError("the three members did not converge after the CREATE TABLE")
        m1, m2, m3 = rs.ports
        entry["ports"] = list(rs.ports)
        entry["stop_code"] = rs.stop_member(3)
        progress(f"delta: member 3 stopped (exit code {entry['stop_code']}); writing {rows:,} rows on member 1 "
                 f"in INSERTs of {batch_rows}")
        entry.update(fill(m1, rows, batch_rows))
        target = norm_vclock(info(m1).get("vclock"))
        entry["target_vclock"] = target
        progress(f"delta: {rows:,} rows in {entry['fill_s']:.1f} s ({rows / entry['fill_s']:,.0f} rows/s on member 1); "
                 f"vclock {target}; waiting for member 2")
        t0 = time.monotonic()
        while (m2_vclock := norm_vclock(info(m2).get("vclock"))) != target:
            if time.monotonic() - t0 > CATCH_UP_TIMEOUT_MIN_S + rows / CATCH_UP_ROWS_PER_S_FLOOR:
                raise RuntimeError(f"member 2 did not reach member 1's vclock {target}: it holds {m2_vclock}")
            check_not_stuck(rs, 2)
            time.sleep(POLL_INTERVAL_S)
        entry["m2_behind_s"] = time.monotonic() - t0
        cpu12 = CpuWindow(rs.pids()[:2])
        progress("delta: restarting member 3")
        member = rs.restart_member(3)
        started_ns = member.started_ns
        entry["answers_s"] = (time.monotonic_ns() - started_ns) / 1e9
        samples: list[tuple[float, int, str]] = []  # (s since start, rows of origin 1 it holds, status)
        done_s = None
        origin = 1
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_MIN_S + rows / CATCH_UP_ROWS_PER_S_FLOOR
        shown = time.monotonic()
        while time.monotonic() < deadline:
            now_info = info(m3)
            at = (time.monotonic_ns() - started_ns) / 1e9
            vclock = norm_vclock(now_info.get("vclock"))
            samples.append((at, vclock.get(origin, 0), str(now_info.get("status"))))
            if vclock == target:
                done_s = at
                break
            if time.monotonic() - shown > PROGRESS_EVERY_S:
                shown = time.monotonic()
                progress(f"delta: member 3 at {vclock} of {target} after {at:.1f} s")
                check_not_stuck(rs, 3)
            time.sleep(POLL_INTERVAL_S)
        entry["cpu_m1_m2"] = cpu12.stop()
        entry["cpu_m3_s"] = read_cpu_seconds(member.pid)
        entry["samples"] = samples
        if done_s is None:
            raise RuntimeError(f"member 3 did not reach {target} in time: last {samples[-1] if samples else None}")
        entry["seconds"] = done_s
        entry["rows_per_s"] = rows / done_s
        start_lsn = samples[0][1]
        moving = next((s for s in samples if s[1] > start_lsn), None)
        entry["first_row_s"] = moving[0] if moving else None
        if moving:
            # From the last sample that still showed none of the rows: a lower bound on the
            # streaming rate (a busy member answers box.info late, so the samples are coarse).
            still = max(s[0] for s in samples if s[1] == start_lsn)
            entry["stream_rows_per_s"] = rows / (done_s - still)
        entry["m3_start_txns"] = start_lsn
        entry["statuses"] = sorted({s[2] for s in samples})
        entry["counts"] = [count_rows(m1), count_rows(m3)]
        if entry["counts"][0] != entry["counts"][1]:
            entry["notes"].append(f"DIVERGENCE: member 1 has {entry['counts'][0]} rows, member 3 {entry['counts'][1]}")
        events = since_last_start(log_events(read_lines(member.log_path)))
        entry["subscribed"] = [e.get("peer") for e in events if e.get("event") == "upstream_subscribed"]
        entry["timeline"] = timeline(events, member.started_wall, done_s)
        repair = [e for e in events if str(e.get("event", "")).startswith(("snapshot_transfer", "anti_entropy", "rejoin"))]
        entry["repair_events"] = [f"{e.get('event')} {e.get('reason', '')}".strip() for e in repair]
        progress(f"delta: member 3 caught up in {done_s:.2f} s = {entry['rows_per_s']:,.0f} rows/s")
    except Exception as exc:  # noqa: BLE001 - one section failing must not stop the rest
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"delta: FAILED: {entry['failure']}")
    finally:
        entry["exit_codes"] = rs.stop()
        entry["log_notes"] = rs.log_notes()
    return entry


def rows_per_s(entry: dict[str, Any] | None) -> float | None:
    return entry.get("rows_per_s") if entry else None


def report_lines(entry: dict[str, Any]) -> list[str]:
    out = [f"  {entry['rows']:,} rows of {VALUE_BYTES}-char random text in INSERTs of {entry['batch_rows']:,} "
           f"(one transaction each); delta_sync_threshold_transactions = {entry['threshold']:,}, "
           f"replication_timeout = {entry['replication_timeout_s']:g} s"]
    if "fill_s" in entry:
        out.append(f"  written on member 1 in {entry['fill_s']:.1f} s ({entry['rows'] / entry['fill_s']:,.0f} rows/s, "
                   f"{entry['transactions']:,} transactions) while member 2 followed "
                   f"(it held them {entry.get('m2_behind_s', float('nan')):.2f} s after the last)")
    if "seconds" not in entry:
        failure = entry.get("failure", "no figures")
        return out + [f"  FAILED: {failure.splitlines()[0][:200]}"]
    first = entry.get("first_row_s")
    out.append(f"  member 3 restarted: answers +{entry['answers_s']:.2f} s, first new row seen "
               f"+{'-' if first is None else f'{first:.2f}'} s, vclock equal +{entry['seconds']:.2f} s (from process start)")
    out.append(f"  delta sync {entry['rows_per_s']:,.0f} rows/s from process start; "
               f"{fmt_int(entry.get('stream_rows_per_s'))} rows/s while streaming (from the last {POLL_INTERVAL_S * 1000:.0f} ms "
               f"poll that showed none of the rows: coarse when the catch-up takes about a second, as a busy member "
               f"answers box.info late)")
    cpu3 = entry.get("cpu_m3_s")
    out.append(f"  CPU during the catch-up: members 1/2 {fmt_cpu(entry['cpu_m1_m2'])} of a core; member 3 "
               f"{cpu3:.1f} s in all, start-up included ({cpu3 / entry['seconds'] * 100:.0f}% of a core): "
               f"{entry['rows'] / cpu3:,.0f} rows per CPU-second of member 3" if cpu3 else "  CPU: -")
    out.append(f"  member 3 statuses seen {entry['statuses']}; rows member 1 / member 3 {entry['counts']}; "
               f"anti-entropy / re-join events {entry['repair_events'] or 'none'}")
    out.append("  member 3's links from its log (s from process start; member 1 is "
               f"{entry['ports'][0]}, member 2 {entry['ports'][1]}):")
    out += [f"    {line}" for line in entry.get("timeline", [])]
    return out
