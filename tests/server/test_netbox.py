"""Tarantool's own client, `net.box` in the tarantool 2.6 binary, against a real server process.

net.box loads the schema at connect (`_vspace`, `_vindex` and `_vcollation`) and again after
every reply that carries a new schema version, and gives up on the connection when one of
those SELECTs is refused; then it runs SQL with EXECUTE. The script reports what it saw as
one JSON line, which the test checks.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

NETBOX_TIMEOUT_S = 60
NETBOX_SCRIPT = r"""
local json = require('json')
local report = {}
local conn = require('net.box').connect('127.0.0.1:' .. arg[1], {wait_connected = 10})
report.connected = conn:is_connected()
report.connect_error = conn.error
local function run(sql, binds)
    local ok, result = pcall(conn.execute, conn, sql, binds)
    if ok then return result end
    return {error = tostring(result)}
end
if report.connected then
    report.create = run("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
    report.insert_1 = run("INSERT INTO kv(k, v) VALUES (?, ?)", {1, 'x'})
    report.insert_2 = run("INSERT INTO kv(k, v) VALUES (?, ?)", {2, 'y'})
    report.select = run("SELECT k, v FROM kv WHERE k = ?", {2})
    -- CREATE TABLE changed the schema version: net.box reloads the views before going active
    conn:wait_state('active', 10)
    local kv = conn.space.kv
    report.kv_format = kv and kv:format()
    report.kv_primary_key = kv and kv.index.pk and kv.index.pk.parts
end
conn:close()
print(json.encode(report))
os.exit(0)
"""


@pytest.fixture
def tarantool_binary() -> str:
    binary = shutil.which("tarantool")
    if binary is None:
        pytest.skip("the tarantool binary (Debian package `tarantool`) is not installed")
    return binary


def run_netbox(binary: str, tmp_path: Path, port: int) -> dict:
    script = tmp_path / "netbox.lua"
    script.write_text(NETBOX_SCRIPT)
    done = subprocess.run(
        [binary, str(script), str(port)], cwd=tmp_path, capture_output=True, text=True, timeout=NETBOX_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_netbox_connects_and_runs_sql_with_binds(tarantool_binary, server, tmp_path):
    report = run_netbox(tarantool_binary, tmp_path, server.port)
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
