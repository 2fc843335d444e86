"""kill -9 during a write load: every acknowledged row survives, nothing twice."""

from __future__ import annotations

import threading
import time
import uuid
from functools import partial
from pathlib import Path

import pytest
import trio

from replicaset.testing.processes import free_port
from replicaset.identity import Identity, load_pending_registration
from replicaset.iproto.errors import ServerError
from replicaset.runtime.join import join
from replicaset.runtime.environment import TCP
from replicaset.runtime.transfer import fetch_checkpoint
from replicaset.storage.checkpoint import vclock_of
from replicaset.testing.pagecache import PageCache
from tests.server.conftest import BOOTSTRAP_ROWS, Server, wait_for
from wal import VClock

WRITERS = 4
LOAD_S = 1.5


def _writer(server, worker: int, acked: list[int], stop: threading.Event) -> None:
    try:
        with server.client(timeout_s=5.0) as client:
            n = 0
            while not stop.is_set() and n < 100_000:
                row_id = worker * 1_000_000 + n
                client.execute("INSERT INTO events(id, worker, payload) VALUES (?, ?, ?)", [row_id, worker, "x" * 64])
                acked.append(row_id)
                n += 1
    except (OSError, ServerError, ConnectionError):
        return  # the server died under us: what was acknowledged is in `acked`


def test_kill_9_under_load_loses_no_acknowledged_row(server):
    with server.client() as client:
        client.execute("CREATE TABLE events(id INTEGER PRIMARY KEY, worker INTEGER, payload TEXT)")
    acked: list[list[int]] = [[] for _ in range(WRITERS)]
    stop = threading.Event()
    threads = [threading.Thread(target=_writer, args=(server, w, acked[w], stop)) for w in range(WRITERS)]
    for t in threads:
        t.start()
    time.sleep(LOAD_S)
    server.kill()
    stop.set()
    for t in threads:
        t.join(10)
    acknowledged = {row_id for worker in acked for row_id in worker}
    assert len(acknowledged) > 100, "the load did not get going"

    server.start()
    with server.client() as client:
        present = [r[0] for r in client.execute("SELECT id FROM events").rows]
        vclock = client.eval("box.info.vclock")[0]
    assert acknowledged <= set(present), f"lost {len(acknowledged - set(present))} acknowledged rows"
    assert len(present) == len(set(present))
    # The bootstrap rows, one LSN for the CREATE TABLE, one for each single-row INSERT
    # present: no more, no less.
    assert vclock[1] == BOOTSTRAP_ROWS + 1 + len(present)


def test_a_joiner_keeps_its_checkpoint_identity_and_registration_through_an_os_crash(
    server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`replicaset join` returned: an OS crash then must not take the checkpoint, the log
    that continues it, the id or the pending registration (FINDINGS F5 again: the id is
    registered by the member it joined through, and a joiner without its registration file would take
    writes too early). The joiner then starts and takes writes."""
    cache = PageCache(monkeypatch)  # in this process: the joiner's side of the join
    with server.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY)")
        replicaset_uuid = client.eval("box.info")[0]["cluster"]["uuid"]
    data_dir = tmp_path / "joiner"
    data_dir.mkdir()
    listen = f"127.0.0.1:{free_port()}"
    joined = join(data_dir, replicaset_uuid=replicaset_uuid, peers=[f"127.0.0.1:{server.port}"], listen=listen)
    assert joined is not None and joined.instance_id == 2
    registration = load_pending_registration(data_dir)
    checkpoint_vclock = vclock_of(data_dir / "db.sqlite")
    cache.os_crash(data_dir)
    cache.os_crash(data_dir / "wal")
    assert Identity.load(data_dir) == joined
    assert load_pending_registration(data_dir) == registration is not None
    # The checkpoint holds the set's rows: the bootstrap's, CREATE TABLE kv and our `_cluster` row.
    assert vclock_of(data_dir / "db.sqlite") == checkpoint_vclock == VClock({1: BOOTSTRAP_ROWS + 2})
    # The log starts where the checkpoint ends: without it the checkpoint counts as ahead of
    # the log, is dropped at start, and the joiner sits orphan with an empty database.
    joiner = Server(data_dir, tmp_path / "joiner.log")
    joiner.port = int(listen.rpartition(":")[2])
    try:
        joiner.start()
        with joiner.client() as client:
            info = client.eval("box.info")[0]
            assert info["vclock"] == {1: BOOTSTRAP_ROWS + 2} and info["id"] == 2
            assert client.execute("SELECT count(*) FROM kv").rows == [[0]]
        wait_for(lambda: joiner_status(joiner) == "running", "the joiner running after the OS crash")
    finally:
        if joiner.proc is not None and joiner.proc.poll() is None:
            joiner.proc.kill()
            joiner.proc.wait(10)


def joiner_status(joiner: Server) -> str:
    with joiner.client() as client:
        return client.eval("box.info")[0]["status"]


def test_a_fetched_checkpoint_survives_an_os_crash(server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The JOIN's checkpoint is written under a temporary name and renamed: once
    `fetch_checkpoint` returns, the rename is durable too."""
    cache = PageCache(monkeypatch)
    with server.client() as client:
        replicaset_uuid = client.eval("box.info")[0]["cluster"]["uuid"]
    target = tmp_path / "joiner" / "db.sqlite"
    target.parent.mkdir()
    fetched = trio.run(partial(
        fetch_checkpoint, f"127.0.0.1:{server.port}", replicaset_uuid=replicaset_uuid, instance_uuid=str(uuid.uuid4()),
        listen=f"127.0.0.1:{free_port()}", target=target, progress=lambda done, total: None, network=TCP,
    ))
    cache.os_crash(target.parent)
    assert [p.name for p in target.parent.iterdir()] == ["db.sqlite"]
    assert target.stat().st_size == fetched.size_bytes
    assert vclock_of(target) == fetched.vclock == VClock({1: BOOTSTRAP_ROWS + 1})
