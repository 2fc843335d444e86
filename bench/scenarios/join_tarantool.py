"""Initial join of Tarantool 2.6, the reference for `join_ours`: a master filled with as many
MB of random text values (in Lua, on the master), `box.snapshot()`, then a replica started with
`replication = {master}` is timed from process start until it is running with the master's
vclock. MB/s = the .snap file (zstd-compressed) / seconds; the replica's peak RSS is its
VmHWM, polled while it joins."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from bench.kit.client import SQL_CREATE, connect
from bench.kit.procfs import RssWatch, read_status_kb
from bench.kit.procs import HOST, Proc
from bench.kit.report import MIB, fmt_int, progress
from bench.kit.sets import START_TIMEOUT_S, TARANTOOL_MEMTX_BYTES, norm_vclock
from bench.kit.tarantool import spawn_tarantool, wait_ready
from bench.scenarios.join_ours import JOIN_VALUE_BYTES, RSS_POLL_INTERVAL_S
from replicaset.testing.processes import free_port

TARANTOOL_MASTER_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    wal_mode = 'write',
    memtx_memory = {memtx},
    work_dir = '{work_dir}',
}}
box.schema.user.grant('guest', 'super', nil, nil, {{if_not_exists = true}})
box.execute([[{create}]])
require('log').info('BENCH_READY')
"""

TARANTOOL_REPLICA_INIT = """
box.cfg{{
    listen = '{host}:{port}',
    replication = {{'{master}'}},
    wal_mode = 'write',
    read_only = false,
    memtx_memory = {memtx},
    work_dir = '{work_dir}',
}}
require('log').info('BENCH_READY')
"""

TARANTOOL_FILL = """
local first, count, size = ...
local digest = require('digest')
local space = box.space.KV
box.begin()
for i = first, first + count - 1 do
    space:replace{i, digest.base64_encode(digest.urandom(size * 3 / 4), {nowrap = true}):sub(1, size)}
    if (i - first) % 128 == 127 then box.commit() box.begin() end
end
box.commit()
return space:len()
"""


def run(work: Path, binary: str, join_mb: int) -> dict[str, Any]:
    """Fill, snapshot, join, measure, stop; the figures, or `failure` with what went wrong."""
    entry: dict[str, Any] = {"notes": []}
    root = work / "join_tarantool"
    root.mkdir()
    memtx = max(TARANTOOL_MEMTX_BYTES, int(join_mb * MIB * 1.6) + 256 * MIB)
    master: Proc | None = None
    replica: Proc | None = None
    watch: RssWatch | None = None
    try:
        port = free_port()
        progress("join (tarantool): starting a master")
        master = spawn_tarantool("tarantool master", binary, root / "master", TARANTOOL_MASTER_INIT, port=port,
                                 memtx=memtx, create=SQL_CREATE)
        wait_ready(master, START_TIMEOUT_S)
        rows_total = join_mb * MIB // JOIN_VALUE_BYTES
        t0 = time.monotonic()
        conn = connect(port, socket_timeout_s=600)
        try:
            chunk = 4096
            done = 0
            while done < rows_total:
                count = min(chunk, rows_total - done)
                conn.eval(TARANTOOL_FILL, done + 1, count, JOIN_VALUE_BYTES)
                done += count
                if (done // chunk) % 10 == 0 or done == rows_total:
                    progress(f"join (tarantool): filled {done * JOIN_VALUE_BYTES / MIB:.0f} / {join_mb} MB")
            entry["fill_s"] = time.monotonic() - t0
            entry["rows"] = done
            t1 = time.monotonic()
            conn.eval("box.snapshot()")
            entry["snapshot_s"] = time.monotonic() - t1
        finally:
            conn.close()
        snaps = sorted((root / "master").glob("*.snap"))
        entry["size_bytes"] = snaps[-1].stat().st_size if snaps else None
        entry["master_hwm_before_kb"] = read_status_kb(master.pid, "VmHWM")
        rport = free_port()
        timeout_s = max(180.0, join_mb / 2.0)
        progress(f"join (tarantool): starting the replica ({fmt_int(entry['size_bytes'])} B snapshot)")
        replica = spawn_tarantool("tarantool replica", binary, root / "replica", TARANTOOL_REPLICA_INIT, port=rport,
                                  master=f"{HOST}:{port}", memtx=memtx)
        watch = RssWatch(replica.pid, RSS_POLL_INTERVAL_S)
        done_ns = None
        answered_ns = None
        last_err = ""
        deadline = time.monotonic() + timeout_s
        mv: dict[int, int] = {}
        rv: dict[int, int] = {}
        while time.monotonic() < deadline:
            if replica.proc.poll() is not None:
                raise RuntimeError(f"the replica exited with {replica.proc.returncode}:\n{replica.tail()}")
            try:
                rc = connect(rport, socket_timeout_s=5)
                try:
                    status, raw = list(rc.eval("return box.info.status, box.info.vclock"))[:2]
                finally:
                    rc.close()
                if answered_ns is None:
                    answered_ns = time.monotonic_ns()
                mc = connect(port, socket_timeout_s=10)
                try:
                    mv = norm_vclock(list(mc.eval("return box.info.vclock"))[0])
                finally:
                    mc.close()
                rv = norm_vclock(raw)
                if status == "running" and rv == mv:
                    done_ns = time.monotonic_ns()
                    break
            except Exception as exc:  # noqa: BLE001 - not listening yet, or not granted yet
                last_err = f"{type(exc).__name__}: {exc}"
            time.sleep(RSS_POLL_INTERVAL_S)
        watch.stop()
        entry["joiner_hwm_kb"] = watch.hwm_kb
        entry["joiner_rss_peak_kb"] = watch.rss_peak_kb
        if done_ns is None:
            raise RuntimeError(f"the replica did not reach the master's vclock within {timeout_s:.0f} s "
                               f"(replica {rv}, master {mv}, last error {last_err!r}):\n{replica.tail()}")
        entry["seconds"] = (done_ns - replica.started_ns) / 1e9
        entry["answered_s"] = (answered_ns - replica.started_ns) / 1e9 if answered_ns else None
        entry["mb_per_s"] = entry["size_bytes"] / MIB / entry["seconds"] if entry["size_bytes"] else None
        entry["vclock"] = mv
        progress(f"join (tarantool): {fmt_int(entry['size_bytes'])} B in {entry['seconds']:.2f} s = "
                 f"{entry['mb_per_s']:.1f} MB/s, replica VmHWM {watch.hwm_kb / 1024:.1f} MB")
    except Exception as exc:  # noqa: BLE001
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        progress(f"join (tarantool): FAILED: {entry['failure']}")
    finally:
        if watch is not None:
            watch.stop()
        entry["exit_codes"] = [proc.stop() for proc in (replica, master) if proc is not None]
        shutil.rmtree(root, ignore_errors=True)
    return entry


def report_lines(j: dict[str, Any]) -> list[str]:
    """The lines of a join that finished: fill, .snap size, MB/s, the replica's memory."""
    return [
        f"  tarantool  fill {j.get('rows', 0):,} rows in {j.get('fill_s', 0):.1f} s, snapshot {j.get('snapshot_s', 0):.1f} s; "
        f".snap {fmt_int(j.get('size_bytes'))} B",
        f"             {j['seconds']:.2f} s = {j['mb_per_s']:.1f} MB/s of .snap file "
        f"({j['rows'] * JOIN_VALUE_BYTES / MIB / j['seconds']:.1f} MB/s of row data; the .snap is zstd-compressed); "
        f"answers +{j['answered_s']:.2f} s; replica VmHWM {j['joiner_hwm_kb'] / 1024:.1f} MB",
    ]


