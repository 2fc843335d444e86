"""One three-member replica set for a whole test module of the differential kit: starting
one takes about 2 s, and every case leaves the others' tables alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from replicaset.iproto.client import Client
from tests.server.conftest import ReplicaSet

MEMBERS = 3


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReplicaSet, list[Client]]]:
    """The set, each member joined through the first and running, and a client on each."""
    rs = ReplicaSet(tmp_path_factory.mktemp("differential"))
    clients: list[Client] = []
    try:
        first = rs.bootstrap()
        for _ in range(MEMBERS - 1):
            rs.join(first)
        for member in rs.members:
            rs.wait_status(member, "running")
        rs.wait_converged()
        clients = [member.client() for member in rs.members]
        yield rs, clients
    finally:
        for client in clients:
            client.close()
        rs.stop_all()
