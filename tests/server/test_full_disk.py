"""A full disk on real processes (Tarantool's ENOSPC): the member whose data directory's
file system is full refuses writes with ER_WAL_IO naming "no space left on device", goes
on answering reads, PING and its peers, refuses to prepare, and takes writes again once
space is freed, with no restart; the table holds exactly the acknowledged rows. Each data
directory is a small tmpfs, so these tests need root (mount): they skip without it."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.iproto.errors import ServerError
from replicaset.runtime.disk import RESERVE_FILE
from tests.server.conftest import QUORUM, ReplicaSet, Server, wait_for
from tests.server.test_replicaset import rows
from tests.server.test_swim import SWIM_FAST, all_alive

TMPFS_SIZE = "16m"
FILL_CHUNK_BYTES = 1 << 16
ONE = {"consistency": "one"}
SWIM_DEAD_S = 1.0  # above SWIM_FAST's dead_timeout_ms


@contextmanager
def tmpfs(path: Path) -> Iterator[Path]:
    """A small tmpfs mounted at `path` for the block; the test skips where mounting is not
    permitted (no root, a container without the capability)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs for a full disk: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a full disk: {done.stderr.strip() or done.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(directory: Path, name: str = "filler") -> Path:
    """Write file `name` in `directory` until its file system has no byte left; the file,
    whose removal frees the space."""
    filler = directory / name
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for chunk_bytes in (FILL_CHUNK_BYTES, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk_bytes)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    finally:
        os.close(fd)
    return filler


def refused_for_space(write: Callable[[], object]) -> ServerError:
    with pytest.raises(ServerError) as refused:
        write()
    assert refused.value.code == ErrorCode.WAL_IO, refused.value
    assert "no space left on device" in refused.value.message
    return refused.value


def stop_at_end(server: Server) -> None:
    if server.proc is not None and server.proc.poll() is None:
        server.proc.kill()
        server.proc.wait(10)


def errors_logged(server: Server) -> list[str]:
    return [e["event"] for e in server.log_events() if e.get("level") in ("error", "critical")]


@pytest.mark.parametrize("wal_mode", ["write", "fsync"])  # under fsync the flush, and its check, run in a thread
def test_a_full_disk_refuses_writes_serves_reads_and_takes_writes_again_once_freed(tmp_path: Path,
                                                                                   wal_mode: str) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log")
    config = tmp_path / "config.toml"
    config.write_text(f'wal_mode = "{wal_mode}"\n')
    with tmpfs(server.data_dir):
        try:
            server.start("--config", str(config))  # the built-in level: QUORUM, of one member
            assert (server.data_dir / RESERVE_FILE).exists()
            acknowledged = []
            with server.client() as client:
                client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
                for k, options in ((1, QUORUM), (2, ONE)):
                    client.execute("INSERT INTO kv(k, v) VALUES (?, 'before')", [k], options=options)
                    acknowledged.append([k, "before"])
                filler = fill(server.data_dir)
                for k, options in ((3, QUORUM), (4, ONE), (5, QUORUM), (6, ONE)):
                    refused_for_space(lambda: client.execute("INSERT INTO kv(k, v) VALUES (?, 'full')", [k],
                                                             options=options))
                for stream_id, options in ((11, ONE), (12, QUORUM)):  # a stream transaction fails at its COMMIT
                    client.call(RequestType.BEGIN, {Key.OPTIONS: options}, stream_id=stream_id)
                    client.call(RequestType.EXECUTE, {Key.SQL_TEXT: f"INSERT INTO kv(k, v) VALUES ({stream_id}, 's')"},
                                stream_id=stream_id)
                    refused_for_space(lambda: client.call(RequestType.COMMIT, {}, stream_id=stream_id))
                refused_for_space(lambda: client.eval("box.snapshot()"))
                client.ping()
                assert client.execute("SELECT k, v FROM kv ORDER BY k").rows == acknowledged
                assert client.eval("box.info")[0]["status"] == "running"
            assert server.proc.poll() is None
            assert errors_logged(server) == ["disk_full"], "one error line for the condition, none per request"

            filler.unlink()
            with server.client() as client:
                def written_again() -> bool:
                    try:
                        client.execute("INSERT INTO kv(k, v) VALUES (7, 'after')", options=QUORUM)
                    except ServerError as exc:
                        assert exc.code == ErrorCode.WAL_IO, exc
                        return False
                    return True
                wait_for(written_again, "a write once space is freed", timeout_s=5.0)
                acknowledged.append([7, "after"])
                client.execute("INSERT INTO kv(k, v) VALUES (8, 'after')", options=ONE)
                acknowledged.append([8, "after"])
            assert (server.data_dir / RESERVE_FILE).exists()
            assert "disk_space_back" in [e["event"] for e in server.log_events()]
            assert server.stop() == 0
            server.start("--config", str(config))  # nothing half-written comes back either
            assert rows(server, "SELECT k, v FROM kv ORDER BY k") == acknowledged
        finally:
            stop_at_end(server)


def test_a_member_with_a_full_disk_refuses_to_prepare_and_catches_up_once_freed(
        replicaset_factory: Callable[..., ReplicaSet]) -> None:
    rs = replicaset_factory(f"replication.synchro_timeout_s = 2.0\n{SWIM_FAST}")
    first = rs.bootstrap()
    with first.client() as client:
        client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    second = rs.join(first)
    with tmpfs(rs.root / "m3"):
        third = None
        try:
            third = rs.join(second)
            rs.wait_converged()
            filler = fill(third.data_dir)
            with first.client() as client:
                for k in range(1, 4):  # members 1 and 2 are the quorum; 3 refuses its PREPARE
                    client.execute("INSERT INTO kv(k, v) VALUES (?, 'q')", [k], options=QUORUM)
            with third.client() as client:
                refused_for_space(lambda: client.execute("INSERT INTO kv(k, v) VALUES (10, 'x')", options=QUORUM))
                refused_for_space(lambda: client.execute("INSERT INTO kv(k, v) VALUES (11, 'x')", options=ONE))
                client.ping()
                assert client.execute("SELECT k FROM kv").rows == [], "the rows wait until space is freed"
            assert third.proc.poll() is None
            assert rows(first) == rows(second) == [[1, "q"], [2, "q"], [3, "q"]]
            time.sleep(SWIM_DEAD_S)  # past SWIM's dead timeout: the full member still answers its pings
            assert all_alive(rs, [first, second, third])
            assert "disk_full" in errors_logged(third) and errors_logged(third).count("disk_full") == 1

            filler.unlink()
            converged = rs.wait_converged()
            assert rows(third) == rows(first) == [[1, "q"], [2, "q"], [3, "q"]]
            with third.client() as client:
                client.execute("INSERT INTO kv(k, v) VALUES (4, 'from 3')", options=QUORUM)
            assert rs.wait_converged() != converged
            assert rows(first) == rows(second) == rows(third) == [[1, "q"], [2, "q"], [3, "q"], [4, "from 3"]]
        finally:
            if third is not None:  # before its tmpfs goes; the others are the fixture's to stop
                stop_at_end(third)


def test_a_member_restarted_on_a_full_disk_starts_full_in_its_reserve_or_refuses_in_one_line(tmp_path: Path) -> None:
    """Stopped (or killed) on a full disk, a member finds its reserve: it starts in the
    room that leaves, serving reads and refusing writes. With no reserve and no room it
    cannot open its stores: it says so in one line and exits 74, with no traceback."""
    server = Server(tmp_path / "data", tmp_path / "server.log")
    with tmpfs(server.data_dir):
        try:
            server.start()
            with server.client() as client:
                client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
                client.execute("INSERT INTO kv(k, v) VALUES (1, 'kept')")
            server.kill()
            server.port = 0  # a new address, which the member records in the reserve's room
            filler = fill(server.data_dir)
            server.start("--move")
            with server.client() as client:
                assert client.execute("SELECT k, v FROM kv").rows == [[1, "kept"]]
                refused_for_space(lambda: client.execute("INSERT INTO kv(k, v) VALUES (2, 'no')"))
            assert server.stop() == 0

            assert not (server.data_dir / RESERVE_FILE).exists()
            more = fill(server.data_dir, "more")  # what the reserve held is taken too
            with pytest.raises(RuntimeError, match="exited with 74"):
                server.start()
            last = server.log_path.read_text().splitlines()[-1]
            assert '"stopped_on_store_failure"' in last and "cannot start" in last and "no space left" in last
            assert "Traceback" not in server.log_path.read_text()

            filler.unlink()
            more.unlink()
            server.start()
            with server.client() as client:
                client.execute("INSERT INTO kv(k, v) VALUES (2, 'yes')")
                assert client.execute("SELECT k, v FROM kv ORDER BY k").rows == [[1, "kept"], [2, "yes"]]
        finally:
            stop_at_end(server)


def test_a_metastore_that_meets_enospc_stops_the_member_in_one_line_and_the_restart_loses_nothing(
        tmp_path: Path) -> None:
    """The metastore alone on a full tmpfs: the guard, reading the data directory's file
    system, sees room, so RocksDB meets ENOSPC (on a decision record, the fault harness's
    case). RocksDB takes no write after that: the member stops with one line and exit code
    74, no traceback; the write in flight has an unknown outcome, and the restart holds it
    committed or not at all, never half. The writes are DDL statements: a set of one decides
    its other writes alone, without the metastore (docs/decisions.md, "A set of one decides
    alone"), and a DDL statement takes the DDL lock through it all the same."""
    server = Server(tmp_path / "data", tmp_path / "server.log")
    with tmpfs(server.data_dir / "meta"):
        try:
            server.start()
            acknowledged = []
            with server.client() as client:
                client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
                fill(server.data_dir / "meta")
                in_flight = None
                for k in range(1, 1000):
                    try:
                        client.execute(f"CREATE TABLE t{k}(id INTEGER PRIMARY KEY)")
                    except (ConnectionError, ServerError):  # closed mid-way, or refused: unknown, or not done
                        in_flight = k
                        break
                    acknowledged.append([f"t{k}"])
            assert in_flight is not None and server.proc.wait(10) == 74
            log = server.log_path.read_text()
            assert "Traceback" not in log
            assert [e["event"] for e in server.log_events() if e["level"] == "critical"] == ["stopped_on_store_failure"]
            assert "No space left on device" in log

            (server.data_dir / "meta" / "filler").unlink()
            server.start()
            held = rows(server, "SELECT name FROM sqlite_schema WHERE type = 'table' AND name GLOB 't[0-9]*' "
                                "ORDER BY CAST(substr(name, 2) AS INTEGER)")
            assert held in (acknowledged, acknowledged + [[f"t{in_flight}"]])
        finally:
            stop_at_end(server)
