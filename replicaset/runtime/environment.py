"""What a member reaches outside itself: the network, worker threads, the date, chance.

Theory of operation. The hosts (node, sessions, writer, relays, appliers, quorum, SWIM,
GC, anti-entropy, transfer) are written once, against these narrow interfaces, and never
open a socket, start a thread or read the machine's clock themselves. The server gives them
the machine's (`MACHINE`): TCP, UDP, worker threads, `time.time_ns`. The simulator
(`replicaset/testing/sim_world.py`) gives them simulated ones and runs the very same hosts:
links in memory that it can cut, datagrams it can drop, every blocking call made inline
so that nothing runs outside trio's scheduler, and a date that follows trio's clock, which
`trio.testing.MockClock` moves. Durations are trio's clock everywhere
(`trio.current_time`, `trio.sleep`), so they need nothing here.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import trio

from replicaset.runtime.clock import SYSTEM_CLOCK, WallClock
from replicaset.runtime.sync_thread import SyncThread

T = TypeVar("T")


class Datagrams(Protocol):
    """A datagram endpoint (SWIM's): sends are fire and forget, as UDP's are."""

    def bind(self, host: str, port: int) -> None: ...

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        """May raise `OSError`; the caller counts that as a lost datagram."""
        ...

    async def recvfrom(self, size: int) -> tuple[bytes, tuple[str, int]]: ...

    def close(self) -> None: ...


class Network(Protocol):
    async def connect(self, host: str, port: int) -> trio.abc.Stream: ...

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], tuple[str, int]]:
        """Listeners bound at `host:port` (port 0: any free one), and the address bound.
        Raises `OSError` when it cannot be bound."""
        ...

    def datagrams(self) -> Datagrams: ...


class SerialWorker(Protocol):
    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` off the event loop, one call at a time in the order asked, never
        abandoned once asked (a caller cancelled meanwhile still waits for it)."""
        ...


class Workers(Protocol):
    """Where blocking calls run: off the event loop on the machine, inline in the simulator."""

    inline: bool  # calls run in trio's thread: a call back into trio is a plain call

    def serial(self, name: str) -> SerialWorker: ...

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T: ...


class TcpNetwork:
    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], tuple[str, int]]:
        listeners = await trio.open_tcp_listeners(port, host=host)
        bound = listeners[0].socket.getsockname()
        return list(listeners), (bound[0], bound[1])

    def datagrams(self) -> Datagrams:
        return UdpDatagrams()


class UdpDatagrams:
    def __init__(self) -> None:
        # Sends go straight to the non-blocking socket (a full buffer drops the datagram,
        # as the network may); receives wait in trio.
        self._raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._raw.setblocking(False)
        self._sock = trio.socket.from_stdlib_socket(self._raw)

    def bind(self, host: str, port: int) -> None:
        self._raw.bind((host, port))

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        self._raw.sendto(data, address)

    async def recvfrom(self, size: int) -> tuple[bytes, tuple[str, int]]:
        data, origin = await self._sock.recvfrom(size)
        return data, (origin[0], origin[1])

    def close(self) -> None:
        self._sock.close()


class ThreadWorkers:
    inline = False

    def serial(self, name: str) -> SerialWorker:
        return SyncThread(name)

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(fn, *args)


TCP = TcpNetwork()
THREADS = ThreadWorkers()


@dataclass(frozen=True)
class Environment:
    network: Network = TCP
    workers: Workers = THREADS
    clock: WallClock = SYSTEM_CLOCK
    # Chance (SWIM's choice of whom to ping): `None` seeds from the machine, a simulation
    # gives each member its own seed so that a run replays.
    seed: int | None = None

    def random(self) -> random.Random:
        return random.Random(self.seed)


MACHINE = Environment()
