"""Greeting, framing and encoders of replicaset.iproto.codec, driven without sockets."""

import base64
import struct

import msgpack
import pytest

import replicaset.iproto as iproto
from replicaset.iproto import (
    GREETING_SIZE,
    GREETING_VERSION,
    ErrorCode,
    Frame,
    FrameDecoder,
    Key,
    LocalProtocolError,
    RemoteProtocolError,
    RequestType,
    decode_greeting,
    encode_error,
    encode_frame,
    encode_greeting,
    encode_ok,
    encode_request,
)

UUID = "3b151c25-4c4a-4b5d-8042-0f1b3a6f61c3"
SALT = bytes(range(100, 132))
MAX = 4096
HEADER_5 = msgpack.packb({0: 1, 1: 5})


def decode_all(data: bytes, max_frame_bytes: int = MAX) -> list[Frame]:
    decoder = FrameDecoder(max_frame_bytes)
    decoder.feed(data)
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    assert decoder.pending_bytes == 0
    return frames


def raw_frame(payload: bytes) -> bytes:
    """A frame around arbitrary payload bytes, with the 0xce length connectors write."""
    return struct.pack(">BI", 0xCE, len(payload)) + payload


def decode_error(data: bytes) -> RemoteProtocolError:
    decoder = FrameDecoder(MAX)
    decoder.feed(data)
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    return info.value


# --- public surface ---------------------------------------------------------------------


def test_every_export_exists_and_appears_once() -> None:
    assert len(iproto.__all__) == len(set(iproto.__all__))
    for name in iproto.__all__:
        assert hasattr(iproto, name), name


# --- greeting ----------------------------------------------------------------------------


def test_greeting_is_128_bytes_laid_out_like_tarantool() -> None:
    data = encode_greeting(version=GREETING_VERSION, instance_uuid=UUID, salt=SALT)
    assert len(data) == GREETING_SIZE
    line1, line2 = data[:64], data[64:]
    assert line1 == f"Tarantool 2.10.0 (Binary) {UUID}".encode().ljust(63) + b"\n"
    assert line2 == base64.b64encode(SALT).ljust(63) + b"\n"


def test_greeting_round_trip() -> None:
    data = encode_greeting(version="2.11.1", instance_uuid=UUID.upper(), salt=SALT)
    greeting = decode_greeting(data)
    assert (greeting.version, greeting.instance_uuid, greeting.salt) == ("2.11.1", UUID, SALT)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"salt": b"short"},
        {"version": "2.10 beta"},
        {"version": ""},
        {"version": "9" * 40},
        {"instance_uuid": "not-a-uuid"},
    ],
)
def test_greeting_misuse_is_local_error(kwargs) -> None:
    args = {"version": GREETING_VERSION, "instance_uuid": UUID, "salt": SALT} | kwargs
    with pytest.raises(LocalProtocolError):
        encode_greeting(**args)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"x" * 128,
        b"Tarantool 2.10.0 (Lua console)".ljust(63) + b"\n" + b" " * 63 + b"\n",
        f"Tarantool 2.10.0 (Binary) {UUID}".encode().ljust(63) + b"\n" + b"!!!".ljust(63) + b"\n",
        f"Tarantool 2.10.0 (Binary) {UUID}".encode().ljust(63) + b"\n" + b"AAAA".ljust(63) + b"\n",
        b"Tarantool 2.10.0 (Binary) nope".ljust(63) + b"\n" + b"A" * 63 + b"\n",
        f"Tarantool 2.10.0 (Binary) {UUID}".encode().ljust(64) + b"A" * 63 + b"\n",
    ],
)
def test_bad_greeting_is_fatal(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as info:
        decode_greeting(data)
    assert info.value.fatal


# --- encoders round-trip through the decoder ----------------------------------------------


def test_encode_request_round_trip() -> None:
    body = {Key.SQL_TEXT: "SELECT 1", Key.SQL_BIND: [1, "a", None, b"\x00", 2.5, True]}
    data = encode_request(RequestType.EXECUTE, 42, body, stream_id=9)
    (frame,) = decode_all(data)
    assert frame.header == {0: 11, 1: 42, 10: 9}
    assert frame.body == body
    assert (frame.request_type, frame.sync, frame.stream_id, frame.schema_version) == (11, 42, 9, 0)
    assert frame.size == len(data)
    assert not frame.is_error


def test_encode_ok_round_trip() -> None:
    (bare,) = decode_all(encode_ok(sync=7, schema_version=3))
    assert bare.header == {0: 0, 1: 7, 5: 3} and bare.body == {}
    data = encode_ok(sync=8, schema_version=3, body={Key.DATA: [[1]]}, vclock={1: 4})
    (frame,) = decode_all(data)
    assert (frame.sync, frame.schema_version, frame.body) == (8, 3, {48: [[1]]})
    assert frame.header == {0: 0, 1: 8, 5: 3, Key.VCLOCK: {1: 4}}


def test_encode_error_round_trip() -> None:
    data = encode_error(
        sync=5, schema_version=2, code=ErrorCode.READONLY, message="read-only", error_type="X"
    )
    (frame,) = decode_all(data)
    assert frame.is_error
    assert frame.request_type == 0x8000 | 7
    assert frame.body[Key.ERROR_24] == "read-only"
    assert frame.body[Key.ERROR] == {
        0: [{0: "X", 1: "", 2: 0, 3: "read-only", 4: 0, 5: 7, 6: {}}]
    }


def test_encoders_write_the_five_byte_prefix_connectors_read() -> None:
    for data in (
        encode_ok(sync=0, schema_version=0),
        encode_request(RequestType.PING, 1, {}),
        encode_error(sync=0, schema_version=0, code=0, message=""),
    ):
        assert data[0] == 0xCE
        assert struct.unpack(">I", data[1:5])[0] == len(data) - 5


def test_encoder_misuse_is_local_error() -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame({0: 0}, {0: {1, 2}})  # a set has no msgpack form
    with pytest.raises(LocalProtocolError):
        encode_frame({0: 0}, [])  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        encode_error(sync=0, schema_version=0, code=0x8000, message="")
    with pytest.raises(LocalProtocolError):
        encode_request(0x8001, 1, {})
    with pytest.raises(LocalProtocolError):
        FrameDecoder(0)
    # The shared packer is still clean after a failure.
    assert decode_all(encode_frame({0: 0}, {}))[0].header == {0: 0}


# --- framing ------------------------------------------------------------------------------


def pipeline() -> bytes:
    return b"".join(
        [
            encode_request(RequestType.PING, 1, {}),
            encode_request(RequestType.EXECUTE, 2, {Key.SQL_TEXT: "x" * 300, Key.SQL_BIND: []}),
            encode_ok(sync=3, schema_version=1, body={Key.DATA: list(range(100))}),
            encode_error(sync=4, schema_version=1, code=1, message="bad"),
            raw_frame(msgpack.packb({0: 64, 1: 5})),  # no body at all: an empty body
            b"\x06" + msgpack.packb({0: 64, 1: 6}) + msgpack.packb({}),  # fixint length
            b"\xcc" + bytes([8]) + msgpack.packb({0: 64, 1: 7}) + msgpack.packb({16: 1}),
            b"\xcd\x00\x08" + msgpack.packb({0: 64, 1: 8}) + msgpack.packb({16: 1}),
            b"\xcf" + (8).to_bytes(8, "big") + msgpack.packb({0: 64, 1: 9}) + b"\x81\x10\x01",
        ]
    )


def test_pipelined_frames_decode_in_one_feed() -> None:
    frames = decode_all(pipeline())
    assert [f.sync for f in frames] == list(range(1, 10))
    assert frames[4].body == {}
    assert sum(f.size for f in frames) == len(pipeline())


def test_pipelined_frames_split_at_every_boundary_decode_identically() -> None:
    data = pipeline()
    expected = decode_all(data)
    for cut in range(len(data) + 1):
        decoder = FrameDecoder(MAX)
        frames = []
        for part in (data[:cut], data[cut:]):
            decoder.feed(part)
            while (frame := decoder.next_frame()) is not None:
                frames.append(frame)
        assert frames == expected, cut


def test_byte_at_a_time_feed_decodes_identically() -> None:
    data = pipeline()
    decoder = FrameDecoder(MAX)
    frames = []
    for i in range(len(data)):
        decoder.feed(data[i : i + 1])
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    assert frames == decode_all(data)


def test_many_small_frames_compact_the_buffer() -> None:
    frame = encode_request(RequestType.PING, 1, {})
    decoder = FrameDecoder(MAX)
    for _ in range(10_000):
        decoder.feed(frame + frame[:3])
        assert decoder.next_frame() is not None
        decoder.feed(frame[3:])
        assert decoder.next_frame() is not None
        assert decoder.next_frame() is None
    assert len(decoder._buf) < 4 * len(frame)


# --- malformed input -----------------------------------------------------------------------


@pytest.mark.parametrize("first", [0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xD0, 0xD3, 0xE0, 0xFF, 0xCA])
def test_length_prefix_that_is_not_a_uint_is_fatal(first: int) -> None:
    error = decode_error(bytes([first]) + b"\x00" * 8)
    assert error.fatal and error.sync is None


def test_fatal_error_sticks() -> None:
    decoder = FrameDecoder(MAX)
    decoder.feed(b"\xc0" + encode_request(RequestType.PING, 1, {}))
    with pytest.raises(RemoteProtocolError) as first:
        decoder.next_frame()
    with pytest.raises(RemoteProtocolError) as again:
        decoder.next_frame()
    assert again.value is first.value
    with pytest.raises(LocalProtocolError):
        decoder.feed(b"more")


def test_oversize_length_is_fatal_before_the_body_arrives() -> None:
    decoder = FrameDecoder(MAX)
    decoder.feed(b"\xce" + (MAX + 1).to_bytes(4, "big"))
    with pytest.raises(RemoteProtocolError, match="exceeds") as info:
        decoder.next_frame()
    assert info.value.fatal
    for prefix in (b"\xcf" + (1 << 40).to_bytes(8, "big"), b"\xcd\xff\xff"):
        assert decode_error(prefix).fatal


def test_exact_max_frame_is_accepted() -> None:
    header = msgpack.packb({0: 0, 1: 1})
    body_len = MAX - len(header)
    body = msgpack.packb({48: "x" * (body_len - 5)})  # map(1), key and str16 prefix: 5 bytes
    data = raw_frame(header + body)
    assert len(data) == MAX + 5
    (frame,) = decode_all(data)
    assert frame.size == MAX + 5


def test_incomplete_prefix_waits_for_more() -> None:
    decoder = FrameDecoder(MAX)
    decoder.feed(b"\xce\x00\x00")
    assert decoder.next_frame() is None
    decoder.feed(b"\x00")
    assert decoder.next_frame() is None
    assert decoder.pending_bytes == 4


@pytest.mark.parametrize(
    ("payload", "sync", "code"),
    [
        (b"", None, ErrorCode.INVALID_MSGPACK),  # empty frame, no header
        (msgpack.packb([1, 2]), None, ErrorCode.INVALID_MSGPACK),  # header not a map
        (msgpack.packb({"a": 1}), 0, ErrorCode.INVALID_MSGPACK),  # non-int header key
        (msgpack.packb({0: 1, 1: 5, -1: 0}), 5, ErrorCode.INVALID_MSGPACK),  # negative key
        (b"\xc1", None, ErrorCode.INVALID_MSGPACK),  # never-used msgpack byte
        (b"\x82\x00", None, ErrorCode.INVALID_MSGPACK),  # header truncated inside the frame
        (msgpack.packb({1: 5}), 5, ErrorCode.MISSING_REQUEST_FIELD),
        (msgpack.packb({0: "x", 1: 5}), 5, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: "x"}), None, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: 5, 10: -1}), 5, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: 5, 5: 1.5}), 5, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: 5}) + msgpack.packb([1]), 5, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: 5}) + msgpack.packb({"k": 1}), 5, ErrorCode.INVALID_MSGPACK),
        (msgpack.packb({0: 1, 1: 5}) + b"\x81\x10", 5, ErrorCode.INVALID_MSGPACK),  # truncated
        (msgpack.packb({0: 1, 1: 5}) + b"\x80\x00", 5, ErrorCode.INVALID_MSGPACK),  # trailing
        (msgpack.packb({0: 1, 1: 5}) + b"\x81\x10\xa2\xff\xfe", 5, ErrorCode.INVALID_MSGPACK),
        (HEADER_5 + b"\x81\x10\xdd\xff\xff\xff\xff", 5, ErrorCode.INVALID_MSGPACK),  # huge array
        (HEADER_5 + b"\x81\x10" + b"\x91" * 2000 + b"\x00", 5, ErrorCode.INVALID_MSGPACK),  # deep
    ],
)
def test_bad_frame_content_is_skipped_with_its_sync(payload: bytes, sync, code) -> None:
    decoder = FrameDecoder(MAX)
    follower = encode_request(RequestType.PING, 99, {})
    decoder.feed(raw_frame(payload) + follower)
    with pytest.raises(RemoteProtocolError) as info:
        decoder.next_frame()
    assert not info.value.fatal
    assert info.value.sync == sync
    assert info.value.code == code
    assert decoder.next_frame().sync == 99  # the connection goes on with the next frame
    assert decoder.pending_bytes == 0


# --- AUTH scrambles ---------------------------------------------------------------------

def auth_frame(sync: int, user: bytes, scramble_type: int, scramble: bytes) -> bytes:
    """An AUTH frame with its strings typed by hand: `scramble_type` 0xd9 is msgpack str 8,
    as net.box (tarantool 2.6) sends the scramble; 0xc4 is bin 8, as PyPI `tarantool` does."""
    body = (
        b"\x82"
        + msgpack.packb(Key.USER_NAME) + b"\xd9" + bytes([len(user)]) + user
        + msgpack.packb(Key.TUPLE) + b"\x92" + msgpack.packb("chap-sha1")
        + bytes([scramble_type, len(scramble)]) + scramble
    )
    return raw_frame(msgpack.packb({0: int(RequestType.AUTH), 1: sync}) + body)


# Not valid UTF-8, as most scrambles are not.
NON_UTF8_SCRAMBLE = bytes.fromhex("77625d71d3e5ea617e6ca79fb4def24c183457e4")


@pytest.mark.parametrize("scramble_type", [0xD9, 0xC4])
def test_auth_scramble_is_bytes_whether_sent_as_str_or_bin(scramble_type: int) -> None:
    (frame,) = decode_all(auth_frame(3, b"alice", scramble_type, NON_UTF8_SCRAMBLE))
    assert frame.body[Key.USER_NAME] == "alice"
    assert frame.body[Key.TUPLE] == ["chap-sha1", NON_UTF8_SCRAMBLE]


def test_auth_with_a_user_name_that_is_not_utf8_is_refused_with_its_sync() -> None:
    error = decode_error(auth_frame(3, b"al\xffce", 0xD9, NON_UTF8_SCRAMBLE))
    assert (error.fatal, error.sync, error.code) == (False, 3, ErrorCode.INVALID_MSGPACK)
    assert "AUTH" in error.message


def test_other_requests_keep_refusing_strings_that_are_not_utf8() -> None:
    body = b"\x81" + msgpack.packb(Key.SQL_TEXT) + b"\xd9\x02\xff\xfe"
    error = decode_error(raw_frame(msgpack.packb({0: int(RequestType.EXECUTE), 1: 4}) + body))
    assert (error.fatal, error.sync, error.code) == (False, 4, ErrorCode.INVALID_MSGPACK)
