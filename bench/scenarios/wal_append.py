"""`wal.Wal.append` rows/s per wal_mode (write, fsync) at 1, 16 and 256 records of ~100 bytes
per append, each held against the disk's group-commit limit (fsyncs/s x group size, from
`bench.kit.limits`): how close the WAL comes to what the disk allows."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.kit.report import fmt_int, fmt_ratio, progress, ratio

WAL_MODES = ("write", "fsync")
WAL_GROUP_SIZES = (1, 16, 256)
WAL_PAYLOAD_BYTES = 100
MAX_WAL_APPENDS = 10_000_000


def wal_payload() -> bytes:
    """A ~100-byte msgpack document shaped like a replicated row."""
    import msgpack

    base = {"op": "replace", "table": "kv", "row": [12345, ""]}
    filler = WAL_PAYLOAD_BYTES - len(msgpack.packb(base))
    base["row"][1] = "v" * max(0, filler - 1)
    payload = msgpack.packb(base)
    # A str header grows by a byte past 31 chars; trim to land on the target.
    while len(payload) > WAL_PAYLOAD_BYTES and base["row"][1]:
        base["row"][1] = base["row"][1][:-1]
        payload = msgpack.packb(base)
    return payload


def measure_wal(directory: Path, mode: str, group: int, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Append `group` records per call to a new WAL in `directory` for `seconds` after `warmup_s`."""
    from wal import Record, RecordType, Wal, WalMode

    payload = wal_payload()
    wal_dir = Path(tempfile.mkdtemp(prefix=f"wal_{mode}_{group}_", dir=directory))
    try:
        wal = Wal.open(wal_dir, mode=WalMode(mode))
        try:
            lsn = 0
            start = time.monotonic_ns()
            measure_from = start + int(warmup_s * 1e9)
            deadline = measure_from + int(seconds * 1e9)
            rows = appends = 0
            first = last = None
            for _ in range(MAX_WAL_APPENDS):
                t0 = time.monotonic_ns()
                if t0 >= deadline:
                    break
                batch = [
                    Record(type=RecordType.DML, origin=1, lsn=n, txn_id=n, payload=payload)
                    for n in range(lsn + 1, lsn + group + 1)
                ]
                wal.append(batch)
                lsn += group
                t1 = time.monotonic_ns()
                if t0 >= measure_from:
                    if first is None:
                        first = t0
                    last = t1
                    rows += group
                    appends += 1
            segments = len(wal.segments())
        finally:
            wal.close()
    finally:
        shutil.rmtree(wal_dir, ignore_errors=True)
    elapsed_s = (last - first) / 1e9 if first is not None and last is not None and last > first else None
    return {
        "mode": mode,
        "group": group,
        "rows_per_s": rows / elapsed_s if elapsed_s else None,
        "appends_per_s": appends / elapsed_s if elapsed_s else None,
        "segments": segments,
        "payload_bytes": len(payload),
    }


def run(work: Path, seconds: float, warmup_s: float) -> list[dict[str, Any]]:
    """Every mode at every group size, one after the other."""
    results = []
    for mode in WAL_MODES:
        for group in WAL_GROUP_SIZES:
            progress(f"WAL append mode={mode} group={group}")
            results.append(measure_wal(work, mode, group, seconds, warmup_s))
    return results


def report_lines(wal: list[dict[str, Any]], fsyncs_per_s: float | None) -> list[str]:
    """The WAL table, each figure as a fraction of fsyncs/s x group."""
    out = [f"WAL append (wal package, {wal[0]['payload_bytes'] if wal else '?'} B payload), "
           "limit = fsyncs/s x group",
           f"  {'mode':<6} {'group':>5} {'rows/s':>11} {'appends/s':>10} {'limit rows/s':>13} {'of limit':>9}"]
    for w in wal:
        limit = fsyncs_per_s * w["group"] if fsyncs_per_s else None
        out.append(f"  {w['mode']:<6} {w['group']:>5} {fmt_int(w['rows_per_s']):>11} {fmt_int(w['appends_per_s']):>10} "
                   f"{fmt_int(limit):>13} {fmt_ratio(ratio(w['rows_per_s'], limit)):>9}")
    out.append("  (write mode never fsyncs: its 'of limit' above 1x is how far it runs past the durable limit)")
    return out
