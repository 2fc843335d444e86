"""The Tarantool connectors we support, each opening a fresh connection to a real server:
PyPI `tarantool`, `asynctnt`, and `net.box` in the tarantool 2.6 binary. Each reads the
schema views at connect, as it does for users, then runs what the test asks."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import asynctnt
import pytest

NETBOX_TIMEOUT_S = 60
ASYNCTNT_TIMEOUT_S = 30
T = TypeVar("T")


@pytest.fixture
def tarantool_binary() -> str:
    """The tarantool 2.6 binary, whose `net.box` is Tarantool's own connector."""
    binary = shutil.which("tarantool")
    if binary is None:
        pytest.skip("the tarantool binary (Debian package `tarantool`) is not installed")
    return binary


def run_asynctnt(port: int, body: Callable[[asynctnt.Connection], Awaitable[T]]) -> T:
    """`body` on a fresh asynctnt connection (schema fetched at connect, as by default)."""

    async def session() -> T:
        conn = asynctnt.Connection(host="127.0.0.1", port=port, reconnect_timeout=0, ping_timeout=0,
                                   connect_timeout=10, request_timeout=10)
        await conn.connect()
        try:
            return await body(conn)
        finally:
            await conn.disconnect()

    return asyncio.run(asyncio.wait_for(session(), ASYNCTNT_TIMEOUT_S))


# What every net.box script does around its body: connect to `arg[1]` as a user's script
# would, fill `report` (the body may use `conn` while connected), print it as a JSON line.
NETBOX_FRAME = r"""
local json = require('json')
local conn = require('net.box').connect(arg[1], {wait_connected = 10})
local report = {connected = conn:is_connected(), connect_error = conn.error}
if report.connected then
%s
end
conn:close()
print(json.encode(report))
os.exit(0)
"""


def run_netbox(binary: str, tmp_path: Path, body: str, *args: str) -> dict[str, Any]:
    """A net.box script of `body` run in the tarantool binary with `args` (`arg[1]` is the
    server's `[user:password@]host:port`); the `report` it filled."""
    path = tmp_path / "netbox_script.lua"
    path.write_text(NETBOX_FRAME % body)
    done = subprocess.run([binary, str(path), *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=NETBOX_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
