"""A small blocking iproto client, for our CLI (`replicaset sql`, `replicaset console`) and tests.

It speaks to our server exactly as a Tarantool connector would (greeting, chap-sha1 AUTH,
EXECUTE, EVAL), so it doubles as a check that the server stays connector-compatible. One
request at a time, one thread: a CLI needs no pipelining, and waiting for each reply keeps
the code obvious. Any failure other than an error reply closes the connection, because a
half-read reply would desynchronise every later request.
"""

import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from .auth import CHAP_SHA1, scramble
from .codec import GREETING_SIZE, Frame, FrameDecoder, Greeting, decode_greeting, encode_request
from .constants import ERROR_TYPE_BIT, Key, MetaKey, RequestType, SqlInfoKey
from .errors import RemoteProtocolError, ServerError

#: Largest reply accepted; a big SELECT result is one frame.
DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
_RECV_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class SqlResult:
    """An EXECUTE reply: columns and rows for a query; row_count (else None) for a change."""

    columns: list[str]
    rows: list[list[Any]]
    row_count: int | None
    autoincrement_ids: list[int]
    vclock: dict[int, int] | None = None  # what a write reached, when OPTIONS asked (`return_vclock`)


class Client:
    """A connection to one server. Create it with `Client.connect`; not thread-safe."""

    def __init__(self, sock: socket.socket, *, greeting: Greeting, max_frame_bytes: int) -> None:
        self._sock = sock
        self._decoder = FrameDecoder(max_frame_bytes)
        self._last_sync = 0
        self.greeting = greeting

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        *,
        user: str | None = None,
        password: str | None = None,
        timeout_s: float = 10.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        ssl_context: ssl.SSLContext | None = None,
    ) -> Self:
        """Connect, read the greeting and, when `user` is given, authenticate.

        `timeout_s` bounds the connect and every later socket read or write. With
        `ssl_context` (see `tls_context`) the connection is TLS, the server's certificate
        checked against it and `host`. A TLS handshake that fails, and a plain connection
        to a TLS port (which greets no one), raise `ConnectionError` saying so.
        """
        sock = socket.create_connection((host, port), timeout=timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if ssl_context is not None:
                try:
                    sock = ssl_context.wrap_socket(sock, server_hostname=host)
                except ssl.SSLError as exc:
                    raise ConnectionError(f"TLS handshake with {host}:{port} failed: {exc}") from exc
            try:
                greeting = decode_greeting(_recv_exactly(sock, GREETING_SIZE))
            except TimeoutError as exc:
                hint = "" if ssl_context is not None else " (a TLS port greets only after a TLS handshake)"
                raise ConnectionError(f"no greeting from {host}:{port} within {timeout_s} s{hint}") from exc
            client = cls(sock, greeting=greeting, max_frame_bytes=max_frame_bytes)
            if user is not None:
                auth_scramble = scramble(password or "", greeting.salt)
                client.call(
                    RequestType.AUTH,
                    {Key.USER_NAME: user, Key.TUPLE: [CHAP_SHA1, auth_scramble]},
                )
        except BaseException:
            sock.close()
            raise
        return client

    def ping(self) -> None:
        self.call(RequestType.PING, {})

    def execute(
        self,
        sql: str,
        binds: Sequence[Any] | Mapping[str, Any] = (),
        *,
        stream_id: int = 0,
        options: Mapping[str, Any] | None = None,
    ) -> SqlResult:
        """Run one SQL statement. A mapping binds by name (`:name` in the SQL), as connectors
        do; `stream_id` groups statements into one interactive transaction; `options` is the
        OPTIONS map (`consistency`, `wait_vclock`, and `return_vclock` for a write whose
        result must hold the vclock it reached, to give another statement as `wait_vclock`)."""
        if isinstance(binds, Mapping):
            bind_list = [{f":{name}": value} for name, value in binds.items()]
        else:
            bind_list = list(binds)
        request: dict[int, Any] = {Key.SQL_TEXT: sql, Key.SQL_BIND: bind_list}
        if options:
            request[Key.OPTIONS] = dict(options)
        reply = self.call(RequestType.EXECUTE, request, stream_id=stream_id)
        body = reply.body
        try:
            columns = [column[MetaKey.FIELD_NAME] for column in body.get(Key.METADATA, [])]
            rows = list(body.get(Key.DATA, []))
            info = body.get(Key.SQL_INFO)
            if info is None:
                return SqlResult(columns=columns, rows=rows, row_count=None, autoincrement_ids=[])
            return SqlResult(
                columns=columns,
                rows=rows,
                row_count=info[SqlInfoKey.ROW_COUNT],
                autoincrement_ids=list(info.get(SqlInfoKey.AUTOINCREMENT_IDS, [])),
                vclock=reply.header.get(Key.VCLOCK),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise RemoteProtocolError(f"malformed EXECUTE reply: {exc!r}", fatal=False) from exc

    def eval(self, expr: str, args: Sequence[Any] = ()) -> list[Any]:
        """EVAL `expr` (the server's admin console language) and return its results."""
        data = self.call(RequestType.EVAL, {Key.EXPR: expr, Key.TUPLE: list(args)}).body.get(
            Key.DATA, []
        )
        if not isinstance(data, list):
            raise RemoteProtocolError("EVAL reply DATA is not an array", fatal=False)
        return data

    def call(
        self, request_type: int, body: dict[int, Any], *, stream_id: int = 0, replica_id: int | None = None
    ) -> Frame:
        """Send any request and return its reply; an error reply raises `ServerError`.

        Pushed CHUNK frames that precede the reply are skipped.
        """
        self._last_sync += 1
        sync = self._last_sync
        try:
            self._sock.sendall(encode_request(request_type, sync, body, stream_id=stream_id, replica_id=replica_id))
            while True:
                frame = self._read_frame()
                if frame.sync != sync:
                    raise RemoteProtocolError(
                        f"reply to sync {frame.sync} while waiting for sync {sync}", fatal=True
                    )
                if frame.request_type != RequestType.CHUNK:
                    break
        except BaseException:
            self.close()
            raise
        if frame.is_error:
            raise ServerError(frame.request_type & (ERROR_TYPE_BIT - 1), _error_message(frame))
        return frame

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _read_frame(self) -> Frame:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            data = self._sock.recv(_RECV_BYTES)
            if not data:
                raise ConnectionError("the server closed the connection")
            self._decoder.feed(data)


def tls_context(ca_file: str | None = None) -> ssl.SSLContext:
    """A client's TLS settings: servers' certificates checked against `ca_file`, or the
    system's trusted CAs when None."""
    return ssl.create_default_context(cafile=ca_file)


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        data = sock.recv(remaining)
        if not data:
            raise ConnectionError("the server closed the connection during the greeting")
        chunks.append(data)
        remaining -= len(data)
    return b"".join(chunks)


def _error_message(frame: Frame) -> str:
    """The message of an error reply: ERROR_24, else the top of the ERROR stack."""
    message = frame.body.get(Key.ERROR_24)
    if isinstance(message, str):
        return message
    try:
        stack_message = frame.body[Key.ERROR][0][0][3]
    except (KeyError, IndexError, TypeError):
        return "unknown error"
    return stack_message if isinstance(stack_message, str) else "unknown error"
