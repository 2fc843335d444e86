"""Tarantool 2.6, the reference every figure is held against: found on this machine, started
from an init script the scenario writes, ready once that script logs `READY`. Without it the
Tarantool rows are skipped, not failed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.kit.procs import HOST, Proc

READY = "BENCH_READY"  # every init script ends with require('log').info('BENCH_READY')
INSTALL_HINT = "apt-get install -y tarantool"


def find_tarantool(explicit: str | None) -> str | None:
    """`explicit` when it is given and executable (None when it is not), else /usr/bin/tarantool
    or the first on PATH."""
    candidates = (explicit,) if explicit else ("/usr/bin/tarantool", shutil.which("tarantool"))
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def tarantool_version(binary: str) -> str:
    """The first line of `tarantool --version`, or the path when it does not say."""
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return binary


def spawn_tarantool(name: str, binary: str, work_dir: Path, init_template: str, **fields: Any) -> Proc:
    """Start Tarantool in a new `work_dir` with `init_template` formatted with `host`,
    `work_dir` and `fields`; the script and the log go next to the directory (`<dir>.lua`,
    `<dir>.log`). Returns at once: wait for `READY` with `wait_ready`."""
    work_dir.mkdir()
    init = work_dir.with_suffix(".lua")
    init.write_text(init_template.format(host=HOST, work_dir=work_dir, **fields))
    return Proc.spawn(name, [binary, str(init)], work_dir.with_suffix(".log"), cwd=work_dir)


def wait_ready(instance: Proc, timeout_s: float) -> None:
    instance.wait_for_line(lambda line: READY in line, timeout_s)
