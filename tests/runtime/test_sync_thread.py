"""The fsync thread: calls run one at a time in the order asked, off the event loop; a
result or an exception comes back to its caller; a cancelled caller still waits for the
call it started; an idle thread ends and the next call starts another."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing

from replicaset.runtime import sync_thread
from replicaset.runtime.sync_thread import SyncThread


def test_calls_run_in_order_off_the_loop_and_bring_back_their_result_or_error() -> None:
    thread = SyncThread("test sync")
    ran: list[tuple[int, str]] = []
    loop_thread = threading.current_thread().name

    def call(n: int) -> int:
        ran.append((n, threading.current_thread().name))
        time.sleep(0.001)
        return n * 10

    def fail() -> None:
        raise OSError("fsync failed")

    async def main() -> None:
        results: dict[int, int] = {}

        async def ask(n: int) -> None:
            results[n] = await thread.run_sync(call, n)

        async with trio.open_nursery() as nursery:
            for n in range(5):
                nursery.start_soon(ask, n)
                await trio.testing.wait_all_tasks_blocked()  # each queued before the next asks
        assert results == {n: n * 10 for n in range(5)}
        with pytest.raises(OSError, match="fsync failed"):
            await thread.run_sync(fail)

    trio.run(main)
    assert [n for n, _ in ran] == list(range(5))
    assert {name for _, name in ran} == {"test sync"} and loop_thread != "test sync"


def test_a_cancelled_caller_waits_for_the_call_it_started() -> None:
    thread = SyncThread("test sync")
    release = threading.Event()
    finished: list[str] = []

    async def main() -> None:
        with trio.move_on_after(0.01):
            await thread.run_sync(release.wait)
            finished.append("returned")
        finished.append("after the scope")

    def let_go() -> None:
        time.sleep(0.1)
        finished.append("released")
        release.set()

    threading.Thread(target=let_go).start()
    trio.run(main)
    assert finished == ["released", "returned", "after the scope"]


def test_an_idle_thread_ends_and_the_next_call_starts_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_thread, "IDLE_S", 0.01)
    thread = SyncThread("test sync")
    idents: list[int] = []

    async def main() -> None:
        idents.append(await thread.run_sync(threading.get_ident))
        deadline = time.monotonic() + 5
        while thread._running and time.monotonic() < deadline:
            await trio.sleep(0.01)
        assert not thread._running
        idents.append(await thread.run_sync(threading.get_ident))

    trio.run(main)
    assert len(idents) == 2
