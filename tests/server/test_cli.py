"""The command line as an operator uses it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest
import yaml

from replicaset.iproto.errors import ServerError
from replicaset.runtime.node import CLEAN_STOP_FILE
from replicaset.testing.processes import free_port
from tests.server.conftest import BOOTSTRAP_ROWS, Server


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
    assert bad.returncode == 1 and "attempt to index box.info.nothing (a nil value)" in bad.stdout


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
