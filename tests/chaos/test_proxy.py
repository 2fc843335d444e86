"""The harness's proxies do to a member's links what the faults say, and nothing else: a cut
stalls bytes and delivers them all once healed, holds new connections, drops datagrams; a
reset closes the link's connections."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from replicaset.testing.chaos.proxy import HOST, Network
from replicaset.testing.processes import free_port

TIMEOUT_S = 5.0


@dataclass
class Echo:
    port: int
    received: list[bytes]


@pytest.fixture
def echo() -> Iterator[Echo]:
    """A TCP echo server and a UDP sink on one port; the sink's datagrams land in `received`."""
    port = free_port()
    listener = socket.create_server((HOST, port))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((HOST, port))
    udp.settimeout(0.3)
    stop = threading.Event()
    received: list[bytes] = []

    def serve_tcp() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=echo_loop, args=(conn,), daemon=True).start()

    def echo_loop(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(4096):
                    conn.sendall(data)
            except OSError:  # reset by the proxy
                return

    def serve_udp() -> None:
        while not stop.is_set():
            try:
                received.append(udp.recv(2048))
            except OSError:
                continue

    threads = [threading.Thread(target=serve_tcp), threading.Thread(target=serve_udp)]
    for thread in threads:
        thread.start()
    try:
        yield Echo(port, received)
    finally:
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT_S)
        listener.close()
        udp.close()


@pytest.fixture
def network(echo: Echo) -> Iterator[Network]:
    net = Network(seed=1)
    net.add(1, 2, echo.port)
    net.start()
    try:
        yield net
    finally:
        net.stop()


def test_a_cut_stalls_bytes_and_delivers_them_all_once_healed(network: Network) -> None:
    with socket.create_connection((HOST, network.port(1, 2)), timeout=TIMEOUT_S) as conn:
        conn.sendall(b"before")
        assert conn.recv(100) == b"before"
        network.cut(1, 2)
        conn.sendall(b"during")
        conn.settimeout(0.5)
        with pytest.raises(socket.timeout):
            conn.recv(100)
        network.heal()
        conn.settimeout(TIMEOUT_S)
        assert conn.recv(100) == b"during"


def test_a_one_way_cut_stalls_only_its_direction(network: Network) -> None:
    """Member 2's answers to member 1 stall; what member 1 sends still arrives (the echo
    server answers into the stalled direction)."""
    with socket.create_connection((HOST, network.port(1, 2)), timeout=TIMEOUT_S) as conn:
        conn.sendall(b"x")
        assert conn.recv(10) == b"x"
        network.block(2, 1)
        conn.sendall(b"y")
        conn.settimeout(0.5)
        with pytest.raises(socket.timeout):
            conn.recv(10)
        assert network.stats()["1->2"]["bytes_forward"] == 2
        network.heal()
        conn.settimeout(TIMEOUT_S)
        assert conn.recv(10) == b"y"


def test_a_new_connection_through_a_cut_is_held_until_it_heals(network: Network) -> None:
    network.cut(1, 2)
    with socket.create_connection((HOST, network.port(1, 2)), timeout=TIMEOUT_S) as conn:
        conn.sendall(b"hello")
        conn.settimeout(0.5)
        with pytest.raises(socket.timeout):
            conn.recv(100)
        network.heal()
        conn.settimeout(TIMEOUT_S)
        assert conn.recv(100) == b"hello"
    assert network.stats()["1->2"]["held"] == 1


def test_a_reset_closes_the_links_connections(network: Network) -> None:
    with socket.create_connection((HOST, network.port(1, 2)), timeout=TIMEOUT_S) as conn:
        conn.sendall(b"a")
        assert conn.recv(10) == b"a"
        network.reset(1, 2)
        with pytest.raises(ConnectionResetError):
            conn.recv(10)


def test_datagrams_pass_unless_cut_or_dropped(network: Network, echo: Echo) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        target = (HOST, network.port(1, 2))
        sender.sendto(b"one", target)
        wait_until(lambda: echo.received == [b"one"])
        network.block(2, 1)  # the other way: this one still passes
        sender.sendto(b"two", target)
        wait_until(lambda: echo.received == [b"one", b"two"])
        network.block(1, 2)
        sender.sendto(b"three", target)
        wait_until(lambda: network.stats()["1->2"]["datagrams_dropped"] == 1)
        network.heal()
        network.drop(1, 2, 1.0)
        sender.sendto(b"four", target)
        wait_until(lambda: network.stats()["1->2"]["datagrams_dropped"] == 2)
        network.heal()
        sender.sendto(b"five", target)
        wait_until(lambda: echo.received == [b"one", b"two", b"five"])
    stats = network.stats()["1->2"]
    assert (stats["datagrams"], stats["datagrams_dropped"]) == (3, 2)


def wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, "not within the timeout"
        time.sleep(0.02)
