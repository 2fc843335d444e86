"""The atheris harness (tools/fuzz_atheris.py) runs each target without a crash.

atheris is optional, so this skips where it does not import; marked `deep` because a
useful run takes minutes. A crash makes libFuzzer exit non-zero and leave the input as
`crash-*` in the test's directory, which the failure names.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = 200_000
TARGETS = ["frames", "peer", "binds", "wal", "segment", "swim"]


@pytest.mark.deep
@pytest.mark.parametrize("target", TARGETS)
def test_atheris_target_runs_without_a_crash(target: str, tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "fuzz_atheris.py"), target, f"-runs={RUNS}"],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        timeout=1800,
    )
    crashes = sorted(p.name for p in tmp_path.glob("crash-*"))
    assert done.returncode == 0 and not crashes, f"{crashes}\n{done.stderr[-3000:]}"
