"""FrameDecoder under hostile input: it returns frames or raises RemoteProtocolError, nothing else.

Each example feeds bytes in arbitrary chunks and drains the decoder after every chunk, as a
server does. Invariants: only `Frame`, None or `RemoteProtocolError` come out; every call
that returns a frame or a non-fatal error consumes bytes (so draining terminates); after a
fatal error the decoder stays failed; and the buffer never holds more than one maximal frame
plus the chunk just fed.

Each test runs a CI number of examples and, marked `deep` (`make test-deep`), a long one.
"""

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replicaset.iproto import (
    ErrorCode,
    Frame,
    FrameDecoder,
    Key,
    LocalProtocolError,
    RemoteProtocolError,
    RequestType,
    encode_error,
    encode_frame,
    encode_ok,
    encode_request,
    metadata,
    sql_info,
)
from tests.fuzzing import mutate_bytes

MAX_FRAME_BYTES = 512
_PREFIX_BYTES_MAX = 9
DEEP_EXAMPLES = 50_000


def examples(ci: int) -> pytest.MarkDecorator:
    """Parametrize a test by its example count: `ci` in CI, `DEEP_EXAMPLES` under `deep`."""
    return pytest.mark.parametrize(
        "max_examples", [ci, pytest.param(DEEP_EXAMPLES, marks=pytest.mark.deep)], ids=["ci", "deep"]
    )


def fuzz(max_examples: int) -> settings:
    # No example database: the suite must not write files outside its own directories.
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(1 << 63), max_value=(1 << 64) - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.integers(min_value=0, max_value=0x60), inner, max_size=4),
    max_leaves=8,
)
headers = st.fixed_dictionaries(
    {0: st.integers(0, 0xFFFF), 1: st.integers(0, 1 << 40)},
    optional={5: st.integers(0, 99), 10: st.integers(0, 9)},
)
bodies = st.dictionaries(st.integers(min_value=0, max_value=0x60), values, max_size=4)
frames = st.lists(st.tuples(headers, bodies), min_size=1, max_size=4)

# Realistic frames to mutate; drawn from a fixed list because generating structured frames
# costs hypothesis far more time than decoding them, and mutations need many examples.
CORPUS = [
    encode_request(RequestType.PING, 1, {}),
    encode_request(RequestType.ID, 2, {Key.VERSION: 6, Key.FEATURES: [2]}),
    encode_request(
        RequestType.EXECUTE,
        3,
        {Key.SQL_TEXT: "SELECT * FROM t WHERE a = ? AND b = :b", Key.SQL_BIND: [1, {":b": "x"}]},
        stream_id=4,
    ),
    encode_request(
        RequestType.AUTH, 5, {Key.USER_NAME: "alice", Key.TUPLE: ["chap-sha1", b"\x01" * 20]}
    ),
    encode_ok(
        sync=6,
        schema_version=1,
        body={Key.METADATA: metadata([("A", "integer")]), Key.DATA: [[1], [2**40], [-3]]},
    ),
    encode_ok(sync=7, schema_version=1, body={Key.SQL_INFO: sql_info(2, [5, 6])}),
    encode_error(sync=8, schema_version=1, code=ErrorCode.SQL_EXECUTE, message="no such table"),
    encode_ok(sync=9, schema_version=1, body={Key.DATA: ["y" * 300, 1.5, None, True, b"\xff"]}),
    b"\x06" + msgpack.packb({0: 64, 1: 10}) + b"\x80",  # fixint length
    b"\xcd\x00\x05" + msgpack.packb({0: 64, 1: 11}),  # uint16 length, no body
]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)] or [b""]


def drain_all(chunks: list[bytes]) -> tuple[list[Frame], int, bool]:
    """Feed chunks as a server would; return frames, non-fatal error count, fatal seen."""
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    decoded: list[Frame] = []
    errors = 0
    for chunk in chunks:
        decoder.feed(chunk)
        while True:
            pending = decoder.pending_bytes
            try:
                frame = decoder.next_frame()
            except RemoteProtocolError as exc:
                assert isinstance(exc.fatal, bool)
                if exc.fatal:
                    assert exc.sync is None
                    _assert_stays_failed(decoder, exc)
                    return decoded, errors, True
                assert decoder.pending_bytes < pending  # the bad frame was consumed
                assert exc.sync is None or (type(exc.sync) is int and exc.sync >= 0)
                errors += 1
                continue
            if frame is None:
                break
            assert isinstance(frame, Frame)
            assert decoder.pending_bytes == pending - frame.size
            _assert_well_formed(frame)
            decoded.append(frame)
        assert decoder.pending_bytes <= MAX_FRAME_BYTES + _PREFIX_BYTES_MAX + len(chunk)
    return decoded, errors, False


def _assert_stays_failed(decoder: FrameDecoder, first: RemoteProtocolError) -> None:
    try:
        decoder.next_frame()
    except RemoteProtocolError as again:
        assert again is first
    else:
        raise AssertionError("decoder recovered from a fatal error")
    try:
        decoder.feed(b"x")
    except LocalProtocolError:
        return
    raise AssertionError("feed() accepted data after a fatal error")


def _assert_well_formed(frame: Frame) -> None:
    assert type(frame.header) is dict and type(frame.body) is dict
    assert all(type(k) is int and k >= 0 for k in frame.header)
    assert all(type(k) is int for k in frame.body)
    for value in (frame.request_type, frame.sync, frame.stream_id, frame.schema_version):
        assert type(value) is int and value >= 0
    assert 1 <= frame.size <= MAX_FRAME_BYTES + _PREFIX_BYTES_MAX


@examples(ci=3000)
def test_arbitrary_bytes(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(data=st.binary(max_size=2000), cuts=st.lists(st.integers(min_value=0), max_size=8))
    def check(data: bytes, cuts: list[int]) -> None:
        drain_all(chunked(data, cuts))

    check()


@examples(ci=1000)
def test_valid_frames_decode_exactly_under_any_split(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(frame_list=frames, cuts=st.lists(st.integers(min_value=0), max_size=8))
    def check(frame_list, cuts) -> None:
        encoded = [encode_frame(header, body) for header, body in frame_list]
        data = b"".join(encoded)
        decoded, errors, fatal = drain_all(chunked(data, cuts))
        if all(len(e) <= MAX_FRAME_BYTES + 5 for e in encoded):
            assert (errors, fatal) == (0, False)
            assert [(f.header, f.body) for f in decoded] == frame_list
        else:
            assert fatal  # an oversize frame ends the stream

    check()


mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(0, 7)),
        st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=9)),
        st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(1, 9)),
        st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
    ),
    min_size=1,
    max_size=4,
)




@examples(ci=3000)
def test_mutated_frames(max_examples: int) -> None:
    @fuzz(max_examples)
    @given(
        corpus_frames=st.lists(st.sampled_from(CORPUS), min_size=1, max_size=5),
        steps=mutations,
        cuts=st.lists(st.integers(min_value=0), max_size=8),
    )
    def check(corpus_frames: list[bytes], steps, cuts: list[int]) -> None:
        data = mutate_bytes(b"".join(corpus_frames), steps)
        drain_all(chunked(data, cuts))

    check()
