"""iproto framing without I/O: bytes in, frames out; values in, bytes out.

Theory of operation. After the 128-byte greeting, both directions of an iproto connection
are a sequence of frames: a msgpack unsigned integer N, then N bytes holding a header map
and an optional body map. `FrameDecoder` buffers whatever the caller received and hands out
whole frames, so the caller owns the socket, the timeouts and the concurrency.

Errors split on whether the frame boundary survives. The length prefix is the only thing
that says where the next frame starts, so a bad or oversize prefix is fatal: the decoder
stops for good and the caller must close the connection. Anything wrong inside a frame whose
length was fine (bad msgpack, a header that is not a map, trailing bytes) is not fatal: the
frame is skipped, the error carries the frame's sync when it could be read, and the caller
answers with an error reply and goes on with the next frame.

Each frame is decoded by its own `msgpack.Unpacker` sized to that frame, so msgpack's
length limits (strings, arrays, maps) never exceed the frame: a container header claiming
billions of elements cannot make msgpack preallocate more slots than the frame has bytes.
"""

import base64
import binascii
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import msgpack

from .constants import ERROR_TYPE_BIT, ErrorCode, Key, RequestType
from .errors import LocalProtocolError, RemoteProtocolError

GREETING_SIZE = 128
#: Tarantool's salt length; only its first 20 bytes enter the chap-sha1 scramble.
SALT_SIZE = 32
_GREETING_LINE_CHARS = 63  # each 64-byte line ends in "\n"
_SCRAMBLE_SALT_BYTES = 20

_UINT32_MAX = 0xFFFF_FFFF
# Byte widths of the msgpack unsigned integer encodings that may carry a frame length.
_UINT_WIDTH = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
# Everything msgpack raises about bad input: its own errors (OutOfData, FormatError,
# StackError, ExtraData), ValueError for limits and invalid UTF-8, TypeError for map keys
# that Python cannot hash.
_MSGPACK_ERRORS = (msgpack.UnpackException, ValueError, TypeError)

# Plain ints for the hot paths: IntEnum member lookups cost more than module globals.
_REQUEST_TYPE = int(Key.REQUEST_TYPE)
_SYNC = int(Key.SYNC)
_SCHEMA_VERSION = int(Key.SCHEMA_VERSION)
_VCLOCK = int(Key.VCLOCK)
_STREAM_ID = int(Key.STREAM_ID)
_ERROR_24 = int(Key.ERROR_24)
_ERROR = int(Key.ERROR)
_OK = int(RequestType.OK)
_AUTH = int(RequestType.AUTH)
_TUPLE = int(Key.TUPLE)
_UINT_HEADER_KEYS = (_SYNC, _SCHEMA_VERSION, _STREAM_ID)

# Shared by all encoders. msgpack's C packer does not release the GIL while packing plain
# values and clears its buffer when packing fails, so one instance serves every caller.
_packer = msgpack.Packer()
_PREFIX = struct.Struct(">BI")


@dataclass(frozen=True, slots=True, kw_only=True)
class Greeting:
    """What a server's greeting says: its version, its instance UUID and the auth salt."""

    version: str
    instance_uuid: str
    salt: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame:
    """One decoded frame. `size` counts its bytes on the wire, length prefix included.

    Frames from `FrameDecoder` always have an unsigned REQUEST_TYPE, and SYNC,
    SCHEMA_VERSION and STREAM_ID are unsigned when present, so the properties need no checks.
    """

    header: dict[int, Any]
    body: dict[int, Any]
    size: int

    @property
    def request_type(self) -> int:
        return self.header[_REQUEST_TYPE]

    @property
    def sync(self) -> int:
        """The request id a reply must echo; 0 when absent, as Tarantool reads it."""
        return self.header.get(_SYNC, 0)

    @property
    def stream_id(self) -> int:
        """0 when absent: the request belongs to no stream."""
        return self.header.get(_STREAM_ID, 0)

    @property
    def schema_version(self) -> int:
        """0 when absent, which Tarantool reads as "do not check the schema version"."""
        return self.header.get(_SCHEMA_VERSION, 0)

    @property
    def is_error(self) -> bool:
        """True for a reply saying the request failed (REQUEST_TYPE carries the error bit)."""
        return bool(self.request_type & ERROR_TYPE_BIT)


def encode_greeting(*, version: str, instance_uuid: str, salt: bytes) -> bytes:
    """The 128 bytes a server sends on accept, laid out exactly as Tarantool 2.x does.

    Connectors parse the version from the first line to decide which requests to send
    (see `constants.GREETING_VERSION`) and take the auth salt from the second.
    """
    if len(salt) != SALT_SIZE:
        raise LocalProtocolError(f"greeting salt must be {SALT_SIZE} bytes, got {len(salt)}")
    if not version or not version.isascii() or any(c.isspace() for c in version):
        raise LocalProtocolError(f"greeting version must be one ASCII word, got {version!r}")
    try:
        canonical_uuid = str(uuid.UUID(instance_uuid))
    except ValueError as exc:
        raise LocalProtocolError(f"invalid instance UUID {instance_uuid!r}") from exc
    line1 = f"Tarantool {version} (Binary) {canonical_uuid}".encode("ascii")
    if len(line1) > _GREETING_LINE_CHARS:
        raise LocalProtocolError(f"greeting version {version!r} is too long")
    line2 = base64.b64encode(salt)
    return b"".join(
        (
            line1.ljust(_GREETING_LINE_CHARS),
            b"\n",
            line2.ljust(_GREETING_LINE_CHARS),
            b"\n",
        )
    )


def decode_greeting(data: bytes) -> Greeting:
    """Parse a binary-protocol greeting; any other greeting is fatal for the connection."""
    if len(data) != GREETING_SIZE:
        raise _bad_greeting(f"greeting must be {GREETING_SIZE} bytes, got {len(data)}")
    if data[_GREETING_LINE_CHARS] != 0x0A or data[-1] != 0x0A:
        raise _bad_greeting("greeting lines must end with a newline")
    try:
        words = data[:_GREETING_LINE_CHARS].decode("ascii").split()
    except UnicodeDecodeError as exc:
        raise _bad_greeting("greeting is not ASCII") from exc
    if len(words) != 4 or words[0] != "Tarantool" or words[2] != "(Binary)":
        raise _bad_greeting(f"not a Tarantool binary-protocol greeting: {' '.join(words)!r}")
    try:
        instance_uuid = str(uuid.UUID(words[3]))
    except ValueError as exc:
        raise _bad_greeting(f"invalid instance UUID in greeting: {words[3]!r}") from exc
    try:
        salt = base64.b64decode(data[GREETING_SIZE // 2 : -1].strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad_greeting("greeting salt is not base64") from exc
    if len(salt) < _SCRAMBLE_SALT_BYTES:
        raise _bad_greeting(f"greeting salt has {len(salt)} bytes, need {_SCRAMBLE_SALT_BYTES}")
    return Greeting(version=words[1], instance_uuid=instance_uuid, salt=salt)


def _bad_greeting(message: str) -> RemoteProtocolError:
    return RemoteProtocolError(message, fatal=True, code=ErrorCode.PROTOCOL)


class FrameDecoder:
    """Turns received bytes into `Frame`s (see the module docstring for the error rules).

    Call `feed` with what the socket returned, then `next_frame` until it returns None.
    Memory stays bounded if the caller does that: an oversize length prefix is refused as
    soon as it is read, so at most one frame (`max_frame_bytes` plus a 9-byte prefix) waits
    in the buffer besides the last chunk fed.
    """

    __slots__ = ("_max_frame_bytes", "_buf", "_pos", "_failure")

    def __init__(self, max_frame_bytes: int) -> None:
        if not 0 < max_frame_bytes <= _UINT32_MAX:
            raise LocalProtocolError(f"max_frame_bytes must be in 1..{_UINT32_MAX}")
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0  # start of the undecoded bytes; consumed bytes are dropped lazily
        self._failure: RemoteProtocolError | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes received but not yet returned as frames (for backpressure and tests)."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        """Append received bytes. Pipelined frames may arrive together or split anywhere."""
        if self._failure is not None:
            raise LocalProtocolError("feed() after a fatal protocol error: close the connection")
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        elif self._pos * 2 >= len(self._buf):
            # Moving the tail costs no more than the bytes already consumed: amortized O(1).
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_frame(self) -> Frame | None:
        """The next whole frame, or None until more bytes arrive.

        Raises `RemoteProtocolError`; after a fatal one every later call raises it again.
        """
        if self._failure is not None:
            raise self._failure
        buf = self._buf
        start = self._pos
        available = len(buf) - start
        if available == 0:
            return None
        first = buf[start]
        if first <= 0x7F:
            prefix_bytes, length = 1, first
        else:
            width = _UINT_WIDTH.get(first)
            if width is None:
                raise self._fail(
                    f"frame length must be a msgpack unsigned integer, got byte 0x{first:02x}"
                )
            prefix_bytes = 1 + width
            if available < prefix_bytes:
                return None
            length = int.from_bytes(buf[start + 1 : start + prefix_bytes], "big")
        if length > self._max_frame_bytes:
            raise self._fail(
                f"frame of {length} bytes exceeds the limit of {self._max_frame_bytes} bytes"
            )
        end = start + prefix_bytes + length
        if len(buf) < end:
            return None
        self._pos = end  # the frame is consumed even if it turns out to be malformed
        return _decode_frame(buf[start + prefix_bytes : end], prefix_bytes + length)

    def _fail(self, message: str) -> RemoteProtocolError:
        self._failure = RemoteProtocolError(message, fatal=True)
        return self._failure


def _decode_frame(data: bytearray, size: int) -> Frame:
    if not data:
        raise RemoteProtocolError("frame is empty: no header", fatal=False)
    unpacker = _frame_unpacker(data, "strict")
    try:
        header = unpacker.unpack()
    except _MSGPACK_ERRORS as exc:
        raise RemoteProtocolError(f"invalid msgpack in frame header: {exc!r}", fatal=False) from exc
    sync = _check_header(header)
    if unpacker.tell() == len(data):
        return Frame(header=header, body={}, size=size)
    is_auth = header[_REQUEST_TYPE] == _AUTH
    if is_auth:
        unpacker = _frame_unpacker(data, "surrogateescape")
        unpacker.skip()
    try:
        body = unpacker.unpack()
    except _MSGPACK_ERRORS as exc:
        raise RemoteProtocolError(
            f"invalid msgpack in frame body: {exc!r}", fatal=False, sync=sync
        ) from exc
    if not isinstance(body, dict):
        raise RemoteProtocolError("frame body must be a map", fatal=False, sync=sync)
    if unpacker.tell() != len(data):
        raise RemoteProtocolError(
            f"{len(data) - unpacker.tell()} trailing bytes after the frame body",
            fatal=False,
            sync=sync,
        )
    for key in body:
        if type(key) is not int:
            raise RemoteProtocolError("frame body keys must be integers", fatal=False, sync=sync)
    if is_auth:
        _scramble_to_bytes(body, sync)
    return Frame(header=header, body=body, size=size)


def _frame_unpacker(data: bytearray, unicode_errors: str) -> msgpack.Unpacker:
    unpacker = msgpack.Unpacker(
        raw=False, strict_map_key=False, max_buffer_size=len(data), unicode_errors=unicode_errors
    )
    unpacker.feed(data)
    return unpacker


def _scramble_to_bytes(body: dict[int, Any], sync: int | None) -> None:
    """Give an AUTH body's scramble as bytes, whichever msgpack type carried it.

    net.box (tarantool 2.6) sends the chap-sha1 scramble as a msgpack str holding 20 raw
    bytes, which Tarantool accepts as it accepts bin (what PyPI `tarantool` sends). An AUTH
    body is decoded with surrogateescape so such a str survives, and turns back into its
    exact bytes here (PEP 383); every other string in it must still be valid UTF-8.
    """
    tuple_ = body.get(_TUPLE)
    if isinstance(tuple_, list) and len(tuple_) == 2 and isinstance(tuple_[1], str):
        body[_TUPLE] = [tuple_[0], tuple_[1].encode("utf-8", "surrogateescape")]
    try:
        msgpack.packb(body)
    except UnicodeEncodeError as exc:
        raise RemoteProtocolError(
            f"invalid UTF-8 in AUTH body: {exc!r}", fatal=False, sync=sync
        ) from exc


def _check_header(header: object) -> int | None:
    """Validate a decoded header; return its sync, or None when it cannot be read.

    The checks are inlined (no helper calls) because every frame goes through them.
    """
    if not isinstance(header, dict):
        raise RemoteProtocolError("frame header must be a map", fatal=False)
    sync = header.get(_SYNC, 0)
    if type(sync) is not int or sync < 0:
        sync = None
    for key in header:
        if type(key) is not int or key < 0:
            raise RemoteProtocolError(
                "frame header keys must be unsigned integers", fatal=False, sync=sync
            )
    request_type = header.get(_REQUEST_TYPE)
    if request_type is None:
        raise RemoteProtocolError(
            "frame header has no REQUEST_TYPE",
            fatal=False,
            sync=sync,
            code=ErrorCode.MISSING_REQUEST_FIELD,
        )
    if type(request_type) is not int or request_type < 0:
        raise RemoteProtocolError(
            "frame REQUEST_TYPE must be an unsigned integer", fatal=False, sync=sync
        )
    for key in _UINT_HEADER_KEYS:
        value = header.get(key, 0)
        if type(value) is not int or value < 0:
            raise RemoteProtocolError(
                f"frame header key {Key(key).name} must be an unsigned integer",
                fatal=False,
                sync=sync,
            )
    return sync


def encode_frame(header: dict[int, Any], body: dict[int, Any]) -> bytes:
    """One frame: 0xce + big-endian uint32 length (the 5 bytes connectors read), header, body."""
    if not isinstance(header, dict) or not isinstance(body, dict):
        raise LocalProtocolError("frame header and body must be dicts")
    try:
        head = _packer.pack(header)
        tail = _packer.pack(body)
    except (TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode frame: {exc}") from exc
    length = len(head) + len(tail)
    if length > _UINT32_MAX:
        raise LocalProtocolError(f"frame of {length} bytes does not fit a uint32 length")
    return b"".join((_PREFIX.pack(0xCE, length), head, tail))


def encode_ok(
    *,
    sync: int,
    schema_version: int,
    body: dict[int, Any] | None = None,
    vclock: dict[int, int] | None = None,
) -> bytes:
    """A success reply, whose header holds what Tarantool's does (REQUEST_TYPE, SYNC,
    SCHEMA_VERSION, never STREAM_ID), since asynctnt warns of any other header key. A None
    body is sent as an empty map, as Tarantool does. `vclock`, for a request that asked for
    it (OPTIONS `return_vclock`), goes in the header: net.box 2.6 reads a body key of an
    EXECUTE reply other than DATA and METADATA as SQL_INFO (a vclock there became its
    row_count)."""
    header = {_REQUEST_TYPE: _OK, _SYNC: sync, _SCHEMA_VERSION: schema_version}
    if vclock is not None:
        header[_VCLOCK] = vclock
    return encode_frame(header, {} if body is None else body)


def encode_error(
    *,
    sync: int,
    schema_version: int,
    code: int,
    message: str,
    error_type: str = "ClientError",
    fields: dict[str, Any] | None = None,
) -> bytes:
    """An error reply: the code in REQUEST_TYPE, the message both as the old ERROR_24 string
    and as a one-entry extended error stack (ERROR), which newer connectors prefer; `fields`
    are the entry's custom fields, as Tarantool's box.error fields."""
    if not 0 <= code < ERROR_TYPE_BIT:
        raise LocalProtocolError(f"error code {code} is outside 0..{ERROR_TYPE_BIT - 1}")
    header = {_REQUEST_TYPE: ERROR_TYPE_BIT | code, _SYNC: sync, _SCHEMA_VERSION: schema_version}
    # Error stack entry keys: 0 type, 1 file, 2 line, 3 message, 4 errno, 5 code, 6 fields.
    stack_entry = {0: error_type, 1: "", 2: 0, 3: message, 4: 0, 5: code, 6: fields or {}}
    return encode_frame(header, {_ERROR_24: message, _ERROR: {0: [stack_entry]}})


def encode_request(
    request_type: int, sync: int, body: dict[int, Any], *, stream_id: int = 0, replica_id: int | None = None
) -> bytes:
    """A request, for our own client and for peer-to-peer messages (which name their
    sender in REPLICA_ID)."""
    if not 0 <= request_type < ERROR_TYPE_BIT:
        raise LocalProtocolError(f"request type {request_type} is outside 0..{ERROR_TYPE_BIT - 1}")
    header = {_REQUEST_TYPE: request_type, _SYNC: sync}
    if stream_id:
        header[_STREAM_ID] = stream_id
    if replica_id is not None:
        header[Key.REPLICA_ID] = replica_id
    return encode_frame(header, body)
