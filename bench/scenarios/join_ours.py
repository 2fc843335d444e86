"""Initial join of ours (snapshot transfer and the joiner's memory): a fresh one-member set is
filled with `join_mb` MB of rows (random 8 KiB text values, multi-row INSERTs of 2 MiB),
`box.snapshot()`, then `replicaset join` of a new member is timed from process start until it
answers and its vclock equals the first member's. MB/s = bytes the joiner received (else the
database file) / seconds; the joiner's peak RSS is its VmHWM, polled while it joins. The
members' logs date the steps between (checkpoint ready, file received)."""

from __future__ import annotations

import base64
import datetime
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.kit.procfs import RssWatch, read_status_kb
from bench.kit.procs import HOST, Proc, first_events, log_problems, read_lines
from bench.kit.report import MIB, fmt_int, progress
from bench.kit.client import SQL_CREATE
from bench.kit.sets import OUR_CONFIG, norm_vclock
from replicaset.iproto.client import Client
from replicaset.testing.processes import free_port

JOIN_VALUE_BYTES = 8192
JOIN_ROWS_PER_STATEMENT = 256  # 2 MiB per INSERT: under max_txn_bytes (8 MiB) and max_frame_bytes
RSS_POLL_INTERVAL_S = 0.02


def random_text(nbytes: int) -> str:
    return base64.b64encode(os.urandom(nbytes * 3 // 4)).decode()[:nbytes]


def iso_to_epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def dirty_kb() -> int | None:
    """Dirty + Writeback of /proc/meminfo in kB: page cache the kernel still has to write,
    which throttles a writer once past vm.dirty_ratio."""
    try:
        with open("/proc/meminfo") as f:
            fields = {line.split(":")[0]: int(line.split()[1]) for line in f if line.startswith(("Dirty:", "Writeback:"))}
    except (OSError, ValueError, IndexError):
        return None
    return sum(fields.values())


def run(work: Path, join_mb: int) -> dict[str, Any]:
    """Fill, snapshot, join, measure, stop; the figures, or `failure` with what went wrong."""
    entry: dict[str, Any] = {"notes": []}
    root = work / "join_ours"
    root.mkdir()
    config = root / "config.toml"
    config.write_text(OUR_CONFIG + '[replication]\ndefault_write_consistency = "one"\n')  # the fill, as Tarantool's
    rs_uuid = str(uuid.uuid4())
    member: Proc | None = None
    joiner: Proc | None = None
    watch: RssWatch | None = None
    try:
        progress("join (ours): starting a fresh one-member set")
        member = Proc.ours("ours member", ["bootstrap", "--uuid", rs_uuid, "--data-dir", str(root / "m1"),
                                           "--config", str(config)], root / "m1.log")
        port = member.port
        rows_total = join_mb * MIB // JOIN_VALUE_BYTES
        statement = "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * JOIN_ROWS_PER_STATEMENT)
        t0 = time.monotonic()
        with Client.connect(HOST, port, timeout_s=300) as client:
            client.execute(SQL_CREATE)
            next_id = 1
            step = max(1, rows_total // JOIN_ROWS_PER_STATEMENT // 10)
            for n_stmt in range((rows_total + JOIN_ROWS_PER_STATEMENT - 1) // JOIN_ROWS_PER_STATEMENT):
                count = min(JOIN_ROWS_PER_STATEMENT, rows_total - next_id + 1)
                sql = statement if count == JOIN_ROWS_PER_STATEMENT else \
                    "INSERT INTO kv VALUES " + ",".join(["(?, ?)"] * count)
                binds: list[Any] = []
                for k in range(next_id, next_id + count):
                    binds += [k, random_text(JOIN_VALUE_BYTES)]
                client.execute(sql, binds)
                next_id += count
                if n_stmt % step == 0:
                    progress(f"join (ours): filled {(next_id - 1) * JOIN_VALUE_BYTES / MIB:.0f} / {join_mb} MB")
            entry["fill_s"] = time.monotonic() - t0
            entry["rows"] = next_id - 1
            progress(f"join (ours): filled {entry['rows']} rows in {entry['fill_s']:.1f} s; box.snapshot()")
            t1 = time.monotonic()
            client.eval("box.snapshot()")
            entry["snapshot_s"] = time.monotonic() - t1
            entry["member_vclock_before"] = norm_vclock(client.eval("box.info")[0].get("vclock"))
        db = root / "m1" / "db.sqlite"
        entry["db_bytes"] = db.stat().st_size if db.exists() else None
        snaps = sorted((root / "m1" / "snap").glob("*.snap"))
        entry["snap_bytes"] = snaps[-1].stat().st_size if snaps else None
        entry["member_hwm_before_kb"] = read_status_kb(member.pid, "VmHWM")
        entry["dirty_kb_at_join"] = dirty_kb()

        jport = free_port()
        argv = [sys.executable, "-m", "replicaset.cli", "join", "--uuid", rs_uuid, "--peer", f"{HOST}:{port}",
                "--data-dir", str(root / "m2"), "--config", str(config), "--listen", f"{HOST}:{jport}"]
        progress(f"join (ours): starting the joiner ({' '.join(argv[2:4])} ...)")
        timeout_s = max(120.0, join_mb / 5.0)
        joiner = Proc.spawn("ours joiner", argv, root / "m2.log")
        watch = RssWatch(joiner.pid, RSS_POLL_INTERVAL_S)
        answered_ns = None
        done_ns = None
        last_err = ""
        member_vclock: dict[int, int] = {}
        joiner_vclock: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if joiner.proc.poll() is not None:
                raise RuntimeError(f"the joiner exited with {joiner.proc.returncode}:\n{joiner.tail()}")
            try:
                with Client.connect(HOST, jport, timeout_s=2.0) as jc:
                    info = jc.eval("box.info")[0]
                if answered_ns is None:
                    answered_ns = time.monotonic_ns()
                joiner_vclock = norm_vclock(info.get("vclock"))
                with Client.connect(HOST, port, timeout_s=10.0) as mc:
                    member_vclock = norm_vclock(mc.eval("box.info")[0].get("vclock"))
                if joiner_vclock == member_vclock:
                    done_ns = time.monotonic_ns()
                    entry["joiner_status"] = info.get("status")
                    break
            except OSError as exc:
                last_err = str(exc)
            except Exception as exc:  # noqa: BLE001 - an error reply while it starts
                last_err = f"{type(exc).__name__}: {exc}"
            time.sleep(RSS_POLL_INTERVAL_S)
        watch.stop()
        entry["joiner_hwm_kb"] = watch.hwm_kb
        entry["joiner_rss_peak_kb"] = watch.rss_peak_kb
        entry["member_hwm_after_kb"] = read_status_kb(member.pid, "VmHWM")
        if done_ns is None:
            raise RuntimeError(f"the joiner did not reach the member's vclock within {timeout_s:.0f} s "
                               f"(joiner {joiner_vclock}, member {member_vclock}, last error {last_err!r}):\n{joiner.tail()}")
        entry["seconds"] = (done_ns - joiner.started_ns) / 1e9
        entry["answered_s"] = (answered_ns - joiner.started_ns) / 1e9 if answered_ns else None
        entry["vclock"] = member_vclock
        events = first_events(joiner.log_path)
        member_events = first_events(root / "m1.log")
        joined = events.get("joined", {})
        entry["join_bytes"] = joined.get("bytes")
        serving = iso_to_epoch(member_events.get("join_serving", {}).get("timestamp"))
        joined_at = iso_to_epoch(joined.get("timestamp"))
        entry["checkpoint_ready_s"] = serving - joiner.started_wall if serving else None
        entry["file_received_s"] = joined_at - joiner.started_wall if joined_at else None
        size = entry["join_bytes"] or entry["db_bytes"]
        entry["size_bytes"] = size
        entry["mb_per_s"] = size / MIB / entry["seconds"] if size else None
        counts = []
        for p in (port, jport):
            with Client.connect(HOST, p, timeout_s=120) as c:
                counts.append(c.execute("SELECT count(*), sum(length(v)) FROM kv").rows[0])
        entry["counts"] = counts
        if counts[0] != counts[1]:
            entry["notes"].append(f"DIVERGENCE after join: member {counts[0]} vs joiner {counts[1]} (rows, bytes)")
        progress(f"join (ours): {fmt_int(size)} B in {entry['seconds']:.2f} s = {entry['mb_per_s']:.1f} MB/s, "
                 f"joiner VmHWM {watch.hwm_kb / 1024:.1f} MB")
    except Exception as exc:  # noqa: BLE001
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"join (ours): FAILED: {entry['failure']}")
    finally:
        if watch is not None:
            watch.stop()
        entry["exit_codes"] = [proc.stop() for proc in (joiner, member) if proc is not None]
        notes = [f"{path.name}: {line[:200]}" for path in (root / "m1.log", root / "m2.log")
                 for line in log_problems(read_lines(path))]
        entry["log_notes"] = notes[:8]
        shutil.rmtree(root, ignore_errors=True)
    return entry


def report_lines(j: dict[str, Any]) -> list[str]:
    """The lines of a join that finished: fill, sizes, MB/s, its steps, memory, row counts."""
    steps = []
    if j.get("checkpoint_ready_s") is not None:
        steps.append(f"member's checkpoint ready +{j['checkpoint_ready_s']:.2f} s")
    if j.get("file_received_s") is not None:
        steps.append(f"file received +{j['file_received_s']:.2f} s")
    if j.get("answered_s") is not None:
        steps.append(f"answers +{j['answered_s']:.2f} s")
    return [
        f"  ours       fill {j.get('rows', 0):,} rows in {j.get('fill_s', 0):.1f} s, snapshot {j.get('snapshot_s', 0):.1f} s; "
        f"db file {fmt_int(j.get('db_bytes'))} B, snap {fmt_int(j.get('snap_bytes'))} B, "
        f"joiner received {fmt_int(j.get('join_bytes'))} B",
        f"             {j['seconds']:.2f} s = {j['mb_per_s']:.1f} MB/s of database file "
        f"({j['rows'] * JOIN_VALUE_BYTES / MIB / j['seconds']:.1f} MB/s of row data)",
        f"             ({'; '.join(steps)}; vclock equal +{j['seconds']:.2f} s, all from process start)",
        f"             joiner VmHWM {j['joiner_hwm_kb'] / 1024:.1f} MB (peak VmRSS seen {j['joiner_rss_peak_kb'] / 1024:.1f} MB); "
        f"member VmHWM {fmt_int((j.get('member_hwm_before_kb') or 0) / 1024)} MB before the join, "
        f"{fmt_int((j.get('member_hwm_after_kb') or 0) / 1024)} MB after; rows/bytes member vs joiner {j.get('counts')}",
    ]
