"""A joiner killed in the middle of its checkpoint transfer, started again on the same data
directory, resumes where it stopped under the same instance UUID (so the same id: no
orphan registration) and converges (docs/design/anti-entropy.md, "Resuming")."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from functools import partial
from pathlib import Path

import trio

from replicaset.runtime.environment import TCP
from replicaset.runtime.transfer import KeptCheckpoint, fetch_checkpoint
from replicaset.testing.processes import free_port, start_instance
from tests.server.conftest import REPLICASET_UUID, ReplicaSet, Server, wait_for

CHUNK_BYTES = 64 * 1024
ROWS, ROW_BYTES = 3000, 1000  # a checkpoint of about 3.5 MB
STALL_AFTER_BYTES = 1024 * 1024


class LimitedProxy:
    """A TCP proxy on 127.0.0.1 to `upstream_port` that forwards at most `limit_bytes` of
    a connection from the member to the joiner, then holds the rest (a link that stalls in
    the middle of a transfer, so that the test can kill the joiner there) or, with `cut`,
    closes the connection (a link that keeps breaking). The first `limited` connections are
    (all of them when None); later ones are forwarded whole."""

    def __init__(self, upstream_port: int, limit_bytes: int, *, cut: bool = False, limited: int | None = None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream_port, self.limit_bytes, self.cut, self.limited = upstream_port, limit_bytes, cut, limited
        self.sockets: list[socket.socket] = [self.listener]
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        accepted = 0
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                return
            self.sockets += [client, upstream]
            accepted += 1
            limit = self.limit_bytes if self.limited is None or accepted <= self.limited else None
            for args in ((client, upstream, None), (upstream, client, limit)):
                self.threads.append(threading.Thread(target=self._pump, args=args, daemon=True))
                self.threads[-1].start()

    def _pump(self, source: socket.socket, sink: socket.socket, limit_bytes: int | None) -> None:
        sent = 0
        try:
            while limit_bytes is None or sent < limit_bytes:
                data = source.recv(65536 if limit_bytes is None else min(65536, limit_bytes - sent))
                if not data:
                    return
                sink.sendall(data)
                sent += len(data)
            if self.cut:
                for sock in (source, sink):
                    sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return

    def close(self) -> None:
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self.threads:
            thread.join(5)


def events(log_path: Path, name: str) -> list[dict]:
    return [e for e in Server(log_path.parent, log_path).log_events() if e.get("event") == name]


def member_with_rows(rs: ReplicaSet) -> Server:
    """A bootstrapped member holding `ROWS` rows of `ROW_BYTES`: a checkpoint of 55 chunks."""
    member = rs.bootstrap()
    with member.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        for first in range(0, ROWS, 500):
            client.execute("WITH RECURSIVE n(k) AS (SELECT ? UNION ALL SELECT k + 1 FROM n WHERE k < ?) "
                           "INSERT INTO kv SELECT k, hex(randomblob(?)) FROM n", [first, first + 499, ROW_BYTES // 2])
    return member


def join_until_stalled(rs: ReplicaSet, joiner: Server, proxy: LimitedProxy) -> None:
    """`replicaset join` through `proxy` in the background, until it holds the first
    megabyte and the proxy holds the rest back."""
    target = joiner.data_dir / "db.sqlite"
    with open(joiner.log_path, "ab") as log:
        joiner.proc = subprocess.Popen(
            [sys.executable, "-m", "replicaset.cli", "join", "--uuid", REPLICASET_UUID, "--data-dir",
             str(joiner.data_dir), "--config", str(rs.config), "--peer", f"127.0.0.1:{proxy.port}",
             "--listen", f"127.0.0.1:{joiner.port}"], stdout=log, stderr=log)
    wait_for(lambda: KeptCheckpoint(target).partial.exists()
             and KeptCheckpoint(target).partial.stat().st_size >= STALL_AFTER_BYTES - 2 * CHUNK_BYTES,
             "the joiner holding the first megabyte, stalled")


def test_a_joiner_killed_mid_transfer_resumes_under_the_same_id(replicaset_factory):
    """Killed, then `replicaset serve` on its data directory: the join goes on through the
    peer it was given (as a re-join interrupted the same way does), from where it stopped."""
    rs = replicaset_factory(f"checkpoint_chunk_bytes = {CHUNK_BYTES}\n")
    member = member_with_rows(rs)
    joiner = Server(rs.root / "m2", rs.root / "m2.log")
    rs.members.append(joiner)  # stopped by the fixture whatever happens
    joiner.port = free_port()
    target = joiner.data_dir / "db.sqlite"
    proxy = LimitedProxy(member.port, STALL_AFTER_BYTES, limited=1)
    try:
        join_until_stalled(rs, joiner, proxy)
        joiner.proc.send_signal(signal.SIGKILL)
        joiner.proc.wait(10)
        kept = KeptCheckpoint.load(target).offset
        assert kept >= STALL_AFTER_BYTES - 2 * CHUNK_BYTES and kept % CHUNK_BYTES == 0, kept

        started = time.monotonic()
        joiner.proc, _ = start_instance(["serve", "--data-dir", str(joiner.data_dir)], joiner.log_path,
                                        port=joiner.port)
    finally:
        proxy.close()
    [resumed] = events(joiner.log_path, "join_resumed")
    assert resumed["offset"] == kept and resumed["total_bytes"] > 2 * 1024 * 1024, resumed
    assert not events(joiner.log_path, "join_kept_dropped")
    served = events(rs.root / "m1.log", "join_serving")
    assert [e.get("resumed_at") for e in served] == [None, kept], served
    assert time.monotonic() - started < 10

    rs.wait_converged()
    assert rs.info(joiner)["id"] == 2
    with member.client() as client:
        assert client.execute("SELECT id FROM _cluster ORDER BY id").rows == [[1], [2]], "no orphan registration"
    with joiner.client() as client:
        assert client.execute("SELECT count(*) FROM kv").rows == [[ROWS]]
    assert sorted(p.name for p in joiner.data_dir.iterdir() if "partial" in p.name or "resume" in p.name
                  or p.name == "joining.toml") == []


def test_a_join_over_a_link_that_keeps_breaking_gets_there_chunk_by_chunk(replicaset_factory):
    rs = replicaset_factory(f"checkpoint_chunk_bytes = {CHUNK_BYTES}\n")
    member = member_with_rows(rs)
    proxy = LimitedProxy(member.port, STALL_AFTER_BYTES, cut=True)
    try:
        joiner = Server(rs.root / "m2", rs.root / "m2.log")
        rs.members.append(joiner)
        joiner.proc, joiner.port = start_instance(
            ["join", "--uuid", REPLICASET_UUID, "--data-dir", str(joiner.data_dir), "--config", str(rs.config),
             "--peer", f"127.0.0.1:{proxy.port}"], joiner.log_path)
    finally:
        proxy.close()
    offsets = [e["offset"] for e in events(joiner.log_path, "join_resumed")]
    assert len(offsets) >= 3 and offsets == sorted(set(offsets)), offsets
    assert all(e["retry"] for e in events(joiner.log_path, "join_failed")), "each broken attempt kept chunks"
    rs.wait_converged()
    with joiner.client() as client:
        assert client.execute("SELECT count(*) FROM kv").rows == [[ROWS]]


def test_a_join_repeated_under_one_uuid_gets_one_id(server: Server, tmp_path: Path):
    """What makes a resumed join safe to repeat: the member registers a UUID it already
    has under its id, with no second `_cluster` row."""
    with server.client() as client:
        replicaset_uuid = client.eval("box.info")[0]["cluster"]["uuid"]
    joiner_uuid = str(uuid.uuid4())
    (tmp_path / "joiner").mkdir()
    ids = []
    for _ in range(2):
        joined = trio.run(partial(
            fetch_checkpoint, f"127.0.0.1:{server.port}", replicaset_uuid=replicaset_uuid, instance_uuid=joiner_uuid,
            listen=f"127.0.0.1:{free_port()}", target=tmp_path / "joiner" / "db.sqlite",
            progress=lambda done, total: None, network=TCP,
        ))
        ids.append(joined.registration.instance_id)
    assert ids == [2, 2]
    with server.client() as client:
        assert client.execute("SELECT id, uuid FROM _cluster WHERE id > 1").rows == [[2, joiner_uuid]]


def test_a_join_whose_member_dies_mid_transfer_says_how_to_resume_and_resumes(replicaset_factory):
    """The member dies with a megabyte sent: the joiner tries again, finds no one, and says
    in one line what it keeps and how to go on; its progress lines carry its id, which the
    member sent with the first chunk. Joined again as it says, it resumes from there."""
    rs = replicaset_factory(f"checkpoint_chunk_bytes = {CHUNK_BYTES}\n")
    member = member_with_rows(rs)
    joiner = Server(rs.root / "m2", rs.root / "m2.log")
    rs.members.append(joiner)
    joiner.port = free_port()
    proxy = LimitedProxy(member.port, STALL_AFTER_BYTES)
    try:
        join_until_stalled(rs, joiner, proxy)
        member.kill()
    finally:
        proxy.close()
    assert joiner.proc.wait(30) == 1
    text = joiner.log_path.read_text()
    assert "Traceback" not in text
    (human,) = [line for line in text.splitlines() if line.startswith("replicaset join: ")]
    [gave_up] = events(joiner.log_path, "join_gave_up")
    kept, size = gave_up["kept_bytes"], gave_up["total_bytes"]
    assert kept >= STALL_AFTER_BYTES - 2 * CHUNK_BYTES and size > kept, gave_up
    assert (f"{joiner.data_dir} keeps the instance UUID {gave_up['instance_uuid']} and {kept} of {size} bytes of the "
            f"checkpoint; run `replicaset serve --data-dir {joiner.data_dir}`") in human, human
    progress = events(joiner.log_path, "join_progress")
    assert progress and all(e["instance_id"] == 2 for e in progress), progress

    member.start()
    joiner.proc, _ = start_instance(["join", "--uuid", REPLICASET_UUID, "--data-dir", str(joiner.data_dir),
                                     "--config", str(rs.config), "--peer", f"127.0.0.1:{member.port}"],
                                    joiner.log_path, port=joiner.port)
    [resumed] = events(joiner.log_path, "join_resumed")
    assert resumed["offset"] == kept and resumed["instance_id"] == 2, resumed
    rs.wait_converged()
    with member.client() as client:
        assert client.execute("SELECT id FROM _cluster ORDER BY id").rows == [[1], [2]], "no orphan registration"
