"""Benchmark of the Spark WAL-merge audit (docs/audit.md).

    .venv/bin/python bench/bench_audit.py --rows 10000000 [--dir DIR] [--keep] [--scaling]

Generates a clean three-member WAL set with tools/gen_walset.py (64 MiB segments), then measures
on local[2]: the single-process Python baseline (the `wal` reader plus msgpack decode of every
payload), JVM/session start, the scan alone (read and decode every row: `count()` of the data
source), the full audit (checks 1-4, timeline, delay; JVM start excluded), and peak RSS of the
driver JVM (which runs the executor in local mode) and the Python workers, sampled from /proc.
With `--scaling`, also the audit on a standalone master with two one-core workers, with one
executor core and with two (the issue asks for at least 1.6x). The measurements are
`bench.scenarios.audit`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import gen_walset  # noqa: E402

from bench.scenarios import audit  # noqa: E402
from wal.segment import list_segments  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--segment-bytes", type=int, default=64 << 20)
    parser.add_argument("--scaling", action="store_true",
                        help="also time the audit on a standalone master with 1 and 2 executor cores")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-audit-"))
    results: dict[str, Any] = {"rows_requested": args.rows}
    try:
        if not (root / "manifest.json").exists():
            t = time.monotonic()
            manifest = gen_walset.generate(root, rows=args.rows, segment_bytes=args.segment_bytes)
            (root / "manifest.json").write_text(json.dumps(manifest))
            results["generate_s"] = round(time.monotonic() - t, 1)
        manifest = json.loads((root / "manifest.json").read_text())
        results["rows_in_set"] = manifest["rows"]
        dirs = [Path(p) for p in manifest["members"].values()]
        results["wal_bytes"] = sum(p.stat().st_size for d in dirs for p in list_segments(d / "wal"))
        results["segments"] = sum(len(list_segments(d / "wal")) for d in dirs)
        audit.measure(dirs, results)
        if args.scaling:
            audit.measure_scaling(dirs, results, root / "spark-standalone")
        print(json.dumps(results, indent=2))
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
