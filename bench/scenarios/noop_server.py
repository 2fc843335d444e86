"""A do-nothing iproto server built from our codec on trio, in its own process: it answers
every EXECUTE with "1 row affected" and never touches SQL or a WAL, so its ops/s are the
ceiling of our stack (connector + loopback + codec + trio). Run as
`python -m bench.scenarios.noop_server PORT` (0: any free port, printed as a JSON line);
it exits on SIGTERM or when its parent is gone."""

from __future__ import annotations

import functools
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from bench.kit.procs import HOST
from bench.kit.report import MIB

Execute = Callable[[], Awaitable[None]]
Handler = Callable[[trio.SocketStream], Awaitable[None]]


def main(port: int) -> int:
    return serve_clients(port)


def serve_clients(port: int, start: Callable[[trio.Nursery], Awaitable[Execute]] | None = None) -> int:
    """Answer clients on `port` until SIGTERM or the parent is gone. With `start`, it is
    awaited once in the server's nursery (to connect to peers, start tasks) and returns what
    every EXECUTE awaits before its "1 row affected": `noop_quorum`'s coordinator."""
    from replicaset import __version__
    from replicaset.iproto.codec import FrameDecoder, encode_error, encode_greeting, encode_ok
    from replicaset.iproto.constants import ErrorCode, Feature, Key, RequestType, SqlInfoKey
    from replicaset.iproto.errors import RemoteProtocolError

    schema_version = 1
    instance_uuid = "00000000-0000-4000-8000-00000000b0b0"
    execute_body = {int(Key.SQL_INFO): {int(SqlInfoKey.ROW_COUNT): 1}}
    empty_data = {int(Key.DATA): []}
    id_body = {
        int(Key.VERSION): 3,
        int(Key.FEATURES): [int(Feature.STREAMS), int(Feature.TRANSACTIONS), int(Feature.ERROR_EXTENSION)],
    }
    execute, select, ping, auth, ident = (
        int(RequestType.EXECUTE), int(RequestType.SELECT), int(RequestType.PING),
        int(RequestType.AUTH), int(RequestType.ID),
    )
    on_execute: Execute | None = None

    def answer(frame: Any) -> bytes:
        kind = frame.request_type
        if kind == execute:
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=execute_body)
        if kind == select:  # the connector's _vspace / _vindex schema reads
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=empty_data)
        if kind in (ping, auth):
            return encode_ok(sync=frame.sync, schema_version=schema_version)
        if kind == ident:
            return encode_ok(sync=frame.sync, schema_version=schema_version, body=id_body)
        return encode_error(
            sync=frame.sync, schema_version=schema_version,
            code=ErrorCode.UNKNOWN_REQUEST_TYPE, message=f"Unknown request type {kind}",
        )

    async def serve(stream: trio.SocketStream) -> None:
        # Same greeting version as our server, so the connector takes the same path.
        greeting = encode_greeting(version=__version__, instance_uuid=instance_uuid, salt=os.urandom(32))
        decoder = FrameDecoder(16 * MIB)
        try:
            await stream.send_all(greeting)
            while True:
                data = await stream.receive_some(64 * 1024)
                if not data:
                    return
                decoder.feed(data)
                replies = []
                while True:
                    try:
                        frame = decoder.next_frame()
                    except RemoteProtocolError as exc:
                        if exc.fatal:
                            return
                        replies.append(encode_error(sync=exc.sync or 0, schema_version=schema_version, code=exc.code, message=exc.message))
                        continue
                    if frame is None:
                        break
                    if on_execute is not None and frame.request_type == execute:
                        await on_execute()
                    replies.append(answer(frame))
                if replies:
                    await stream.send_all(b"".join(replies))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await trio.aclose_forcefully(stream)

    async def begin(nursery: trio.Nursery) -> None:
        nonlocal on_execute
        if start is not None:
            on_execute = await start(nursery)

    return run_until_stopped(port, serve, begin)


def run_until_stopped(port: int, handler: Handler, start: Callable[[trio.Nursery], Awaitable[None]]) -> int:
    """Serve `handler` on `port` (after awaiting `start` in the same nursery), print the
    port bound as a JSON line, and return on SIGTERM or SIGINT or once the parent is gone."""

    async def run() -> None:
        parent = os.getppid()
        async with trio.open_nursery() as nursery:
            await start(nursery)
            listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, port, host=HOST))
            bound = listeners[0].socket.getsockname()[1]
            print(json.dumps({"event": "listening", "port": bound}), flush=True)

            async def watch_parent() -> None:
                while os.getppid() == parent:
                    await trio.sleep(1.0)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_parent)
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    return

    trio.run(run)
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
