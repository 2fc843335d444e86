"""A tiny threaded iproto server on loopback, built only from the codec, for wire tests.

It lets real clients (the PyPI `tarantool` connector and our `Client`) talk to our encodings
over a socket without the server runtime. It is bounded: sockets time out, threads are
daemons, and `stop()` joins everything, so a broken test fails instead of hanging.
"""

import socket
import threading
from types import TracebackType
from typing import Any, Self

from replicaset.iproto import (
    CHAP_SHA1,
    GREETING_VERSION,
    IPROTO_PROTOCOL_VERSION,
    ErrorCode,
    Feature,
    Field,
    Frame,
    FrameDecoder,
    Key,
    RemoteProtocolError,
    RequestType,
    SystemView,
    check_scramble,
    decode_binds,
    encode_error,
    encode_greeting,
    encode_ok,
    metadata,
    sql_info,
    vindex_tuple,
    vspace_tuple,
)

SALT = bytes(range(32))
INSTANCE_UUID = "3b151c25-4c4a-4b5d-8042-0f1b3a6f61c3"
SCHEMA_VERSION = 7
PASSWORDS = {"alice": "secret"}
USERS_SPACE_ID = 512
MAX_FRAME_BYTES = 1 << 20
_SOCKET_TIMEOUT_S = 5.0
_POLL_S = 0.05
_USERS_FIELDS = (
    Field(name="ID", type="integer", is_nullable=False),
    Field(name="NAME", type="string", is_nullable=True),
)


class FakeServer:
    """Accepts connections and answers each frame with `answer` (the canned replies below)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(_POLL_S)
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self.requests: list[Frame] = []  # every frame received, for assertions

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()
        return host, port

    def __enter__(self) -> Self:
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stopped.set()
        for thread in list(self._threads):
            thread.join(timeout=_SOCKET_TIMEOUT_S)
        self._listener.close()

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._spawn(self._serve, conn)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_POLL_S)
            conn.sendall(
                encode_greeting(version=GREETING_VERSION, instance_uuid=INSTANCE_UUID, salt=SALT)
            )
            decoder = FrameDecoder(MAX_FRAME_BYTES)
            idle_s = 0.0
            while not self._stopped.is_set() and idle_s < _SOCKET_TIMEOUT_S:
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    idle_s += _POLL_S
                    continue
                if not data:
                    return
                idle_s = 0.0
                decoder.feed(data)
                replies = []
                while True:
                    try:
                        frame = decoder.next_frame()
                    except RemoteProtocolError as exc:
                        if exc.fatal:
                            return
                        replies.append(_error(exc.sync or 0, exc.code, exc.message))
                        continue
                    if frame is None:
                        break
                    self.requests.append(frame)
                    replies.append(answer(frame))
                conn.sendall(b"".join(replies))


def answer(frame: Frame) -> bytes:
    """The canned reply to one request, as a Tarantool 2.10 with one SQL table would give."""
    sync, body = frame.sync, frame.body
    match frame.request_type:
        case RequestType.ID:
            return _ok(
                sync,
                {
                    Key.VERSION: IPROTO_PROTOCOL_VERSION,
                    Key.FEATURES: [Feature.STREAMS, Feature.TRANSACTIONS, Feature.ERROR_EXTENSION],
                    Key.AUTH_TYPE: CHAP_SHA1,
                },
            )
        case RequestType.AUTH:
            return _auth(sync, body)
        case RequestType.PING:
            return _ok(sync)
        case RequestType.SELECT if body.get(Key.SPACE_ID) == SystemView.VSPACE:
            return _ok(sync, {Key.DATA: [vspace_tuple(USERS_SPACE_ID, "USERS", _USERS_FIELDS)]})
        case RequestType.SELECT if body.get(Key.SPACE_ID) == SystemView.VINDEX:
            pk = vindex_tuple(USERS_SPACE_ID, 0, "pk_unnamed_USERS_1", _USERS_FIELDS, [0])
            by_name = vindex_tuple(USERS_SPACE_ID, 1, "BY_NAME", _USERS_FIELDS, [1], unique=False)
            return _ok(sync, {Key.DATA: [pk, by_name]})
        case RequestType.EXECUTE:
            return _execute(frame)
        case RequestType.EVAL:
            if body.get(Key.EXPR) == "return ...":
                return _ok(sync, {Key.DATA: body.get(Key.TUPLE, [])})
            return _error(sync, ErrorCode.UNSUPPORTED, "eval supports only 'return ...'")
    return _error(
        sync, ErrorCode.UNKNOWN_REQUEST_TYPE, f"Unknown request type {frame.request_type}"
    )


def _auth(sync: int, body: dict[int, Any]) -> bytes:
    user, method_and_scramble = body.get(Key.USER_NAME), body.get(Key.TUPLE)
    password = PASSWORDS.get(user) if isinstance(user, str) else None
    if (
        password is not None
        and isinstance(method_and_scramble, list)
        and len(method_and_scramble) == 2
        and method_and_scramble[0] == CHAP_SHA1
        and check_scramble(method_and_scramble[1], SALT, password)
    ):
        return _ok(sync)
    return _error(
        sync, ErrorCode.CREDS_MISMATCH, "User not found or supplied credentials are invalid"
    )


def _execute(frame: Frame) -> bytes:
    sync, body = frame.sync, frame.body
    sql = body.get(Key.SQL_TEXT)
    try:
        binds = decode_binds(body.get(Key.SQL_BIND))
    except RemoteProtocolError as exc:
        return _error(sync, exc.code, exc.message)
    if sql == "SELECT ID, NAME FROM USERS":
        columns = metadata([("ID", "integer"), ("NAME", "string")])
        return _ok(sync, {Key.METADATA: columns, Key.DATA: [[1, "ann"], [2, "bob"]]})
    if sql == "INSERT INTO USERS(NAME) VALUES ('cid')":
        return _ok(sync, {Key.SQL_INFO: sql_info(1, [3])})
    if sql == "DELETE FROM USERS":
        return _ok(sync, {Key.SQL_INFO: sql_info(3, [])})
    if sql == "ECHO BINDS":
        pairs = binds.items() if isinstance(binds, dict) else enumerate(binds, start=1)
        columns = metadata([("PARAMETER", "any"), ("VALUE", "any")])
        return _ok(sync, {Key.METADATA: columns, Key.DATA: [[k, v] for k, v in pairs]})
    if sql == "ECHO STREAM":
        columns = metadata([("STREAM_ID", "integer")])
        return _ok(sync, {Key.METADATA: columns, Key.DATA: [[frame.stream_id]]})
    return _error(sync, ErrorCode.SQL_EXECUTE, f"Failed to execute SQL statement: {sql}")


def _ok(sync: int, body: dict[int, Any] | None = None) -> bytes:
    return encode_ok(sync=sync, schema_version=SCHEMA_VERSION, body=body)


def _error(sync: int, code: int, message: str) -> bytes:
    return encode_error(sync=sync, schema_version=SCHEMA_VERSION, code=code, message=message)
