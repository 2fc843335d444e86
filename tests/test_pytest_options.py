"""The suite's own pytest options do what the tests rely on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
RUN_TIMEOUT_S = 60

A_THREAD_THAT_DIES = '''
import threading

def test_a_client_thread_dies():
    def client():
        raise ConnectionError("the server refused the write")
    thread = threading.Thread(target=client)
    thread.start()
    thread.join(5)
'''


def test_an_exception_that_ends_a_thread_fails_the_test(tmp_path: Path) -> None:
    """Load tests run their clients in threads; by default pytest only warns when one dies,
    and a load that stopped at its first refused write passed."""
    (tmp_path / "test_inner.py").write_text(A_THREAD_THAT_DIES)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "-q", str(tmp_path / "test_inner.py")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed" in run.stdout and "the server refused the write" in run.stdout
