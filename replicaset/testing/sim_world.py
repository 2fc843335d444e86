"""A simulated world in which the runtime's own hosts run: links in memory, datagrams,
inline workers, and a date that follows trio's clock.

Theory of operation. A member is built as the server builds it (`Node` served by
`runtime.server.serve`), with an `Environment` whose network, workers and clock are this
module's: so the node, its sessions, writer, relays, appliers, quorum host, SWIM, GC,
anti-entropy and join code are the ones that run in production, not a model of them.
Under `trio.testing.MockClock` with `autojump_threshold=0`, time moves only when every
task waits, straight to the next deadline: a second of timeouts costs no second of the
test, and since every blocking call (SQLite, fsync, RocksDB) runs inline, nothing happens
outside trio's scheduler while the clock stands still. `seed_scheduler` fixes the order
in which trio runs tasks that are ready together, so a seed replays the same run.

The network is a set of hosts by address. A connection is a pair of in-memory byte pipes
that deliver in order after a latency drawn from the world's random generator; `cut`
breaks the links between two hosts (each end's next read or write fails as a reset TCP
connection's does) and refuses new ones until `heal`; datagrams between cut hosts are
lost, as a share `loss` of all datagrams is.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from replicaset.runtime.environment import SerialWorker

T = TypeVar("T")
# 2026-01-01 00:00 UTC: the date when trio's clock reads 0.
EPOCH_NS = 1_767_225_600 * 1_000_000_000


def seed_scheduler(seed: int) -> None:
    """Make trio's scheduling follow `seed`, for runs that replay step for step. Two choices
    of trio's are not public API: the order of tasks ready at once, drawn from one
    module-level generator (seeded here), and the order of cancel scopes whose deadlines
    are equal, which trio breaks by `id()`, a memory address (broken here by the order the
    deadlines were set in). A run that is not replayed is still a valid run: if trio moves
    them, only replay is lost."""
    from trio._core import _run

    generator = getattr(_run, "_r", None)
    if isinstance(generator, random.Random):
        generator.seed(seed)
    deadlines = getattr(_run, "Deadlines", None)
    if deadlines is not None and getattr(deadlines.add, "__name__", "") != "_add_in_order":
        order = itertools.count()

        def _add_in_order(self: Any, deadline: float, cancel_scope: Any) -> None:
            heapq.heappush(self._heap, (deadline, next(order), cancel_scope))
            self._active += 1

        deadlines.add = _add_in_order


class SimClock:
    """The date: `EPOCH_NS` plus trio's clock, which the MockClock moves."""

    def now_ns(self) -> int:
        return EPOCH_NS + int(trio.current_time() * 1e9)


class InlineWorkers:
    """Every blocking call made at once in trio's thread: nothing runs beside the scheduler."""

    inline = True

    def serial(self, name: str) -> SerialWorker:
        return self

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        result = fn(*args)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return result


@dataclass
class _Pipe:
    """One direction of a connection: bytes with the time each may be read."""

    chunks: deque[tuple[float, bytes]] = field(default_factory=deque)
    last_at: float = 0.0
    eof: bool = False
    broken: bool = False
    changed: trio.Event = field(default_factory=trio.Event)

    def wake(self) -> None:
        self.changed.set()
        self.changed = trio.Event()


class SimStream(trio.abc.Stream):
    def __init__(self, network: SimNetwork, hosts: frozenset[str], incoming: _Pipe, outgoing: _Pipe) -> None:
        self._network = network
        self.hosts = hosts
        self._in = incoming
        self._out = outgoing
        self._closed = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the stream was closed")
        if self._out.broken or self._out.eof:
            raise trio.BrokenResourceError("connection reset by peer")
        if data:
            at = max(self._out.last_at, trio.current_time() + self._network.latency())
            self._out.last_at = at
            self._out.chunks.append((at, bytes(data)))
            self._out.wake()
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the stream was closed")
            if self._in.broken:
                raise trio.BrokenResourceError("connection reset by peer")
            if self._in.chunks:
                at, chunk = self._in.chunks[0]
                now = trio.current_time()
                if at <= now:
                    if max_bytes is not None and len(chunk) > max_bytes:
                        self._in.chunks[0] = (at, chunk[max_bytes:])
                        chunk = chunk[:max_bytes]
                    else:
                        self._in.chunks.popleft()
                    await trio.lowlevel.checkpoint()
                    return chunk
                with trio.move_on_at(at):
                    await self._in.changed.wait()
                continue
            if self._in.eof:
                await trio.lowlevel.checkpoint()
                return b""
            await self._in.changed.wait()

    async def aclose(self) -> None:
        if not self._closed:  # the peer reads what was sent, then the end; its writes fail
            self._closed = True
            for pipe in (self._in, self._out):
                pipe.eof = True
                pipe.wake()
        await trio.lowlevel.checkpoint()

    def reset(self) -> None:
        """The link is gone (a cut): both ends fail at their next read or write."""
        for pipe in (self._in, self._out):
            pipe.broken = True
            pipe.wake()


class SimListener(trio.abc.Listener[SimStream]):
    def __init__(self, network: SimNetwork, address: tuple[str, int]) -> None:
        self._network = network
        self.address = address
        self._send, self._receive = trio.open_memory_channel[SimStream](math.inf)

    def offer(self, stream: SimStream) -> None:
        self._send.send_nowait(stream)

    async def accept(self) -> SimStream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as exc:
            raise trio.ClosedResourceError("the listener was closed") from exc

    async def aclose(self) -> None:
        self._network.unlisten(self)
        self._receive.close()
        await trio.lowlevel.checkpoint()


class SimDatagrams:
    def __init__(self, network: SimNetwork, host: str) -> None:
        self._network = network
        self._host = host
        self._address: tuple[str, int] | None = None
        self._send, self._receive = trio.open_memory_channel[tuple[bytes, tuple[str, int]]](math.inf)

    def bind(self, host: str, port: int) -> None:
        self._address = (host, port)
        self._network.bind_datagrams(self._address, self._send)

    def sendto(self, data: bytes, address: tuple[str, int]) -> None:
        if self._address is not None:
            self._network.deliver_datagram(self._address, address, data)

    async def recvfrom(self, size: int) -> tuple[bytes, tuple[str, int]]:
        data, origin = await self._receive.receive()
        return data[:size], origin

    def close(self) -> None:
        if self._address is not None:
            self._network.unbind_datagrams(self._address)
        self._receive.close()


class HostNetwork:
    """The network as one host sees it: what it dials comes from its address."""

    def __init__(self, network: SimNetwork, host: str) -> None:
        self._network = network
        self.host = host

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        return self._network.connect(self.host, (host, port))

    async def listen(self, host: str, port: int) -> tuple[list[trio.abc.Listener[Any]], tuple[str, int]]:
        await trio.lowlevel.checkpoint()
        listener = self._network.listen((host, port))
        return [listener], listener.address

    def datagrams(self) -> SimDatagrams:
        return SimDatagrams(self._network, self.host)


class SimNetwork:
    def __init__(self, rng: random.Random, *, latency_s: tuple[float, float] = (0.0001, 0.0005),
                 loss: float = 0.0) -> None:
        self._rng = rng
        self.latency_s = latency_s  # a new range applies to what is sent from then on
        self.loss = loss
        self._listeners: dict[tuple[str, int], SimListener] = {}
        self._datagrams: dict[tuple[str, int], trio.MemorySendChannel[tuple[bytes, tuple[str, int]]]] = {}
        self._cuts: set[frozenset[str]] = set()
        self._links: list[tuple[SimStream, SimStream]] = []
        self.datagrams_lost = 0

    def at(self, host: str) -> HostNetwork:
        return HostNetwork(self, host)

    def latency(self) -> float:
        low, high = self.latency_s
        return self._rng.uniform(low, high)

    def listen(self, address: tuple[str, int]) -> SimListener:
        if address in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {address[0]}:{address[1]}")
        listener = SimListener(self, address)
        self._listeners[address] = listener
        return listener

    def unlisten(self, listener: SimListener) -> None:
        if self._listeners.get(listener.address) is listener:
            del self._listeners[listener.address]

    def connect(self, source: str, address: tuple[str, int]) -> SimStream:
        listener = self._listeners.get(address)
        hosts = frozenset((source, address[0]))
        if listener is None or hosts in self._cuts:
            raise OSError(errno.ECONNREFUSED, f"connection refused: {address[0]}:{address[1]}")
        there, back = _Pipe(), _Pipe()
        near, far = SimStream(self, hosts, back, there), SimStream(self, hosts, there, back)
        self._links = [link for link in self._links if not (link[0]._in.eof and link[0]._out.eof)]
        self._links.append((near, far))
        listener.offer(far)
        return near

    def cut(self, first: str, second: str) -> None:
        """No traffic between the two hosts until `heal`: their links reset now."""
        hosts = frozenset((first, second))
        self._cuts.add(hosts)
        for near, far in self._links:
            if near.hosts == hosts:
                near.reset()
                far.reset()

    def heal(self, first: str, second: str) -> None:
        self._cuts.discard(frozenset((first, second)))

    def isolate(self, host: str) -> list[str]:
        """Cut `host` from every host it has a link with or that listens; the hosts cut."""
        others = sorted({h for link in self._links for h in link[0].hosts} | {a[0] for a in self._listeners}
                        - {host})
        for other in others:
            self.cut(host, other)
        return others

    def bind_datagrams(self, address: tuple[str, int],
                       channel: trio.MemorySendChannel[tuple[bytes, tuple[str, int]]]) -> None:
        if address in self._datagrams:
            raise OSError(errno.EADDRINUSE, f"address already in use: {address[0]}:{address[1]}")
        self._datagrams[address] = channel

    def unbind_datagrams(self, address: tuple[str, int]) -> None:
        self._datagrams.pop(address, None)

    def deliver_datagram(self, source: tuple[str, int], target: tuple[str, int], data: bytes) -> None:
        channel = self._datagrams.get(target)
        if channel is None or frozenset((source[0], target[0])) in self._cuts or self._rng.random() < self.loss:
            self.datagrams_lost += 1
            return
        try:
            channel.send_nowait((data, source))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.datagrams_lost += 1
