"""A node serving iproto: every accepted connection gets a Session of its own."""

from __future__ import annotations

from typing import Any

import trio

from replicaset.runtime.node import Node
from replicaset.runtime.session import Session


async def serve(node: Node, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async def serve_connection(stream: trio.SocketStream) -> None:
        await Session(node, stream).run()

    await node.run(serve_connection, task_status=task_status)
