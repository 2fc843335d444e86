"""Peer connections: an iproto client link for appliers and joins, the errors a peer
answers with, and how a refusal of SUBSCRIBE travels on the wire.

With a cluster secret, a link proves it to the member it dials and has the member prove
it back (PEER_AUTH, docs/security.md) before it is handed to its user: a link that fails
either way is closed, and no request of the caller's is ever sent on it."""

from __future__ import annotations

import os
from typing import Any, Protocol

import trio

from replicaset.core.replicaset import Refusal
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import GREETING_SIZE, Frame, FrameDecoder, Greeting, decode_greeting, encode_frame
from replicaset.iproto.constants import ErrorCode, Key
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.iproto.peer_auth import NONCE_BYTES, client_proof, proof_matches, server_proof
from replicaset.runtime.environment import Network
from replicaset.runtime.peer_access import PeerCredentials

RECEIVE_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


class FrameSink(Protocol):
    """The sending half of a served connection (a Session): frames gather, then go out."""

    def send_frame(self, data: bytes) -> None: ...

    async def flush_outbox(self) -> None: ...


class PeerError(Exception):
    """A peer refused us or spoke nonsense; the message names both sides' values, and
    `fields` are the custom fields of its error (unchecked: read them through a parser)."""

    def __init__(self, code: int, message: str, fields: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.fields = fields


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

    def __init__(self, stream: trio.abc.Stream, max_frame_bytes: int) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(max_frame_bytes)
        self.greeting_uuid = ""
        self._sync = 0

    @classmethod
    async def open(cls, address: str, max_frame_bytes: int, credentials: PeerCredentials | None = None, *,
                   network: Network) -> PeerLink:
        """Connect (over TLS when `credentials` say so), read the greeting and, when they
        hold a secret, authenticate both ways; closed again on any failure."""
        host, _, port = address.rpartition(":")
        tls = credentials.tls if credentials is not None else None
        with trio.fail_after(CONNECT_TIMEOUT_S):
            stream: trio.abc.Stream = await network.connect(host, int(port))
            link = cls(stream, max_frame_bytes)
            try:
                if tls is not None:
                    link.stream = stream = trio.SSLStream(stream, tls, server_hostname=host)
                    try:
                        await stream.do_handshake()
                    except trio.BrokenResourceError as exc:
                        raise PeerError(ErrorCode.NO_CONNECTION, f"{address}: TLS handshake failed: "
                                                                 f"{exc.__cause__ or exc}") from exc
                buf = b""
                while len(buf) < GREETING_SIZE:
                    chunk = await stream.receive_some(GREETING_SIZE - len(buf))
                    if not chunk:
                        raise PeerError(ErrorCode.NO_CONNECTION, f"{address} closed the connection during the greeting")
                    buf += chunk
                greeting = decode_greeting(buf)
                link.greeting_uuid = greeting.instance_uuid
                if credentials is not None and credentials.secret is not None:
                    await link._authenticate(address, greeting, credentials, credentials.secret)
            except BaseException:
                await link.aclose()
                raise
        return link

    async def _authenticate(self, address: str, greeting: Greeting, credentials: PeerCredentials,
                            secret: bytes) -> None:
        nonce = os.urandom(NONCE_BYTES)
        await self.send(PeerRequest.PEER_AUTH, {
            Key.INSTANCE_UUID: credentials.instance_uuid,
            PeerKey.NONCE: nonce,
            PeerKey.PROOF: client_proof(secret, salt=greeting.salt, nonce=nonce, instance_uuid=credentials.instance_uuid),
        })
        try:
            proof = peer_messages.peer_auth_reply(await self.receive())
        except PeerError as exc:
            if exc.code == ErrorCode.UNKNOWN_REQUEST_TYPE:
                raise PeerError(ErrorCode.ACCESS_DENIED, f"{address} does not know peer authentication: it runs a "
                                                         "version without cluster secrets") from exc
            raise PeerError(exc.code, f"{address} refused our peer authentication: {exc}") from exc
        expected = server_proof(secret, nonce=nonce, salt=greeting.salt, instance_uuid=greeting.instance_uuid)
        if not proof_matches(expected, proof):
            raise PeerError(ErrorCode.ACCESS_DENIED, f"{address} failed to prove it holds our cluster secret: it is "
                                                     "not a member of this set, or has another secret; not trusted")

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
                return _checked(frame)
            data = await self.stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise PeerError(ErrorCode.NO_CONNECTION, "the peer closed the connection")
            self.decoder.feed(data)

    def received(self) -> list[Frame]:
        """The whole frames the last receives brought and `receive` has not returned yet,
        without waiting: a reader behind its peer takes them in one turn."""
        frames = []
        while (frame := self.decoder.next_frame()) is not None:
            frames.append(_checked(frame))
        return frames

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def _checked(frame: Frame) -> Frame:
    """The frame, or the peer's error reply raised."""
    if frame.is_error:
        raise PeerError(frame.request_type & 0x7FFF, str(frame.body.get(Key.ERROR_24, "")), _error_fields(frame.body))
    return frame


def _error_fields(body: dict[int, Any]) -> Any:
    """The custom fields of an error reply's first stack entry, as the peer sent them."""
    stack = body.get(Key.ERROR)
    entries = stack.get(0) if isinstance(stack, dict) else None
    return entries[0].get(6) if isinstance(entries, list) and entries and isinstance(entries[0], dict) else None
