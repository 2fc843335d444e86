"""The node's membership duties, driven without a server socket (DESIGN 4.7)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

from replicaset.config import load
from replicaset.identity import Identity
from replicaset.runtime.node import REGISTRAR_ID, Node
from replicaset.runtime.writer import Writer
from tests.pagecache import PageCache
from wal import GroupCommitPolicy

JOINER = str(uuid.uuid4())


def test_a_registration_under_wal_mode_write_survives_an_os_crash_of_the_registrar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PageCache(monkeypatch)
    identity = Identity(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()), instance_id=REGISTRAR_ID)
    node = Node(config=load(overrides={"wal_mode": "write"}), identity=identity, data_dir=tmp_path)

    async def bootstrap_and_register() -> int:
        node.engine = node.open_engine()
        node.writer = Writer(node.engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False)
        try:
            await node._bootstrap_cluster()
            return await node.register(JOINER, "127.0.0.1:3302")  # the id the joiner learns
        finally:
            node.engine.close()

    assert trio.run(bootstrap_and_register) == 2
    cache.os_crash(tmp_path / "wal")  # SQLite kept everything: it is ahead of what survived
    node.engine = node.open_engine()
    try:
        assert [(i, u) for i, u, _ in node.members()] == [(1, identity.instance_uuid), (2, JOINER)]
    finally:
        node.engine.close()
