"""Coverage-guided fuzzing of the decoders that take a stranger's bytes, with atheris.

Why beside hypothesis: hypothesis draws structured inputs (msgpack bodies, mutations of
valid ones) and shrinks a failure to a small example; atheris (libFuzzer) follows the
branches it covers byte by byte and so reaches checks no strategy thought of. Each target
allows exactly the documented error of its decoder; anything else is a crash that atheris
reports with the input that caused it (saved as `crash-*` in the working directory).

atheris is optional (not a dependency of the project): `pip install atheris` into any
venv where the project imports, then

    PYTHONPATH=. python tools/fuzz_atheris.py frames -runs=200000
    PYTHONPATH=. python tools/fuzz_atheris.py peer -max_total_time=600

Targets: frames, peer, binds, wal, segment, swim (see `TARGETS`). libFuzzer's own flags
follow the target name; `tests/test_atheris.py` (marked deep) runs each briefly.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import atheris

with atheris.instrument_imports():
    import msgpack

    from replicaset.iproto import peer_messages
    from replicaset.iproto.codec import Frame, FrameDecoder
    from replicaset.iproto.errors import RemoteProtocolError
    from replicaset.iproto.sql_wire import decode_binds
    from replicaset.runtime.swim import DatagramError, decode
    from wal import CorruptRecord, TruncatedRecord, WalError, decode_record
    from wal.segment import scan_segment

FRAME_BYTES_MAX = 1 << 16
RS = "8c5e4a52-0000-4000-8000-00000000abcd"
PEER_DECODERS: list[Callable[[Frame], object]] = [
    lambda f: peer_messages.hello(f, "JOIN"), peer_messages.subscribe, peer_messages.ack,
    lambda f: peer_messages.txn_request(f, "HEARTBEAT"), peer_messages.txn_prepare, peer_messages.txn_commit,
    peer_messages.txn_query, peer_messages.subscribed, peer_messages.rows, peer_messages.txn_vote,
    peer_messages.txn_decision, peer_messages.heartbeat, peer_messages.checkpoint_chunk, peer_messages.joined,
    lambda f: peer_messages.joined(f, anonymous=True), peer_messages.peer_auth, peer_messages.peer_auth_reply,
]


def fuzz_frames(data: bytes) -> None:
    """Every frame the decoder returns, fed to every peer decoder: the server's path."""
    decoder = FrameDecoder(FRAME_BYTES_MAX)
    decoder.feed(data)
    while True:
        try:
            frame = decoder.next_frame()
        except RemoteProtocolError as exc:
            if exc.fatal:
                return
            continue
        if frame is None:
            return
        for decode_peer in PEER_DECODERS:
            try:
                decode_peer(frame)
            except RemoteProtocolError:
                pass


def fuzz_peer(data: bytes) -> None:
    """A peer body from msgpack bytes, header from the first byte: each decoder in turn."""
    if not data:
        return
    try:
        body = msgpack.unpackb(data[1:], strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return
    if not isinstance(body, dict):
        return
    frame = Frame(header={0: 1, 1: 9, 2: data[0] % 40}, body=body, size=0)
    try:
        PEER_DECODERS[data[0] % len(PEER_DECODERS)](frame)
    except RemoteProtocolError as exc:
        assert not exc.fatal


def fuzz_binds(data: bytes) -> None:
    try:
        value = msgpack.unpackb(data, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return
    try:
        decode_binds(value)
    except RemoteProtocolError:
        pass


def fuzz_wal(data: bytes) -> None:
    """A record that decodes is one whose checksum holds: it re-encodes to its bytes."""
    try:
        record, end = decode_record(data)
    except (TruncatedRecord, CorruptRecord):
        return
    assert end <= len(data) and record.lsn > 0


def fuzz_segment(data: bytes) -> None:
    try:
        scan = scan_segment(data)
    except WalError:
        return
    assert scan.valid_end <= len(data)


def fuzz_swim(data: bytes) -> None:
    try:
        decode(data, RS)
    except DatagramError:
        pass


TARGETS: dict[str, Callable[[bytes], None]] = {
    "frames": fuzz_frames, "peer": fuzz_peer, "binds": fuzz_binds, "wal": fuzz_wal, "segment": fuzz_segment,
    "swim": fuzz_swim,
}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags]")
    target = TARGETS[argv[1]]
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
