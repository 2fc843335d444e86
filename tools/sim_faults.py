"""Seeds of the fault schedule on the server's own hosts in the simulated world.

    .venv/bin/python tools/sim_faults.py --seeds 1-40 --seconds 20
    .venv/bin/python tools/sim_faults.py --seed 17 --log     # one seed again, with every log line

One line per seed as it ends (its faults, what was acknowledged, what it lost); every
failure named; exit code 1 if any seed failed. A seed replays step for step, so a failing
one is run again by its number (`replicaset/testing/sim_faults.py`, docs/design/cores.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from replicaset.testing.pagecache import PageCache, Patch
from replicaset.testing.sim_faults import failures, run_faults
from replicaset.testing.sim_set import simulate


def _seeds(text: str) -> range:
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--seeds", type=_seeds, default=range(1, 11), help="FIRST-LAST (default 1-10)")
    which.add_argument("--seed", type=_seeds, dest="seeds", help="one seed")
    parser.add_argument("--seconds", type=float, default=20.0, help="simulated seconds of faults per seed")
    parser.add_argument("--log", action="store_true", help="print every log line the members wrote")
    args = parser.parse_args()
    failed = 0
    for seed in args.seeds:
        started = time.monotonic()
        patch = Patch()
        cache = PageCache(patch)
        try:
            with tempfile.TemporaryDirectory(prefix=f"sim-faults-{seed}-") as root:
                run, logs = simulate(Path(root), seed, lambda rs, seed=seed: run_faults(rs, seed, seconds=args.seconds),
                                     lose_unsynced=cache.os_crash)
        finally:
            patch.undo()
        if args.log:
            for line in logs:
                print(json.dumps(line, default=str))
        found = failures(run, logs)
        failed += bool(found)
        print(f"seed {seed}: {'FAILED' if found else 'ok'} in {time.monotonic() - started:.1f} s; "
              f"faults {run.faults}; {len(run.acknowledged)} inserts acknowledged "
              f"({len(run.acknowledged_quorum)} at QUORUM), lost with a power loss {len(run.lost_in_os_crash)}, "
              f"on wiped disks {len(run.wiped)}; last-writer-wins model {'checked' if run.model_checked else 'not checked'}",
              flush=True)
        for line in found:
            print(f"  {line}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
