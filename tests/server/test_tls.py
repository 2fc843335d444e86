"""TLS on the listen port, on real processes, with a CA and certificates made in the test:
a set whose members dial each other over TLS joins, replicates and commits quorum writes;
clients reach it with a CA file (`Client.connect`, `replicaset sql --tls-ca`, the PyPI
`tarantool` connector's `transport="ssl"`); a plain client, or one that trusts another
CA, fails cleanly while the member goes on serving."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tarantool
import trustme

from replicaset.config import ConfigError, load
from replicaset.iproto.client import Client, TlsExpected, tls_context
from replicaset.runtime.tls import client_context, server_context
from tests.server.conftest import QUORUM, ReplicaSet, kv_count, quorum_set_of


@pytest.fixture
def ca_files(tmp_path: Path) -> tuple[Path, Path]:
    """A CA file and a member certificate (with its key, one PEM) for 127.0.0.1."""
    ca = trustme.CA()
    ca_path, cert_path = tmp_path / "ca.pem", tmp_path / "member.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    return ca_path, cert_path


def _tls_config(ca_path: Path, cert_path: Path) -> str:
    return (f'tls.cert_file = "{cert_path}"\ntls.key_file = "{cert_path}"\ntls.ca_file = "{ca_path}"\n'
            'cluster.cluster_secret = "over tls too"\n')


def test_a_set_over_tls_joins_replicates_and_commits_quorum_writes(replicaset_factory, ca_files) -> None:
    ca_path, cert_path = ca_files

    def factory(config: str) -> ReplicaSet:
        return replicaset_factory(config + _tls_config(ca_path, cert_path), ssl_context=tls_context(str(ca_path)))

    rs, (first, second, third) = quorum_set_of(factory, 3)
    with third.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'over tls')", options=QUORUM)
    rs.wait_converged()
    assert [kv_count(m) for m in (first, second, third)] == [1, 1, 1]
    assert not [e for e in first.log_events() if e.get("event") in ("tls_handshake_failed", "peer_refused")]


def test_a_plain_client_or_one_trusting_another_ca_fails_cleanly_and_the_member_serves_on(
        replicaset_factory, ca_files, tmp_path: Path) -> None:
    ca_path, cert_path = ca_files
    rs = replicaset_factory(_tls_config(ca_path, cert_path), ssl_context=tls_context(str(ca_path)))
    member = rs.bootstrap()
    with member.client() as kept:  # a TLS client connected all along
        with pytest.raises(TlsExpected, match=f"127.0.0.1:{member.port} expects TLS"):
            Client.connect("127.0.0.1", member.port, timeout_s=0.5)
        other = tmp_path / "other-ca.pem"
        trustme.CA().cert_pem.write_to_path(str(other))
        with pytest.raises(ConnectionError, match="TLS handshake with 127.0.0.1:.* failed: .*certificate verify failed"):
            Client.connect("127.0.0.1", member.port, timeout_s=2, ssl_context=tls_context(str(other)))
        kept.ping()
    # The PyPI connector speaks TLS as to Tarantool Enterprise's SSL transport.
    connector = tarantool.Connection("127.0.0.1", member.port, transport="ssl", ssl_ca_file=str(ca_path),
                                     connection_timeout=5)
    try:
        assert connector.execute("SELECT 6 * 7").data == [[42]]
    finally:
        connector.close()
    out = subprocess.run([sys.executable, "-m", "replicaset.cli", "sql", f"127.0.0.1:{member.port}", "SELECT 7 AS n",
                          "--tls-ca", str(ca_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.splitlines()[:3] == ["n", "-", "7"], out
    out = subprocess.run([sys.executable, "-m", "replicaset.cli", "sql", f"127.0.0.1:{member.port}", "SELECT 7",
                          "--tls-ca", str(tmp_path / "missing.pem")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--tls-ca" in out.stderr and "Traceback" not in out.stderr, out
    failed = [e for e in member.log_events() if e.get("event") == "tls_handshake_failed"]
    assert failed and all(e["remote"].startswith("127.0.0.1:") for e in failed), failed


def test_a_plain_client_on_a_tls_port_learns_at_once_that_it_expects_tls(replicaset_factory, ca_files) -> None:
    """`replicaset sql` / `console` without --tls-ca say what to pass, within about a
    second, instead of waiting 10 s for a greeting; a plain connector (PyPI `tarantool`)
    is disconnected within `CLIENT_HELLO_WAIT_S`; and the port says nothing in plain text."""
    ca_path, cert_path = ca_files
    rs = replicaset_factory(_tls_config(ca_path, cert_path), ssl_context=tls_context(str(ca_path)))
    member = rs.bootstrap()
    address = f"127.0.0.1:{member.port}"
    for command in (["sql", address, "SELECT 1"], ["console", address, "-e", "box.info.id"]):
        started = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "replicaset.cli", *command], capture_output=True, text=True,
                             timeout=30)
        assert time.monotonic() - started < 9, "not a wait for the greeting's 10 s"
        assert out.returncode == 2 and out.stdout == "", out
        assert out.stderr == (f"replicaset: {address} expects TLS: pass --tls-ca FILE (the CA that signed its "
                              "certificate), or --tls to trust the system's CAs\n"), out

    started = time.monotonic()
    with pytest.raises(tarantool.error.NetworkError):
        tarantool.Connection("127.0.0.1", member.port, connection_timeout=30)
    assert time.monotonic() - started < 9, "disconnected once it sent no TLS hello, not after 10 s"

    with socket.create_connection(("127.0.0.1", member.port), timeout=30) as plain:
        assert plain.recv(4096) == b"", "no greeting, no byte in plain text: the port closes"


def test_tls_options_that_cannot_work_stop_the_start_naming_the_option(ca_files, tmp_path: Path) -> None:
    ca_path, cert_path = ca_files
    with pytest.raises(ConfigError, match=r"\[tls\] cert_file and key_file go together"):
        load(overrides={"tls.cert_file": str(cert_path)})
    with pytest.raises(ConfigError, match=r"\[tls\] ca_file is set without cert_file"):
        load(overrides={"tls.ca_file": str(ca_path)})
    missing = load(overrides={"tls.cert_file": str(tmp_path / "none.pem"), "tls.key_file": str(cert_path)})
    with pytest.raises(ConfigError, match=r"\[tls\] cert_file .*none.pem"):
        server_context(missing)
    with pytest.raises(ConfigError, match=r"\[tls\] ca_file .*none.pem"):
        client_context(load(overrides={"tls.cert_file": str(cert_path), "tls.key_file": str(cert_path),
                                       "tls.ca_file": str(tmp_path / "none.pem")}))
    assert server_context(load()) is None and client_context(load()) is None
