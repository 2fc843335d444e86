"""The cluster secret on the wire: the proofs of the TCP handshake and the SWIM seal.

Theory of operation (docs/security.md). Every member of a set holds one cluster secret.
Each use of it is an HMAC-SHA256 under its own domain tag, so that no proof made for one
purpose is ever accepted for another: a member's answer to a challenge cannot be sent back
as a challenge's answer, and a SWIM tag is never a TCP proof.

- TCP: the server's greeting carries a fresh 32-byte salt. The dialing member answers it,
  first thing, with PEER_AUTH: its instance UUID, a fresh nonce of its own and
  `HMAC(secret, CLIENT_TAG || salt || nonce || uuid)`. The server checks it and answers
  `HMAC(secret, SERVER_TAG || nonce || salt || its uuid)`, which the dialer checks in turn:
  each side has answered a challenge only it chose, so neither proof can be replayed on
  another connection, and a stranger that does not hold the secret can neither get rows
  from a member nor pose as one to a joiner.
- UDP: a SWIM datagram travels sealed, `tag || stamp || payload`, where `stamp` is the
  sender's wall clock in nanoseconds (strictly increasing per sender) and `tag` the first
  `SWIM_TAG_BYTES` of `HMAC(secret, SWIM_TAG || stamp || payload)`. The runtime drops what
  fails the tag before it decodes a byte of it, and uses the stamp against replays.

Only bytes in, bytes out: no sockets, no clock (the stamp is an argument).
"""

from __future__ import annotations

import hashlib
import hmac

NONCE_BYTES = 32
PROOF_BYTES = 32  # SHA-256
SWIM_TAG_BYTES = 16  # 128 bits: forging one takes 2**128 tries on average
SWIM_STAMP_BYTES = 8
SWIM_SEAL_BYTES = SWIM_TAG_BYTES + SWIM_STAMP_BYTES

CLIENT_TAG = b"replicaset peer-auth v1 client\x00"
SERVER_TAG = b"replicaset peer-auth v1 server\x00"
SWIM_TAG = b"replicaset swim v1\x00"


class SealError(ValueError):
    """A datagram that is not sealed with our cluster secret."""


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def client_proof(secret: bytes, *, salt: bytes, nonce: bytes, instance_uuid: str) -> bytes:
    """The dialing member's answer to the server's greeting salt."""
    return _mac(secret, CLIENT_TAG, salt, nonce, instance_uuid.encode())


def server_proof(secret: bytes, *, nonce: bytes, salt: bytes, instance_uuid: str) -> bytes:
    """The served member's answer to the dialer's nonce; `instance_uuid` is the server's
    own, as its greeting named it."""
    return _mac(secret, SERVER_TAG, nonce, salt, instance_uuid.encode())


def proof_matches(expected: bytes, received: bytes) -> bool:
    """In constant time: how much of a proof matched must not leak through the timing."""
    return hmac.compare_digest(expected, received)


def swim_seal(secret: bytes, stamp_ns: int, payload: bytes) -> bytes:
    stamp = stamp_ns.to_bytes(SWIM_STAMP_BYTES, "big")
    return _mac(secret, SWIM_TAG, stamp, payload)[:SWIM_TAG_BYTES] + stamp + payload


def swim_open(secret: bytes, sealed: bytes) -> tuple[int, bytes]:
    """`(stamp_ns, payload)` of a datagram whose tag is right; `SealError` otherwise."""
    if len(sealed) < SWIM_SEAL_BYTES:
        raise SealError(f"{len(sealed)} bytes, shorter than a seal")
    tag, stamp, payload = sealed[:SWIM_TAG_BYTES], sealed[SWIM_TAG_BYTES:SWIM_SEAL_BYTES], sealed[SWIM_SEAL_BYTES:]
    if not hmac.compare_digest(tag, _mac(secret, SWIM_TAG, stamp, payload)[:SWIM_TAG_BYTES]):
        raise SealError("wrong tag: not sealed with this set's cluster secret")
    return int.from_bytes(stamp, "big"), payload
