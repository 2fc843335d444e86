"""Three-member replica sets for the differential kit: one for a whole test module
(starting one takes about 2 s, and every case leaves the others' tables alone), and a
fresh one for a test that leaves its set broken."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from replicaset.iproto.client import Client
from tests.server.conftest import ReplicaSet

MEMBERS = 3


@contextmanager
def three_members(root: Path) -> Iterator[tuple[ReplicaSet, list[Client]]]:
    """The set, each member joined through the first, and a client on each."""
    rs = ReplicaSet(root)
    clients: list[Client] = []
    try:
        first = rs.bootstrap()
        for _ in range(MEMBERS - 1):
            rs.join(first)
        rs.wait_converged()
        clients = [member.client() for member in rs.members]
        yield rs, clients
    finally:
        for client in clients:
            client.close()
        rs.stop_all()


@pytest.fixture(scope="module")
def members(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ReplicaSet, list[Client]]]:
    with three_members(tmp_path_factory.mktemp("differential")) as started:
        yield started


@pytest.fixture
def fresh_members(tmp_path: Path) -> Iterator[tuple[ReplicaSet, list[Client]]]:
    with three_members(tmp_path) as started:
        yield started
