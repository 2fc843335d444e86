"""The command line as an operator uses it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from replicaset.cli import main
from replicaset.iproto.client import Client
from replicaset.iproto.codec import encode_greeting
from replicaset.iproto.constants import GREETING_VERSION
from replicaset.iproto.errors import ServerError
from replicaset.runtime.node import CLEAN_STOP_FILE
from replicaset.testing.processes import free_port, stop_instance
from tests.server.conftest import BOOTSTRAP_ROWS, REPLICASET_UUID, Server, wait_for


def cli(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "replicaset.cli", *args], capture_output=True, text=True, timeout=timeout_s)


def test_console_prints_box_info_as_yaml(server):
    out = cli("console", f"127.0.0.1:{server.port}", "-e", "box.info")
    assert out.returncode == 0, out.stderr
    (info,) = yaml.safe_load(out.stdout)
    assert info["id"] == 1 and info["status"] == "running" and info["ro"] is False
    assert info["listen"] == f"127.0.0.1:{server.port}"
    assert set(info) >= {"version", "uuid", "cluster", "lsn", "vclock", "signature", "uptime", "pid", "replication"}
    vclock = yaml.safe_load(cli("console", f"127.0.0.1:{server.port}", "-e", "box.info.vclock").stdout)
    assert vclock == [{1: BOOTSTRAP_ROWS}], "bootstrap writes _cluster's DDL and its own row"
    cfg = yaml.safe_load(cli("console", f"127.0.0.1:{server.port}", "-e", "box.cfg").stdout)[0]
    assert cfg["wal_mode"] == "write"
    bad = cli("console", f"127.0.0.1:{server.port}", "-e", "box.info.nothing.at_all")
    assert bad.returncode == 1 and bad.stdout == "" and "attempt to index box.info.nothing (a nil value)" in bad.stderr


def test_sql_command_prints_a_table(server):
    address = f"127.0.0.1:{server.port}"
    assert cli("sql", address, "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT)").returncode == 0
    changed = cli("sql", address, "INSERT INTO t VALUES (?, ?)", "--bind", "7", "--bind", "seven")
    assert "1 row(s) changed" in changed.stdout
    table = cli("sql", address, "SELECT id, name FROM t")
    assert table.stdout.splitlines()[0].split() == ["id", "|", "name"]
    assert "7  | seven" in table.stdout and "(1 row)" in table.stdout
    err = cli("sql", address, "SELECT * FROM missing")
    assert err.returncode == 1 and "no such table" in err.stderr


def test_snapshot_creates_a_checkpoint_named_by_signature(server):
    with server.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        client.execute("INSERT INTO t VALUES (1)")
        assert client.eval("box.snapshot()") == ["ok"]
    assert [p.name for p in (server.data_dir / "snap").glob("*.snap")] == [f"{BOOTSTRAP_ROWS + 2:020d}.snap"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_signal_stops_cleanly_and_serve_resumes(server, signum: signal.Signals):
    with server.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        client.execute("INSERT INTO t VALUES (1)")
    assert server.stop(signum) == 0
    events = server.log_events()
    assert any(e.get("event") == "signal" and e.get("signal") == signum.name for e in events)
    assert any(e.get("event") == "stopped" and e.get("instance_id") == 1 for e in events)
    assert (server.data_dir / CLEAN_STOP_FILE).exists(), "the node flushed and closed its engine"
    server.start()
    with server.client() as client:
        assert client.execute("SELECT id FROM t").rows == [[1]]
        assert client.eval("box.info.lsn") == [BOOTSTRAP_ROWS + 2]


def test_every_log_line_is_json_with_instance_id(server):
    with server.client() as client:
        client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
    server.stop()
    events = server.log_events()
    assert events and all(e.get("instance_id") == 1 for e in events)
    lines = [l for l in server.log_path.read_text().splitlines() if l.strip()]
    assert len(lines) == len(events), "every log line is one JSON object"


def test_invalid_config_is_refused_at_start_naming_the_option(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('wal_mode = "sometimes"\n')
    out = cli("bootstrap", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:1", "--config", str(config))
    assert out.returncode == 2 and "wal_mode" in out.stderr
    missing = cli("serve", "--data-dir", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "bootstrap" in missing.stderr


def test_a_listen_address_in_use_stops_the_member_with_one_line_and_exit_code_71(tmp_path):
    """An operator starting a member on a port another process holds reads why, not a
    traceback, and a supervisor gets an exit code that says "operating system error"."""
    port = free_port()
    with socket.create_server(("127.0.0.1", port)):
        out = cli("bootstrap", "--data-dir", str(tmp_path / "i1"), "--listen", f"127.0.0.1:{port}")
    assert out.returncode == 71, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    (critical,) = [json.loads(line) for line in (out.stdout + out.stderr).splitlines()
                   if '"level": "critical"' in line]
    assert critical["event"] == "listen_failed", critical
    assert f"cannot listen on 127.0.0.1:{port}" in critical["error"] and "in use" in critical["error"], critical


def test_read_only_refuses_writes_but_serves_reads(tmp_path):
    config = tmp_path / "ro.toml"
    config.write_text("read_only = true\n")
    srv = Server(tmp_path / "d", tmp_path / "log").start("--config", str(config))
    try:
        with srv.client() as client:
            with pytest.raises(ServerError) as refused:
                client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            assert refused.value.code == 7 and "read-only" in refused.value.message
            assert client.execute("SELECT 1 + 1").rows == [[2]]
            assert client.eval("box.info.ro") == [True]
    finally:
        srv.stop()


def test_password_authentication(tmp_path):
    config = tmp_path / "auth.toml"
    config.write_text('[auth]\nguest = false\nusers = { admin = "s3cret" }\n')
    srv = Server(tmp_path / "d", tmp_path / "log").start("--config", str(config))
    try:
        with srv.client(user="admin", password="s3cret") as client:
            client.execute("CREATE TABLE t(id INTEGER PRIMARY KEY)")
        with pytest.raises(ServerError) as wrong:
            srv.client(user="admin", password="nope")
        assert wrong.value.code == 47
        with srv.client() as anonymous:
            with pytest.raises(ServerError) as denied:
                anonymous.execute("SELECT 1")
            assert denied.value.code == 42
    finally:
        srv.stop()


def serve_with_no_listen_flag(data_dir: Path, log_path: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """`replicaset serve` with no --listen (what `Server.start` always passes), answering at `port`."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "replicaset.cli", "serve", "--data-dir", str(data_dir), *extra],
                                stdout=log, stderr=log)

    def answers() -> bool:
        assert proc.poll() is None, f"exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
        try:
            with Client.connect("127.0.0.1", port, timeout_s=1.0) as client:
                client.ping()
            return True
        except OSError:
            return False

    try:
        wait_for(answers, f"the member answering at 127.0.0.1:{port}")
    except BaseException:
        stop_instance(proc)
        raise
    return proc


def test_serve_with_a_config_file_keeps_every_kept_option_the_file_does_not_set(tmp_path):
    """The file overrides the config the data directory keeps option by option: one
    without `listen` leaves the member at its address, and the kept `[replication]` option
    it does not name stays beside the one it does."""
    kept = tmp_path / "kept.toml"
    kept.write_text("replication_timeout = 0.5\n[replication]\nsynchro_timeout_s = 7\n")
    srv = Server(tmp_path / "d", tmp_path / "log").start("--config", str(kept))
    srv.stop()
    given = tmp_path / "given.toml"
    given.write_text('[replication]\ndefault_write_consistency = "one"\n')
    proc = serve_with_no_listen_flag(srv.data_dir, srv.log_path, srv.port, "--config", str(given))
    try:
        with srv.client() as client:
            cfg = client.eval("box.cfg")[0]
        assert cfg["listen"] == f"127.0.0.1:{srv.port}" and cfg["replication_timeout"] == 0.5
        assert cfg["replication.synchro_timeout_s"] == 7 and cfg["replication.default_write_consistency"] == "one"
    finally:
        assert stop_instance(proc) == 0


def address_refusal(out: subprocess.CompletedProcess[str]) -> tuple[str, dict]:
    """The one human line and the one critical JSON line of a start refused for its address."""
    assert out.returncode == 78, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    lines = (out.stdout + out.stderr).splitlines()
    (human,) = [line for line in lines if line.startswith("replicaset: ")]
    (critical,) = [json.loads(line) for line in lines if '"level": "critical"' in line]
    assert critical["event"] == "address_mismatch" and critical["exit_code"] == 78, critical
    return human, critical


def test_a_member_started_at_another_address_than_its_registered_one_refuses_with_exit_code_78(replicaset):
    """Its peers dial the address in `_cluster`: started elsewhere it would see them all
    dead and stay `loading`. It refuses, naming both addresses and what to do; the unclean
    stop before the refused start is still recovered from at the next one."""
    first = replicaset.bootstrap()
    second = replicaset.join(first)
    replicaset.wait_converged()
    second.kill()
    registered, other = f"127.0.0.1:{second.port}", f"127.0.0.1:{free_port()}"
    out = cli("serve", "--data-dir", str(second.data_dir), "--listen", other)
    human, critical = address_refusal(out)
    assert f"registered at {registered}" in human and f"started at {other}" in human, human
    assert "cannot move in place" in human and "box.remove(2)" in human, human
    assert critical["registered"] == registered and critical["listen"] == other, critical
    moved = cli("serve", "--data-dir", str(second.data_dir), "--listen", other, "--move")
    assert "cannot move in place" in address_refusal(moved)[0]

    second.start()
    assert any(e.get("event") == "recovering_own_rows" for e in second.log_events()), "still an unclean stop"
    replicaset.wait_status(second, "running")


def test_a_member_alone_in_its_set_moves_only_when_told_to(tmp_path):
    srv = Server(tmp_path / "d", tmp_path / "log").start()
    registered = f"127.0.0.1:{srv.port}"
    srv.stop()
    srv.port = free_port()
    human, _ = address_refusal(cli("serve", "--data-dir", str(srv.data_dir), "--listen", f"127.0.0.1:{srv.port}"))
    assert f"registered at {registered}" in human and f"--listen 127.0.0.1:{srv.port} --move" in human, human
    srv.start("--move")
    try:
        with srv.client() as client:
            assert client.execute("SELECT address FROM _cluster").rows == [[f"127.0.0.1:{srv.port}"]]
    finally:
        srv.stop()
    srv.start()  # registered where it listens now
    srv.stop()


@pytest.fixture
def closed_server(tmp_path: Path) -> Iterator[Server]:
    config = tmp_path / "auth.toml"
    config.write_text('[auth]\nguest = false\nusers = { admin = "s3cret" }\n')
    srv = Server(tmp_path / "d", tmp_path / "log").start("--config", str(config))
    yield srv
    srv.stop()


class GreetThenHangUp:
    """A server that greets, then closes each connection at its first request."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                conn.sendall(encode_greeting(version=GREETING_VERSION, instance_uuid=REPLICASET_UUID,
                                             salt=bytes(32)))
                conn.recv(4096)

    def close(self) -> None:
        self.listener.close()
        self.thread.join(10)


@pytest.mark.parametrize("command", ["sql", "console"])
def test_client_commands_fail_in_one_line_with_an_exit_code(closed_server, command, capsys):
    """A wrong password, a server that refuses the request, one that is not there, a host
    that does not resolve, a server that hangs up: one line on stderr each, never a
    traceback; 1 when the server answered with an error, 2 when it could not be talked to."""
    address = f"127.0.0.1:{closed_server.port}"
    request, bad = ((["SELECT 1"], ["SELEC 1"]) if command == "sql"
                    else (["-e", "box.info.id"], ["-e", "box.nothing.at_all"]))
    admin = ["--user", "admin", "--password", "s3cret"]

    def run(target: str, *args: str) -> tuple[int, str]:
        code = main([command, target, *args])
        out = capsys.readouterr()
        assert out.err.count("\n") == 1 and out.err.startswith("replicaset: "), out
        assert out.out == "", out
        return code, out.err

    code, err = run(address, *request, "--user", "admin", "--password", "nope")
    assert code == 1 and "refused the login as 'admin'" in err
    assert "error 47 (ER_CREDS_MISMATCH): User not found or supplied credentials are invalid" in err, err
    code, err = run(address, *bad, *admin)
    assert code == 1 and ('error 159 (ER_SQL_EXECUTE): near "SELEC"' in err
                          or "attempt to index box.nothing (a nil value)" in err), err
    code, err = run(address, *request)
    assert code == 1 and "error 42 (ER_ACCESS_DENIED)" in err, err
    nobody = free_port()
    code, err = run(f"127.0.0.1:{nobody}", *request)
    assert code == 2 and f"cannot connect to 127.0.0.1:{nobody}: Connection refused" in err, err
    code, err = run("nosuchhost.invalid:3301", *request)
    assert code == 2 and "cannot resolve the host 'nosuchhost.invalid'" in err, err
    hangs_up = GreetThenHangUp()
    try:
        code, err = run(f"127.0.0.1:{hangs_up.port}", *request)
    finally:
        hangs_up.close()
    assert code == 2 and f"lost the connection to 127.0.0.1:{hangs_up.port}: the server closed the connection" in err
