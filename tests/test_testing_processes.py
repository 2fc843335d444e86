"""The ports tests and the chaos harness start servers on: free for TCP and UDP, and outside
the ephemeral range, so that no outgoing connection takes one while its server is down
and the restart on it finds it free."""

from __future__ import annotations

import socket
from pathlib import Path

from replicaset.testing.processes import free_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def test_a_free_port_is_below_the_ephemeral_range_and_free_for_tcp_and_udp() -> None:
    low = int(RANGE.read_text().split()[0]) if RANGE.exists() else 32_768
    handed = [free_port() for _ in range(20)]
    ports = set(handed)
    assert len(ports) == len(handed), "a port asked for but not bound yet is not handed out again"
    assert all(port < low for port in ports), (sorted(ports), low)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            tcp.bind(("127.0.0.1", port))
            udp.bind(("127.0.0.1", port))
