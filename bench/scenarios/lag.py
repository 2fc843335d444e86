"""Replication lag by watermark polling. One writer thread inserts rows with increasing ids on
member 1 (paced at `--lag-rate`, then unpaced = the full load of one connection), recording
each id's ack time; one poller thread runs `SELECT max(k) FROM kv` on member 2 in a tight
(bounded) loop, recording when each watermark is first seen. lag(i) = time of the first poll
reply showing a watermark >= i minus ack(i) (an upper bound; from the poll's send, a lower
one); p50/p99/max, and the mean poll period, which bounds the resolution. The median lag of
the first and the last tenth of the ids says whether member 2 falls behind."""

from __future__ import annotations

import array
import sys
import threading
import time
from typing import Any

from bench.kit.client import MAX_ERRORS_PER_THREAD, VALUE_BYTES, close_quietly, connect, first_value
from bench.kit.procfs import CpuWindow
from bench.kit.report import fmt_cpu, fmt_int, fmt_ms, percentile, progress
from bench.kit.sets import CLIENT_SOCKET_TIMEOUT_S, ReplicaSet, wait_converged
from bench.scenarios.set_writes import SETS, SQL_INSERT

SQL_MAX = "SELECT max(k) FROM kv"
LAG_VALUE = "l" * VALUE_BYTES
LAG_BASE_PACED = 1_000_000_000  # lag ids live above the throughput keys, one range per run
LAG_BASE_FULL = 2_000_000_000
MAX_POLLS = 20_000_000
MAX_LAG_ROWS = 2_000_000
LAG_TAIL_TIMEOUT_S = 30.0  # how long the poller waits for the last id after the writer stops


def measure_lag(write_port: int, read_port: int, base: int, rate: float | None, warmup_s: float,
                seconds: float, poll_interval_s: float = 0.0) -> dict[str, Any]:
    """One writer thread on write_port (ids base+1, base+2, ...), one poller on read_port."""
    wconn = connect(write_port, CLIENT_SOCKET_TIMEOUT_S)
    pconn = connect(read_port, CLIENT_SOCKET_TIMEOUT_S)
    n_max = min(MAX_LAG_ROWS, int(rate * (warmup_s + seconds)) + 10) if rate else MAX_LAG_ROWS
    acks = array.array("q", bytes(8 * (n_max + 1)))
    seen: list[tuple[int, int, int]] = []  # (watermark id, poll sent ns, poll reply ns), increasing ids
    state: dict[str, Any] = {"last": 0, "writer_errors": [], "poll_errors": [], "polls": 0,
                             "poll_first_ns": 0, "poll_last_ns": 0}
    writer_done = threading.Event()
    poller_ready = threading.Event()
    start_box: list[int] = [0]

    def writer() -> None:
        try:
            poller_ready.wait(10)
            start = time.monotonic_ns() + 20_000_000
            start_box[0] = start
            end = start + int((warmup_s + seconds) * 1e9)
            execute = wconn.execute
            i = 0
            while i < n_max:
                if rate:
                    target = start + int(i * 1e9 / rate)
                    pause = (target - time.monotonic_ns()) / 1e9
                    if pause > 0:
                        time.sleep(pause)
                elif i == 0:
                    pause = (start - time.monotonic_ns()) / 1e9
                    if pause > 0:
                        time.sleep(pause)
                if time.monotonic_ns() >= end:
                    break
                i += 1
                try:
                    execute(SQL_INSERT, [base + i, LAG_VALUE])
                except Exception as exc:  # noqa: BLE001
                    state["writer_errors"].append(f"id {i}: {type(exc).__name__}: {exc}")
                    i -= 1
                    if len(state["writer_errors"]) >= MAX_ERRORS_PER_THREAD:
                        break
                    continue
                acks[i] = time.monotonic_ns()
            state["last"] = i
        finally:
            writer_done.set()

    def poller() -> None:
        execute = pconn.execute
        watermark = 0
        polls = 0
        hard_deadline = None
        first_ns = 0
        t1 = 0
        poller_ready.set()
        while polls < MAX_POLLS:
            t0 = time.monotonic_ns()
            try:
                value = first_value(execute(SQL_MAX))
            except Exception as exc:  # noqa: BLE001
                state["poll_errors"].append(f"{type(exc).__name__}: {exc}")
                if len(state["poll_errors"]) >= MAX_ERRORS_PER_THREAD:
                    break
                continue
            t1 = time.monotonic_ns()
            if poll_interval_s:
                time.sleep(poll_interval_s)
            if polls == 0:
                first_ns = t0
            polls += 1
            mark = (value - base) if isinstance(value, int) else 0
            if mark > watermark:
                watermark = mark
                seen.append((mark, t0, t1))
            if writer_done.is_set():
                if watermark >= state["last"]:
                    break
                if hard_deadline is None:
                    hard_deadline = t1 + int(LAG_TAIL_TIMEOUT_S * 1e9)
                elif t1 > hard_deadline:
                    break
        state.update(polls=polls, poll_first_ns=first_ns, poll_last_ns=t1, final_watermark=watermark)

    threads = [threading.Thread(target=poller, daemon=True), threading.Thread(target=writer, daemon=True)]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # two busy threads share the GIL: hand it over quickly
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=warmup_s + seconds + LAG_TAIL_TIMEOUT_S + 2 * CLIENT_SOCKET_TIMEOUT_S + 30)
        stuck = sum(1 for t in threads if t.is_alive())
    finally:
        sys.setswitchinterval(old_interval)
        close_quietly([wconn, pconn])

    last = state["last"]
    measure_from = start_box[0] + int(warmup_s * 1e9)
    upper: list[int] = []  # reply time of the first poll showing it - ack
    lower: list[int] = []  # send time of that poll - ack
    unseen = 0
    j = 0
    first_measured = None
    for i in range(1, last + 1):
        ack = acks[i]
        while j < len(seen) and seen[j][0] < i:
            j += 1
        if ack < measure_from:
            continue
        if first_measured is None:
            first_measured = ack
        if j >= len(seen):
            unseen += 1
            continue
        upper.append(seen[j][2] - ack)
        lower.append(seen[j][1] - ack)
    tenth = max(1, len(upper) // 10)
    trend = (percentile(sorted(upper[:tenth]), 0.5), percentile(sorted(upper[-tenth:]), 0.5))
    upper.sort()
    lower.sort()
    measured = len(upper) + unseen
    acked_span = (acks[last] - first_measured) / 1e9 if last and first_measured and acks[last] > first_measured else None
    polls = state["polls"]
    poll_span = state["poll_last_ns"] - state["poll_first_ns"]
    return {
        "rate": rate,
        "rows": measured,
        "write_rate": measured / acked_span if acked_span else None,
        "unseen": unseen,
        "p50_ns": percentile(upper, 0.50),
        "p99_ns": percentile(upper, 0.99),
        "max_ns": float(upper[-1]) if upper else float("nan"),
        "p50_lower_ns": percentile(lower, 0.50),
        "p99_lower_ns": percentile(lower, 0.99),
        "negative": sum(1 for v in upper if v < 0),
        "p50_first_tenth_ns": trend[0],
        "p50_last_tenth_ns": trend[1],
        "polls": polls,
        "poll_period_ns": poll_span / polls if polls else float("nan"),
        "writer_errors": state["writer_errors"][:3],
        "poll_errors": state["poll_errors"][:3],
        "stuck": stuck,
    }


def run(rs: ReplicaSet, lag_rate: float, seconds: float, warmup_s: float, poll_interval_ms: float,
        entry: dict[str, Any]) -> None:
    """Paced, then unpaced, on a started set; the set's `entry` gets `lag` and notes."""
    for label, base, rate in (("paced", LAG_BASE_PACED, lag_rate), ("full", LAG_BASE_FULL, None)):
        progress(f"{rs.name}: lag, writer on member 1 {'at %g/s' % rate if rate else 'unpaced'}, poller on member 2")
        cpu = CpuWindow(rs.pids())
        lag = measure_lag(rs.ports[0], rs.ports[1], base, rate, min(0.5, warmup_s), seconds, poll_interval_ms / 1000)
        lag["cpu"] = cpu.stop()
        entry["lag"][label] = lag
        if lag["writer_errors"] or lag["poll_errors"] or lag["unseen"] or lag["stuck"]:
            entry["notes"].append(f"lag {label}: {lag['unseen']} ids never seen on member 2, writer errors "
                                  f"{lag['writer_errors']}, poll errors {lag['poll_errors']}, stuck {lag['stuck']}")
        took, vclocks = wait_converged(rs)
        if took is None:
            entry["notes"].append(f"after lag {label}: vclocks did not converge: {vclocks}")
        progress(f"{rs.name}: lag {label}: p50 {fmt_ms(lag['p50_ns'])} ms p99 {fmt_ms(lag['p99_ns'])} ms, "
                 f"poll period {fmt_ms(lag['poll_period_ns'])} ms")


def report_lines(sets: dict[str, Any], lag_rate: float, poll_interval_ms: float) -> list[str]:
    """Section 2: the table, then the trend of each run."""
    out = ["2. REPLICATION LAG  writer thread on member 1 (increasing ids), poller thread on member 2 running "
           f"{SQL_MAX!r} " + (f"with a {poll_interval_ms:g} ms sleep after each poll" if poll_interval_ms
                              else "in a tight loop"),
           "   lag(i) = reply time of the first poll showing max(k) >= i  -  ack time of i  (an upper bound; "
           "'from poll send' is the lower bound)",
           f"  {'set':<10} {'writer':<9} {'rows':>7} {'rows/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
           f"{'p50/p99 from send':>18} {'poll period':>11} {'unseen':>6} {'CPU m1/m2/m3':>13}"]
    for label in ("paced", "full"):
        for name in SETS:
            lag = sets.get(name, {}).get("lag", {}).get(label)
            what = f"{lag_rate:g}/s" if label == "paced" else "unpaced"
            if lag is None:
                out.append(f"  {name:<10} {what:<9} {'-':>7}")
                continue
            out.append(f"  {name:<10} {what:<9} {lag['rows']:>7} {fmt_int(lag['write_rate']):>8} "
                       f"{fmt_ms(lag['p50_ns']):>8} {fmt_ms(lag['p99_ns']):>8} {fmt_ms(lag['max_ns']):>8} "
                       f"{fmt_ms(lag['p50_lower_ns']) + '/' + fmt_ms(lag['p99_lower_ns']):>18} "
                       f"{fmt_ms(lag['poll_period_ns']) + ' ms':>11} {lag['unseen']:>6} {fmt_cpu(lag.get('cpu')):>13}")
    out.append("  (poll period = mean time per poll over the run: the resolution of these figures; "
               "negative lags mean the row was visible on member 2 before the writer thread recorded its ack)")
    if poll_interval_ms:
        out.append(f"  (the poller slept {poll_interval_ms:g} ms after each poll: --poll-interval-ms; the period includes it)")
    for name in SETS:
        for label in ("paced", "full"):
            lag = sets.get(name, {}).get("lag", {}).get(label)
            if lag:
                out.append(f"  {name:<9} {label:<5}: median lag of the first / last tenth of the ids "
                           f"{fmt_ms(lag['p50_first_tenth_ns'])} / {fmt_ms(lag['p50_last_tenth_ns'])} ms (growing = "
                           f"member 2 falls behind); {lag['negative']} of {lag['rows']} lags negative; "
                           f"{lag['polls']:,} polls")
    return out
