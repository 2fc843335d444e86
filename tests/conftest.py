"""Every test's time limit (`[tool.pytest.ini_options] timeout`, pytest-timeout), stopped so
that the rest of the suite still runs and still cleans up.

pytest-timeout's `signal` method fails the test where it stands (SIGALRM raises in the main
thread): the test's fixtures then stop the servers it started and the session goes on. Two
cases need more, and this hook adds them:
- A test inside `trio.run`: the exception raised in the middle of trio's event loop leaves
  the run abandoned and still current (every later `trio.run` of the session fails with
  "Attempted to call run() from inside a run()"), and its garbage broke pytest's report
  (SystemError from `ast.parse`). So while a trio run is active the alarm goes to trio as a
  KeyboardInterrupt, the way trio itself takes Ctrl-C: the run cancels its tasks and ends,
  and the test fails with pytest-timeout's message.
- A test the signal cannot stop (blocked in C code that never returns to Python, or trio
  waiting for a thread that cannot be cancelled): `GRACE_S` after the limit, pytest-timeout's
  `thread` method dumps every thread's stack and ends the session (`os._exit(1)`).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest
import pytest_timeout
import trio

GRACE_S = 30.0  # past the limit, a test the alarm did not stop ends the session
# `make test-deep`'s long variants: above TLC's six hours for a deep configuration.
DEEP_TIMEOUT_S = 8 * 3600
TIMED_OUT = pytest.StashKey[float]()  # the limit a test inside trio.run was stopped at
JVM_GROUP = "jvm"
JVM_TESTS = ("tests/specs/", "tests/audit/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A deep test without a limit of its own gets the deep one, not the suite's default nor
    its module's (the TLC modules' limits are for their small configurations)."""
    for item in items:
        if item.get_closest_marker("deep") and not any(mark.name == "timeout" for mark in item.own_markers):
            item.add_marker(pytest.mark.timeout(DEEP_TIMEOUT_S))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The tests run on two pytest-xdist workers (`-n 2`). The ones that run a JVM (TLC;
    Spark in process or spark-submit on a standalone cluster) are one unit of work, sent
    first to one worker and run there one after another: each takes both cores, and beside
    another JVM it would only wait for them. The other worker meanwhile takes the rest one
    test at a time: the servers' and the cores' tests, which mostly wait on sockets and
    timers. (xdist's own `loadgroup` cannot do it under pytest 9: it renames items through
    a field pytest 9 no longer has.)"""
    from xdist.scheduler import LoadScopeScheduling

    class JvmApart(LoadScopeScheduling):  # the largest unit goes out first
        def _split_scope(self, nodeid: str) -> str:
            return JVM_GROUP if nodeid.startswith(JVM_TESTS) else nodeid

    return JvmApart(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own timer

    def alarm(signum: int, frame: Any) -> None:
        __tracebackhide__ = True
        if trio.lowlevel.in_trio_run():
            item.stash[TIMED_OUT] = settings.timeout
            signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)  # trio's KeyboardInterrupt handler
        else:
            pytest_timeout.timeout_sigalrm(item, settings)

    last_resort = threading.Timer(settings.timeout + GRACE_S, pytest_timeout.timeout_timer, (item, settings))
    last_resort.name = f"timeout of {item.nodeid}"
    last_resort.daemon = True

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        last_resort.cancel()

    item.cancel_timeout = cancel  # what pytest-timeout's pytest_timeout_cancel_timer calls
    signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    last_resort.start()
    return True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """The KeyboardInterrupt our alarm had trio raise (alone, or in the exception group of a
    nursery) is the test's timeout, not the user's Ctrl-C, which stops the whole session."""
    try:
        return (yield)
    except (KeyboardInterrupt, BaseExceptionGroup) as exc:
        interrupted = isinstance(exc, KeyboardInterrupt) or exc.subgroup(KeyboardInterrupt) is not None
        if TIMED_OUT not in item.stash or not interrupted:
            raise
        pytest.fail(pytest_timeout.PYTEST_FAILURE_MESSAGE % item.stash[TIMED_OUT])
