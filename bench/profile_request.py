#!/usr/bin/env python3
"""Where our server's CPU goes on the single-row write, by module and by function.

    /work/main/.venv/bin/python bench/profile_request.py [--seconds N] [--conns C] [--rate HZ]

Issue "The fast path, compiled" asks for a profile of the whole request at 16 connections
before anything is compiled. This starts our server as `bench_single.py` does (one instance,
`wal_mode = "write"`, consistency ONE), drives `INSERT OR REPLACE INTO kv(k, v) VALUES (?, ?)`
through the PyPI `tarantool` connector with C connections, and samples the server with
py-spy (`--nonblocking`: the server is never paused) while the load runs. py-spy is a
bench tool, not a dependency of the server: `pip install -e '.[profile]'`.

Each sample is charged to the innermost frame of our code (`replicaset/`, `wal/`) on its
stack, so a module's share holds the libraries it calls (apsw, msgpack, structlog, trio's
socket calls) down to the next frame of ours; `cli.py:_serve` is where trio.run sits, so
its share is trio's scheduler. Samples with no frame of ours are trio's loop and epoll,
and stacks py-spy read cut short (it reads a running process: mostly socket sends and
receives, whose callers it missed). A third table charges each sample to the package of the
frame on top of the stack instead (C code shows as the Python frame that called it).
Shares are of CPU samples (py-spy leaves idle threads out).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.kit.client import SQL_CREATE  # noqa: E402
from bench.kit.procs import pin_children_to_this_checkout  # noqa: E402
from bench.kit.report import fmt_int, header_lines, load_average, progress, run_facts  # noqa: E402
from bench.scenarios.single_writes import SQL_INSERT, execute_once, run_load, server_us_per_op, start_ours  # noqa: E402

OURS = re.compile(r"\((?:.*/)?((?:replicaset|wal)/[\w/]+\.py):\d+\)$")
FRAME = re.compile(r"^(.*) \((.*):(\d+)\)$")
TOP_ROWS = 15
WARMUP_S = 2.0
SPY_START_S = 1.0  # py-spy attaches before the measured window begins


def package_of(frame: str) -> str:
    """Where a frame's code lives: ours, or the package (or standard module) it is in."""
    match = FRAME.match(frame)
    path = match.group(2) if match else frame
    ours = OURS.search(frame)
    if ours is not None:
        return "ours"
    if "site-packages/" in path:  # py-spy shortens most paths to the package's own
        path = path.split("site-packages/", 1)[1]
    head, sep, _ = path.partition("/")
    return head if sep else Path(path).stem


def charge(raw: Path) -> tuple[collections.Counter[str], collections.Counter[str], collections.Counter[str], int]:
    """Samples by module and by function of ours, by the package of the frame on top of the
    stack, and the total, from py-spy's raw output (a line per distinct stack: frames root
    first, joined by ';', then the count)."""
    modules: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaves[package_of(frames[-1])] += count
        for frame in reversed(frames):
            match = OURS.search(frame)
            if match is not None:
                name = FRAME.match(frame)
                modules[match.group(1)] += count
                functions[f"{match.group(1)}:{name.group(1) if name else frame}"] += count
                break
        else:
            modules["(no frame of ours: trio's loop and epoll, socket calls, stacks cut short)"] += count
    return modules, functions, leaves, total


def table(title: str, counts: collections.Counter[str], total: int) -> list[str]:
    out = [title, f"  {'share':>6}  {'samples':>8}  where"]
    for name, count in counts.most_common(TOP_ROWS):
        out.append(f"  {count / total:>6.1%}  {count:>8}  {name}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--client-procs", type=int, default=2)
    args = parser.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed: pip install -e '.[profile]'", file=sys.stderr)
        return 2
    pin_children_to_this_checkout()
    facts = run_facts()
    work = Path(tempfile.mkdtemp(prefix="profile-request-"))
    server = None
    try:
        server = start_ours(work)
        assert server.port is not None
        execute_once(server.port, SQL_CREATE)
        execute_once(server.port, SQL_INSERT, [0, "x"])
        raw = work / "spy.txt"
        progress(f"py-spy on pid {server.pid} at {args.rate} Hz; {args.conns} connections, "
                 f"{WARMUP_S:.0f} s warm-up + {args.seconds:.0f} s")
        sampler = subprocess.Popen(
            [spy, "record", "--pid", str(server.pid), "--nonblocking", "--rate", str(args.rate), "--format", "raw",
             "--duration", str(int(WARMUP_S - SPY_START_S + args.seconds)), "--output", str(raw)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        run: dict[str, Any] = run_load(server, args.conns, WARMUP_S, args.seconds, args.client_procs, seed=1)
        _, spy_err = sampler.communicate(timeout=args.seconds + 60)
        if sampler.returncode != 0 or not raw.exists():
            print(f"py-spy failed ({sampler.returncode}): {spy_err.decode()[-500:]}", file=sys.stderr)
            return 1
        modules, functions, leaves, total = charge(raw)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    lines = header_lines("profile_request", facts)
    lines.append(f"load average at start {load_average()}")
    lines.append(f"{SQL_INSERT} at ONE, {args.conns} connections ({args.client_procs} client processes): "
                 f"{fmt_int(run['ops_per_s'])} ops/s, server CPU {run['server_cpu']:.2f} of a core, "
                 f"{server_us_per_op(run):.0f} us/op; {total} CPU samples at {args.rate} Hz")
    lines += table("by module (innermost frame of ours)", modules, total)
    lines += table("by function", functions, total)
    lines += table("by the code on top of the stack (ours: Python of ours running; a package: its Python)",
                   leaves, total)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
