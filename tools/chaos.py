"""Jepsen-style fault harness: `python tools/chaos.py [--seed N] [--members 3] [--seconds 60] ...`.

Starts real members on 127.0.0.1, every peer link through a fault-injecting proxy, runs the
bank, set and register workloads while a seeded schedule of faults plays, heals, waits for
convergence, checks the history and the tables, runs the Spark audit over the WALs, and
prints a one-line verdict; the JSON report goes to `--report` (and `DIR/report.json` of a
kept run). The seed is printed first: the same seed replays the same schedule
(`--print-schedule` shows it without running). Exit code 0 on PASS, 1 on FAIL, 2 when the
run could not be carried out.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replicaset.testing.chaos.run import RunOptions, run  # noqa: E402
from replicaset.testing.chaos.schedule import DEFAULT_KINDS, KINDS, make_schedule  # noqa: E402
from replicaset.testing.chaos.workloads import WORKLOADS  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="sets every fault and every workload choice (default: random)")
    parser.add_argument("--members", type=int, default=3, choices=(3, 5))
    parser.add_argument("--seconds", type=float, default=60.0, help="how long faults are injected (default 60)")
    parser.add_argument("--workloads", default="bank,set,registers", help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--workers", type=int, default=2, help="client threads per workload (default 2)")
    parser.add_argument("--faults", default=",".join(DEFAULT_KINDS),
                        help=f"comma-separated kinds, of {','.join(KINDS)} (default: all but full-disk)")
    parser.add_argument("--target", default="ours", choices=("ours", "tarantool", "tarantool-sync"),
                        help="our members (default), or Tarantool 2.6 async or synchronous for the bank and set "
                             "workloads under process and link faults")
    parser.add_argument("--converge-timeout", type=float, default=60.0)
    parser.add_argument("--no-audit", action="store_true", help="skip the Spark audit of the members' WALs")
    parser.add_argument("--dir", type=Path, help="where the members' data directories go (default /tmp/chaos-SEED-TIME)")
    parser.add_argument("--keep", action="store_true", help="keep the data directories of a passing run too")
    parser.add_argument("--report", type=Path, help="write the JSON report here as well")
    parser.add_argument("--print-schedule", action="store_true", help="print the seed's schedule and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    options = RunOptions(
        seed=seed, size=args.members, duration_s=args.seconds,
        workloads=tuple(w for w in args.workloads.split(",") if w),
        workers_each=args.workers, kinds=tuple(k for k in args.faults.split(",") if k),
        converge_timeout_s=args.converge_timeout, audit=not args.no_audit, keep=args.keep, target=args.target,
        root=args.dir or Path("/tmp") / f"chaos-{seed}-{int(time.time())}",
    )
    unknown = [w for w in options.workloads if w not in WORKLOADS]
    if unknown:
        print(f"chaos: unknown workloads {unknown}", file=sys.stderr)
        return 2
    if args.print_schedule:
        try:
            schedule = make_schedule(seed, options.schedule_options())
        except ValueError as exc:
            print(f"chaos: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"seed": seed, "schedule": [f.describe() for f in schedule]}, indent=2))
        return 0
    print(f"chaos: seed {seed}", flush=True)
    try:
        report = run(options, out=sys.stdout)
    except (RuntimeError, ValueError, OSError) as exc:
        print(f"chaos: the run could not be carried out (seed {seed}): {exc}", file=sys.stderr)
        return 2
    if args.report:
        args.report.write_text(json.dumps(report, indent=2, default=str))
    return 1 if report["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
