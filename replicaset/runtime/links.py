"""Peer connections: an iproto client link for appliers and joins, the errors a peer
answers with, and how a refusal of SUBSCRIBE travels on the wire."""

from __future__ import annotations

from typing import Any, Protocol

import trio

from replicaset.core.replicaset import Refusal
from replicaset.iproto.codec import GREETING_SIZE, Frame, FrameDecoder, decode_greeting, encode_frame
from replicaset.iproto.constants import ErrorCode, Key

RECEIVE_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


class FrameSink(Protocol):
    """The sending half of a served connection (a Session): frames gather, then go out."""

    def send_frame(self, data: bytes) -> None: ...

    async def flush_outbox(self) -> None: ...


class PeerError(Exception):
    """A peer refused us or spoke nonsense; the message names both sides' values."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# How a refusal of SUBSCRIBE travels on the wire; the core says which are final.
REFUSAL_CODES: dict[Refusal, int] = {
    Refusal.ROWS_UNAVAILABLE: ErrorCode.XLOG_GAP,
    Refusal.SPLIT_BRAIN: ErrorCode.SPLIT_BRAIN,
    Refusal.OTHER_REPLICASET: ErrorCode.REPLICASET_UUID_MISMATCH,
    Refusal.ID_MISMATCH: ErrorCode.INSTANCE_UUID_MISMATCH,
    Refusal.NOT_REGISTERED: ErrorCode.UNKNOWN_REPLICA,
}
REFUSALS: dict[int, Refusal] = {code: refusal for refusal, code in REFUSAL_CODES.items()}


class PeerLink:
    """A blocking-free iproto client connection for an applier or a join."""

    def __init__(self, stream: trio.SocketStream, max_frame_bytes: int) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(max_frame_bytes)
        self.greeting_uuid = ""
        self._sync = 0

    @classmethod
    async def open(cls, address: str, max_frame_bytes: int) -> PeerLink:
        host, _, port = address.rpartition(":")
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream = await trio.open_tcp_stream(host, int(port))
            link = cls(stream, max_frame_bytes)
            buf = b""
            while len(buf) < GREETING_SIZE:
                chunk = await stream.receive_some(GREETING_SIZE - len(buf))
                if not chunk:
                    raise PeerError(ErrorCode.NO_CONNECTION, f"{address} closed the connection during the greeting")
                buf += chunk
        link.greeting_uuid = decode_greeting(buf).instance_uuid
        return link

    async def send(self, request_type: int, body: dict[int, Any], *, replica_id: int | None = None) -> int:
        self._sync += 1
        header = {Key.REQUEST_TYPE: request_type, Key.SYNC: self._sync}
        if replica_id is not None:
            header[Key.REPLICA_ID] = replica_id
        await self.stream.send_all(encode_frame(header, body))
        return self._sync

    async def receive(self) -> Frame:
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                if frame.is_error:
                    message = frame.body.get(Key.ERROR_24, "")
                    raise PeerError(frame.request_type & 0x7FFF, str(message))
                return frame
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise PeerError(ErrorCode.NO_CONNECTION, "the peer closed the connection")
            self.decoder.feed(data)

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)
