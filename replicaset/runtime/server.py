"""A node serving iproto: every accepted connection gets a Session of its own, up to
`max_connections` at once (peers' links count too); one past it is told so and closed.
On a TLS port a connection first completes its handshake, within `HANDSHAKE_TIMEOUT_S`,
its first byte within `CLIENT_HELLO_WAIT_S`."""

from __future__ import annotations

import os
from typing import Any

import trio

from replicaset.iproto.codec import FrameDecoder, encode_error, encode_greeting
from replicaset.iproto.constants import GREETING_VERSION, ErrorCode
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.runtime.node import Node
from replicaset.runtime.peer_access import remote_address
from replicaset.runtime.session import Session
from replicaset.runtime.tls import CLIENT_HELLO_WAIT_S, HANDSHAKE_TIMEOUT_S

# How long a refused connection may take to send the request its refusal answers.
REFUSAL_WAIT_S = 1.0
REFUSAL_READ_BYTES = 4096


async def serve(node: Node, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    limit = int(node.config["max_connections"])
    open_sessions = 0

    async def serve_connection(accepted: trio.abc.Stream) -> None:
        nonlocal open_sessions
        stream: trio.abc.Stream = accepted
        if node.server_tls is not None:
            stream = trio.SSLStream(accepted, node.server_tls, server_side=True)
        if open_sessions >= limit:
            node.log.warning("connection_refused", reason="max_connections", max_connections=limit)
            await _refuse(node, stream, f"too many connections: max_connections = {limit}")
            return
        open_sessions += 1
        try:
            if isinstance(stream, trio.SSLStream) and not await _handshake(node, stream):
                return
            await Session(node, stream).run()
        finally:
            open_sessions -= 1

    observers = []
    if node.config.metrics_listen:  # it observes every quorum commit from the start
        # Imported here: prometheus_client is 2.8 MB of a member's memory, for members
        # that export metrics only.
        from replicaset.runtime.metrics import serve_metrics

        observers.append(serve_metrics)
    await node.run(serve_connection, observers=observers, task_status=task_status)


async def _handshake(node: Node, stream: trio.SSLStream[trio.SocketStream]) -> bool:
    """False, the connection closed and the reason logged, when the client does not speak
    TLS or fails it. A TLS client sends its hello as soon as it is connected; a plain
    iproto client sends nothing, waiting for a greeting that a TLS port never sends in
    plain text, so a client silent for `CLIENT_HELLO_WAIT_S` is closed then, not after
    the whole `HANDSHAKE_TIMEOUT_S`: a connector learns in seconds that it reached no
    plain iproto port. The remote address is read first: a client that gave up has reset
    the socket by the end."""
    remote = remote_address(stream)
    try:
        with trio.move_on_after(CLIENT_HELLO_WAIT_S) as silent:
            await trio.lowlevel.wait_readable(stream.transport_stream.socket)
        if silent.cancelled_caught:
            error = f"the client sent nothing within {CLIENT_HELLO_WAIT_S} s: not a TLS client"
        else:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            return True
    except (trio.TooSlowError, trio.BrokenResourceError) as exc:
        error = f"no handshake within {HANDSHAKE_TIMEOUT_S} s" if isinstance(exc, trio.TooSlowError) else str(
            exc.__cause__ or exc)
    node.log.info("tls_handshake_failed", remote=remote, error=error)
    await trio.aclose_forcefully(stream)
    return False


async def _refuse(node: Node, stream: trio.abc.Stream, message: str) -> None:
    """Greet, answer the first request (a connector sends one at once: ID, AUTH or its
    first call) with the error, and close: the client learns why, within a bounded time."""
    try:
        await stream.send_all(encode_greeting(version=GREETING_VERSION, instance_uuid=node.identity.instance_uuid,
                                              salt=os.urandom(32)))
        decoder = FrameDecoder(REFUSAL_READ_BYTES)
        sync = 0
        with trio.move_on_after(REFUSAL_WAIT_S):
            while (frame := decoder.next_frame()) is None:
                data = await stream.receive_some(REFUSAL_READ_BYTES)
                if not data:
                    break
                decoder.feed(data)
            else:
                sync = frame.sync
        await stream.send_all(encode_error(sync=sync, schema_version=node.schema_version, code=ErrorCode.SYSTEM,
                                           message=message))
    except (trio.BrokenResourceError, trio.ClosedResourceError, RemoteProtocolError):
        pass
    finally:
        await trio.aclose_forcefully(stream)
