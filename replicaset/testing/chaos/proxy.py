"""Fault-injecting proxies between members: one per ordered pair, TCP and UDP on one port.

Theory of operation. Member `src` dials member `dst` at the proxy `(src, dst)` (its
`[cluster] dial` maps `dst`'s registered address there), for its TCP links and its SWIM
datagrams. The proxies run on one trio loop in a thread of their own; the harness changes
faults from its threads through `Network`, which hands each change to that loop.

Faults are kept per *flow*, a direction between two members: `(a, b)` is everything `a`
sends to `b`. A TCP connection made by `a` to `b` carries flow `(a, b)` client to server
and flow `(b, a)` server to client; a datagram through proxy `(a, b)` is flow `(a, b)`
(SWIM answers to the sender's registered address, so no datagram comes back through the
proxy it went in by).

- blocked: bytes of the flow stall (never dropped mid-stream: real TCP retransmits them,
  and a byte dropped here would corrupt the stream); a new connection whose either flow
  is blocked is held, unanswered, until both are open again (a handshake cannot complete
  through a cut); datagrams are dropped.
- delay_s: each chunk or datagram waits this long before it goes on.
- drop: this fraction of datagrams is lost; a TCP connection carrying the flow is reset
  with probability `drop * RESET_SHARE` at each chunk (a dropped segment is retransmitted
  by TCP, so loss shows as occasional resets, not as missing bytes).
- `reset(a, b)` closes every connection through proxy `(a, b)` at once, with RST.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

HOST = "127.0.0.1"
CHUNK_BYTES = 64 * 1024
DATAGRAM_MAX = 65_535
RESET_SHARE = 0.05
BIND_ATTEMPTS_MAX = 50
START_TIMEOUT_S = 10.0

T = TypeVar("T")


@dataclass(slots=True)
class Flow:
    """The faults on what one member sends to another."""

    blocked: bool = False
    delay_s: float = 0.0
    drop: float = 0.0


@dataclass(slots=True)
class ProxyStats:
    connections: int = 0
    held: int = 0  # connections that waited for a cut to heal before reaching their member
    resets: int = 0
    bytes_forward: int = 0  # src -> dst
    bytes_back: int = 0  # dst -> src
    datagrams: int = 0
    datagrams_dropped: int = 0


@dataclass(slots=True)
class _Proxy:
    src: int
    dst: int
    target_port: int
    port: int
    listener: socket.socket
    udp: socket.socket
    stats: ProxyStats = field(default_factory=ProxyStats)
    scopes: set[trio.CancelScope] = field(default_factory=set)


class Network:
    """The proxies of one replica set and the faults on them. `add` every ordered pair,
    then `start`; every other method may be called from any thread once started."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)
        self._proxies: dict[tuple[int, int], _Proxy] = {}
        self._flows: dict[tuple[int, int], Flow] = {}
        self._changed: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def add(self, src: int, dst: int, target_port: int) -> int:
        """A proxy for `src` dialing `dst` (listening on `target_port`); its port."""
        listener, udp = _bind_pair()
        port = listener.getsockname()[1]
        self._proxies[(src, dst)] = _Proxy(src, dst, target_port, port, listener, udp)
        self._flows.setdefault((src, dst), Flow())
        self._flows.setdefault((dst, src), Flow())
        return port

    def port(self, src: int, dst: int) -> int:
        return self._proxies[(src, dst)].port

    def start(self) -> None:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="chaos-proxies", daemon=True)
        self._thread.start()
        if not started.wait(START_TIMEOUT_S) or self._token is None:
            raise RuntimeError(f"the proxies did not start: {self._failure!r}")

    def stop(self) -> None:
        if self._token is not None and self._thread is not None and self._thread.is_alive():
            try:
                trio.from_thread.run_sync(self._cancel_all, trio_token=self._token)
            except trio.RunFinishedError:
                pass
            self._thread.join(START_TIMEOUT_S)
        for proxy in self._proxies.values():
            proxy.listener.close()
            proxy.udp.close()

    # ------------------------------------------------------------ faults (any thread)

    def block(self, src: int, dst: int) -> None:
        """Cut what `src` sends to `dst` (one way)."""
        self._change(src, dst, blocked=True)

    def cut(self, a: int, b: int) -> None:
        """Cut both ways between `a` and `b`."""
        self.block(a, b)
        self.block(b, a)

    def delay(self, src: int, dst: int, delay_s: float) -> None:
        self._change(src, dst, delay_s=delay_s)

    def drop(self, src: int, dst: int, fraction: float) -> None:
        self._change(src, dst, drop=fraction)

    def reset(self, src: int, dst: int) -> None:
        """Close every connection through proxy `(src, dst)`."""
        self._call(self._reset, (src, dst))

    def heal(self) -> None:
        """Every flow open, undelayed, lossless."""
        def heal_all() -> None:
            for key in self._flows:
                self._flows[key] = Flow()
            self._wake()
        self._call(heal_all)

    def flows(self) -> dict[tuple[int, int], Flow]:
        return self._call(lambda: {key: Flow(f.blocked, f.delay_s, f.drop) for key, f in self._flows.items()})

    def stats(self) -> dict[str, dict[str, int]]:
        def collect() -> dict[str, dict[str, int]]:
            return {f"{src}->{dst}": {name: getattr(p.stats, name) for name in ProxyStats.__slots__}
                    for (src, dst), p in sorted(self._proxies.items())}
        return self._call(collect)

    def _change(self, src: int, dst: int, **fields: Any) -> None:
        def change() -> None:
            flow = self._flows.setdefault((src, dst), Flow())
            for name, value in fields.items():
                setattr(flow, name, value)
            self._wake()
        self._call(change)

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._token is None:
            raise RuntimeError("the proxies are not running")
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    # ------------------------------------------------------------ the loop's side

    def _run(self, started: threading.Event) -> None:
        try:
            trio.run(self._main, started)
        except BaseException as exc:  # noqa: BLE001 - reported to the harness by `start`
            self._failure = exc
            started.set()

    async def _main(self, started: threading.Event) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._changed = trio.Event()
        async with trio.open_nursery() as nursery:
            self._cancel = nursery.cancel_scope
            for proxy in self._proxies.values():
                nursery.start_soon(self._accept, nursery, proxy)
                nursery.start_soon(self._datagrams, nursery, proxy)
            started.set()

    def _cancel_all(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()

    def _wake(self) -> None:
        assert self._changed is not None
        self._changed.set()
        self._changed = trio.Event()

    async def _until_open(self, *flows: tuple[int, int]) -> None:
        while any(self._flows[f].blocked for f in flows):
            assert self._changed is not None
            await self._changed.wait()

    def _reset(self, key: tuple[int, int]) -> None:
        proxy = self._proxies[key]
        proxy.stats.resets += len(proxy.scopes)
        for scope in list(proxy.scopes):
            scope.cancel()

    async def _accept(self, nursery: trio.Nursery, proxy: _Proxy) -> None:
        listener = trio.socket.from_stdlib_socket(proxy.listener)
        while True:
            sock, _ = await listener.accept()
            proxy.stats.connections += 1
            nursery.start_soon(self._connection, proxy, sock)

    async def _connection(self, proxy: _Proxy, client_sock: trio.socket.SocketType) -> None:
        forward, back = (proxy.src, proxy.dst), (proxy.dst, proxy.src)
        client = trio.SocketStream(client_sock)
        server: trio.SocketStream | None = None
        lost = [False]  # reset by loss: end both sides with RST
        with trio.CancelScope() as scope:
            proxy.scopes.add(scope)
            try:
                if self._flows[forward].blocked or self._flows[back].blocked:
                    proxy.stats.held += 1
                    await self._until_open(forward, back)
                server = await trio.open_tcp_stream(HOST, proxy.target_port)
                async with trio.open_nursery() as pumps:
                    for source, sink, key, counter in ((client, server, forward, "bytes_forward"),
                                                       (server, client, back, "bytes_back")):
                        pumps.start_soon(self._pump, proxy, source, sink, key, counter, pumps.cancel_scope, lost)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
                lost[0] = True  # the member is down: the dialer sees its connection refused
            finally:
                proxy.scopes.discard(scope)
        for stream in (client, server):
            if stream is not None:
                _close(stream, reset=lost[0] or scope.cancelled_caught)

    async def _pump(self, proxy: _Proxy, source: trio.SocketStream, sink: trio.SocketStream, flow_key: tuple[int, int],
                    counter: str, both: trio.CancelScope, lost: list[bool]) -> None:
        """One direction of a connection, chunk by chunk; its end (EOF, an error, a reset
        by loss) ends both directions."""
        try:
            while True:
                data = await source.receive_some(CHUNK_BYTES)
                if not data:
                    return
                await self._until_open(flow_key)
                flow = self._flows[flow_key]
                if flow.delay_s:
                    await trio.sleep(flow.delay_s)
                    await self._until_open(flow_key)
                if flow.drop and self._rng.random() < flow.drop * RESET_SHARE:
                    proxy.stats.resets += 1
                    lost[0] = True
                    return
                await sink.send_all(data)
                setattr(proxy.stats, counter, getattr(proxy.stats, counter) + len(data))
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            lost[0] = True
        finally:
            both.cancel()

    async def _datagrams(self, nursery: trio.Nursery, proxy: _Proxy) -> None:
        sock = trio.socket.from_stdlib_socket(proxy.udp)
        key = (proxy.src, proxy.dst)
        target = (HOST, proxy.target_port)
        while True:
            data, _ = await sock.recvfrom(DATAGRAM_MAX)
            flow = self._flows[key]
            if flow.blocked or (flow.drop and self._rng.random() < flow.drop):
                proxy.stats.datagrams_dropped += 1
                continue
            proxy.stats.datagrams += 1
            if flow.delay_s:
                nursery.start_soon(_send_later, sock, data, target, flow.delay_s)
            else:
                _send_datagram(sock, data, target)


async def _send_later(sock: trio.socket.SocketType, data: bytes, target: tuple[str, int], delay_s: float) -> None:
    await trio.sleep(delay_s)
    _send_datagram(sock, data, target)


def _send_datagram(sock: trio.socket.SocketType, data: bytes, target: tuple[str, int]) -> None:
    try:
        sock._sock.sendto(data, target)  # non-blocking: a full buffer loses it, as a network may
    except OSError:
        pass


def _close(stream: trio.SocketStream, *, reset: bool) -> None:
    """Close at once; with `reset`, by RST (SO_LINGER 0): the peer sees its connection
    reset, as after a fault, not an orderly end."""
    if reset:
        try:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    stream.socket.close()


def _bind_pair() -> tuple[socket.socket, socket.socket]:
    """A listening TCP socket and a UDP socket on one free port of 127.0.0.1."""
    for _ in range(BIND_ATTEMPTS_MAX):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((HOST, 0))
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            udp.bind((HOST, listener.getsockname()[1]))
        except OSError:
            listener.close()
            udp.close()
            continue
        listener.listen(128)
        listener.setblocking(False)
        udp.setblocking(False)
        return listener, udp
    raise RuntimeError(f"no port free for both TCP and UDP after {BIND_ATTEMPTS_MAX} attempts")
