"""Tarantool's own client, `net.box` in the tarantool 2.6 binary, against a real server process.

net.box loads the schema at connect (`_vspace`, `_vindex` and `_vcollation`) and again after
every reply that carries a new schema version, and gives up on the connection when one of
those SELECTs is refused; then it runs SQL with EXECUTE. The script reports what it saw as
one JSON line, which the test checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import Server, running
from tests.server.connectors import run_netbox, tarantool_binary  # noqa: F401 - a fixture
NETBOX_SCRIPT = r"""
    local function run(sql, binds)
        local ok, result = pcall(conn.execute, conn, sql, binds)
        if ok then return result end
        return {error = tostring(result)}
    end
    report.create = run("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    report.insert_1 = run("INSERT INTO kv(k, v) VALUES (?, ?)", {1, 'x'})
    report.insert_2 = run("INSERT INTO kv(k, v) VALUES (?, ?)", {2, 'y'})
    report.select = run("SELECT k, v FROM kv WHERE k = ?", {2})
    -- CREATE TABLE changed the schema version: net.box reloads the views before going active
    conn:wait_state('active', 10)
    local kv = conn.space.kv
    report.kv_format = kv and kv:format()
    report.kv_primary_key = kv and kv.index.pk and kv.index.pk.parts
"""


@pytest.fixture
def server_with_users(tmp_path: Path) -> Iterator[Server]:
    config = tmp_path / "users.toml"
    config.write_text('[auth]\nguest = false\nusers = { alice = "secret" }\n')
    with running(tmp_path, "--config", str(config)) as srv:
        yield srv


def netbox_session(binary: str, tmp_path: Path, uri: str) -> dict:
    """The script against `uri` (net.box's `[user:password@]host:port`)."""
    return run_netbox(binary, tmp_path, NETBOX_SCRIPT, uri)


def test_netbox_connects_and_runs_sql_with_binds(tarantool_binary, server, tmp_path):
    report = netbox_session(tarantool_binary, tmp_path, f"127.0.0.1:{server.port}")
    assert report["connected"] is True, report.get("connect_error")
    assert report["create"] == {"row_count": 1}
    assert report["insert_1"] == {"row_count": 1}
    assert report["insert_2"] == {"row_count": 1}
    assert report["select"] == {
        "metadata": [{"name": "k", "type": "integer"}, {"name": "v", "type": "string"}],
        "rows": [[2, "y"]],
    }
    # net.box built the space from our _vspace and _vindex rows after the schema changed
    assert report["kv_format"] == [
        {"name": "k", "type": "integer", "is_nullable": False},
        {"name": "v", "type": "string", "is_nullable": True},
    ]
    assert report["kv_primary_key"] == [{"fieldno": 1, "type": "integer", "is_nullable": False}]


def test_netbox_authenticates_with_chap_sha1(tarantool_binary, server_with_users, tmp_path):
    # net.box sends the scramble as a msgpack str of raw bytes, where PyPI `tarantool` sends bin
    port = server_with_users.port
    report = netbox_session(tarantool_binary, tmp_path, f"alice:secret@127.0.0.1:{port}")
    assert report["connected"] is True, report.get("connect_error")
    assert report["select"]["rows"] == [[2, "y"]]
    refused = netbox_session(tarantool_binary, tmp_path, f"alice:wrong@127.0.0.1:{port}")
    assert refused["connected"] is False
    assert "credentials are invalid" in refused["connect_error"]
