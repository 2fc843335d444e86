"""The suite's own pytest options do what the tests rely on."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
CONFTEST = Path(__file__).resolve().parent / "conftest.py"
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


TESTS_THAT_NEVER_END = '''
import trio

def test_a_loop_that_never_ends():
    while True:
        pass

def test_a_trio_run_that_never_ends():
    async def main():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            await trio.sleep_forever()
    trio.run(main)

def test_a_trio_run_after_them():
    trio.run(trio.sleep, 0)

def test_a_test_after_them():
    pass
'''


def test_a_test_that_runs_forever_is_stopped_and_the_session_goes_on(tmp_path: Path) -> None:
    """A planted bug that made the simulator loop ran for minutes before anything stopped
    it. Every test has a time limit (`timeout`, pytest-timeout, here 2 s): one past it
    fails naming the limit, inside `trio.run` too, and the tests after it still run (a
    trio run abandoned by the timeout would fail every later `trio.run` of the session)."""
    (tmp_path / "test_inner.py").write_text(TESTS_THAT_NEVER_END)
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path), "-p", "no:cacheprovider",
         "-q", "-n", "0", "--timeout=2", str(tmp_path / "test_inner.py")],  # one process: the later runs in it
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 1, output
    assert "2 failed, 2 passed" in run.stdout, output
    assert run.stdout.count("Failed: Timeout (>2.0s) from pytest-timeout") >= 2, output
    assert "inside a run" not in output, output
