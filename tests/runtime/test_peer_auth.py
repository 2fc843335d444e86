"""The cluster secret's proofs and seals, and the dialing side of PEER_AUTH against members
that cannot prove the secret: a joiner must never take a database from one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from replicaset.config import ConfigError, load
from replicaset.iproto.codec import encode_error, encode_ok
from replicaset.iproto.constants import ErrorCode
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey
from replicaset.iproto.peer_auth import (
    PROOF_BYTES, SWIM_SEAL_BYTES, SealError, client_proof, server_proof, swim_open, swim_seal,
)
from replicaset.runtime.join import join
from replicaset.runtime.links import PeerError, PeerLink
from replicaset.runtime.peer_access import PeerCredentials, load_secret, warn_if_exposed
from replicaset.runtime.swim import StampGuard
from replicaset.runtime.environment import TCP
from tests.runtime.test_join_hostile_peer import PEER, RS, assert_nothing_installed, chunk, ending, fake_peer

SECRET = b"the set's secret"
OTHER = b"another set's secret"
SALT = b"s" * 32  # what fake_peer's greeting carries
DB = b"SQLite format 3\x00" + b"\x00" * 4080
ME = "5f0e4a52-0000-4000-8000-0000000000cc"


def test_each_proof_is_bound_to_its_purpose_its_challenges_and_the_secret() -> None:
    nonce = b"n" * 32
    proof = client_proof(SECRET, salt=SALT, nonce=nonce, instance_uuid=ME)
    assert len(proof) == PROOF_BYTES
    assert proof != server_proof(SECRET, nonce=SALT, salt=nonce, instance_uuid=ME), "a reflected proof never passes"
    assert proof != client_proof(OTHER, salt=SALT, nonce=nonce, instance_uuid=ME)
    assert proof != client_proof(SECRET, salt=b"t" * 32, nonce=nonce, instance_uuid=ME)
    assert proof != client_proof(SECRET, salt=SALT, nonce=b"m" * 32, instance_uuid=ME)
    assert proof != client_proof(SECRET, salt=SALT, nonce=nonce, instance_uuid=PEER)


def test_a_swim_seal_opens_with_the_secret_only_and_covers_every_byte() -> None:
    sealed = swim_seal(SECRET, 1234, b"payload")
    assert len(sealed) == SWIM_SEAL_BYTES + len(b"payload")
    assert swim_open(SECRET, sealed) == (1234, b"payload")
    for bad in (swim_seal(OTHER, 1234, b"payload"), sealed[:-1] + b"X", sealed[:16] + (1235).to_bytes(8, "big")
                + b"payload", b"payload", b""):
        with pytest.raises(SealError):
            swim_open(SECRET, bad)


def test_a_stamp_is_taken_once_per_sender_after_start_and_within_the_window() -> None:
    s = 1_000_000_000
    guard = StampGuard(started_ns=100 * s, window_s=10)
    assert guard.refusal(2, 101 * s, now_ns=101 * s) is None
    assert "not after" in guard.refusal(2, 101 * s, now_ns=102 * s), "the same datagram again: a replay"
    assert "not after" in guard.refusal(2, 100 * s + 5, now_ns=102 * s), "an older one: reordered or replayed"
    assert guard.refusal(3, 100 * s + 5, now_ns=102 * s) is None, "each sender has its own order"
    assert "before this member started" in guard.refusal(4, 99 * s, now_ns=100 * s)
    assert "from our clock" in guard.refusal(4, 101 * s, now_ns=112 * s), "held back past the window"
    assert "from our clock" in guard.refusal(4, 125 * s, now_ns=112 * s), "from the future"
    assert guard.refusal(2, 111 * s, now_ns=112 * s) is None


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warning(self, event: str, **fields: object) -> None:
        self.warnings.append(event)


def test_listening_beyond_loopback_without_a_secret_is_warned_of() -> None:
    for host, secret, warned in (("0.0.0.0", None, True), ("10.1.2.3", None, True), ("::", None, True),
                                 ("127.0.0.1", None, False), ("::1", None, False), ("localhost", None, False),
                                 ("0.0.0.0", SECRET, False)):
        log = _Log()
        warn_if_exposed(log, host, secret)  # type: ignore[arg-type]
        assert log.warnings == (["no_cluster_secret"] if warned else []), host


def _open(address: str, secret: bytes = SECRET) -> PeerLink:
    return trio.run(lambda: PeerLink.open(address, 1 << 20, PeerCredentials(instance_uuid=ME, secret=secret), network=TCP))


def _proof_from(secret: bytes) -> list[bytes]:
    """An answer to PEER_AUTH with a server proof made with `secret`: right or wrong, the
    fake peer cannot know the joiner's nonce in advance, so the proof is of another one."""
    return [encode_ok(sync=1, schema_version=1,
                      body={PeerKey.PROOF: server_proof(secret, nonce=b"n" * 32, salt=SALT, instance_uuid=PEER)})]


def test_a_member_that_cannot_prove_the_secret_is_not_trusted() -> None:
    with fake_peer(_proof_from(OTHER)) as address:
        with pytest.raises(PeerError, match="failed to prove it holds our cluster secret") as caught:
            _open(address)
    assert caught.value.code == ErrorCode.ACCESS_DENIED
    with fake_peer([encode_ok(sync=1, schema_version=1, body={PeerKey.PROOF: b"short"})]) as address:
        with pytest.raises(RemoteProtocolError, match="field PROOF"):
            _open(address)


def test_a_member_without_a_secret_or_that_refuses_ours_fails_the_link_naming_why() -> None:
    refusals = [
        (ErrorCode.UNKNOWN_REQUEST_TYPE, "Unknown request type", "does not know peer authentication"),
        (ErrorCode.ACCESS_DENIED, "wrong cluster secret", "refused our peer authentication: wrong cluster secret"),
        (ErrorCode.ACCESS_DENIED, "this member has no cluster secret", "has no cluster secret"),
    ]
    for code, message, expected in refusals:
        with fake_peer([encode_error(sync=1, schema_version=1, code=code, message=message)]) as address:
            with pytest.raises(PeerError, match=expected):
                _open(address)


def test_a_joiner_takes_no_checkpoint_from_a_member_that_cannot_prove_the_secret(tmp_path: Path) -> None:
    """The fake member answers PEER_AUTH with a wrong proof and goes on with a checkpoint as
    if JOIN had been sent: the joiner stops at the proof and installs nothing."""
    frames = _proof_from(OTHER) + [chunk(DB, 0, len(DB)), ending(DB, {1: 5})]
    with fake_peer(frames) as address:
        assert join(tmp_path, replicaset_uuid=RS, peers=[address], listen="127.0.0.1:3999", secret=SECRET) is None
    assert_nothing_installed(tmp_path)


def test_the_secret_comes_from_the_config_or_a_file_read_once_and_trimmed(tmp_path: Path) -> None:
    assert load_secret(load()) is None
    assert load_secret(load(overrides={"cluster.cluster_secret": "abc"})) == b"abc"
    path = tmp_path / "secret"
    path.write_text("0123abcd\n")
    assert load_secret(load(overrides={"cluster.cluster_secret_file": str(path)})) == b"0123abcd"
    path.write_text(" \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_secret(load(overrides={"cluster.cluster_secret_file": str(path)}))
    with pytest.raises(ConfigError, match="cannot read"):
        load_secret(load(overrides={"cluster.cluster_secret_file": str(tmp_path / "missing")}))
    with pytest.raises(ConfigError, match="both set"):
        load(overrides={"cluster.cluster_secret": "abc", "cluster.cluster_secret_file": str(path)})
