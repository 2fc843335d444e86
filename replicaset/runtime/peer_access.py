"""Who may speak as a peer: the cluster secret of a member, what it proves itself with
when it dials another, and the gate every served connection keeps (docs/security.md).

Peer requests (JOIN, SUBSCRIBE, ACK and the quorum transaction's) hand out the database
and decide commits, so on a member with a secret a connection must first pass PEER_AUTH;
until then each of them is refused, before anything in it is looked at, with a message
that names no UUID, vclock or row, and the connection is closed. User logins (AUTH,
guest) play no part in this: a member is not a user.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio
from structlog.typing import FilteringBoundLogger

from replicaset.config import Config, ConfigError
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame
from replicaset.iproto.constants import ErrorCode
from replicaset.iproto.peer import PeerKey
from replicaset.iproto.peer_auth import client_proof, proof_matches, server_proof
from replicaset.runtime.errors import RequestError

AUTH_REQUIRED = "peer authentication required: this member has a cluster secret"
WRONG_SECRET = "wrong cluster secret"
NO_SECRET = ("this member has no cluster secret: set the same [cluster] cluster_secret on every member of the set, "
             "or on none")


class PeerRefused(RequestError):
    """A peer request or a PEER_AUTH refused: the error is sent, then the connection closed,
    so that each guess at the secret costs a connection."""


def load_secret(config: Config) -> bytes | None:
    """The set's cluster secret, None without one. A file is read once, at start, with
    surrounding whitespace dropped (`openssl rand -hex 32 > file` ends in a newline)."""
    path = config["cluster.cluster_secret_file"]
    if path:
        try:
            text = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"[cluster] cluster_secret_file: cannot read {path}: {exc}") from exc
        if not text:
            raise ConfigError(f"[cluster] cluster_secret_file: {path} is empty")
        return text.encode()
    secret = config["cluster.cluster_secret"]
    return secret.encode() if secret else None


@dataclass(frozen=True, slots=True, kw_only=True)
class PeerCredentials:
    """What an instance proves itself with when it dials a member: its own UUID and the
    set's secret (None: the set runs without one, and nothing is proven); and how it
    checks the member's certificate when the set speaks TLS (`runtime/tls.py`)."""

    instance_uuid: str
    secret: bytes | None = None
    tls: ssl.SSLContext | None = None


def remote_address(stream: trio.abc.Stream) -> str:
    """HOST:PORT of the other end, for the log; "?" when the socket no longer says."""
    transport = getattr(stream, "transport_stream", stream)
    try:
        host, port = transport.socket.getpeername()[:2]  # type: ignore[attr-defined]
    except (AttributeError, OSError):
        return "?"
    return f"{host}:{port}"


def warn_if_exposed(log: FilteringBoundLogger, host: str, secret: bytes | None) -> None:
    """Without a secret, anyone who reaches the port can join the set and take its whole
    database: fine on loopback, worth a warning anywhere else."""
    if secret is not None:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        log.warning("no_cluster_secret", listen_host=host,
                    risk="any host that reaches this port can join the set and receive the whole database",
                    fix="set [cluster] cluster_secret (the same on every member)")


class PeerGate:
    """One served connection's standing as a peer: authenticated once PEER_AUTH proved the
    secret; always, on a member without one (everything works as before secrets)."""

    def __init__(self, secret: bytes | None, *, instance_uuid: str, salt: bytes, remote: str,
                 log: FilteringBoundLogger) -> None:
        self._secret = secret
        self._instance_uuid = instance_uuid
        self._salt = salt
        self._remote = remote
        self._log = log
        self.peer_uuid: str | None = None  # whom PEER_AUTH proved, for the log

    def authenticate(self, frame: Frame) -> dict[int, Any]:
        """Check PEER_AUTH's proof; the reply body holds our own, for the dialer to check."""
        if self._secret is None:
            self._log.warning("peer_refused", remote=self._remote, request="PEER_AUTH", reason="no cluster secret here")
            raise PeerRefused(ErrorCode.ACCESS_DENIED, NO_SECRET)
        request = peer_messages.peer_auth(frame)
        expected = client_proof(self._secret, salt=self._salt, nonce=request.nonce, instance_uuid=request.instance_uuid)
        if not proof_matches(expected, request.proof):
            self._log.warning("peer_refused", remote=self._remote, request="PEER_AUTH", reason=WRONG_SECRET,
                              claimed_uuid=request.instance_uuid)
            raise PeerRefused(ErrorCode.ACCESS_DENIED, WRONG_SECRET)
        self.peer_uuid = request.instance_uuid
        self._log.debug("peer_authenticated", remote=self._remote, peer_uuid=request.instance_uuid)
        return {PeerKey.PROOF: server_proof(self._secret, nonce=request.nonce, salt=self._salt,
                                            instance_uuid=self._instance_uuid)}

    def check(self, request: str) -> None:
        """Before a peer request is even decoded: refused unless the connection proved the
        secret (or this member has none)."""
        if self._secret is None or self.peer_uuid is not None:
            return
        self._log.warning("peer_refused", remote=self._remote, request=request, reason="peer authentication required")
        raise PeerRefused(ErrorCode.ACCESS_DENIED, AUTH_REQUIRED)
