"""chap-sha1 scrambles: a fixed vector, the connector's own computation, and rejection."""

import msgpack
import tarantool
from tarantool.request import RequestAuthenticate

from replicaset.iproto import CHAP_SHA1, Key, check_scramble, scramble
from replicaset.iproto.auth import check_scramble_hash, password_hash

SALT = bytes(range(32))
# sha1("secret") XOR sha1(SALT[:20] + sha1(sha1("secret"))), computed once by hand.
SECRET_SCRAMBLE = bytes.fromhex("21b3ff405f32cbe4aafff291396046ea29fa3a4d")


def test_scramble_matches_known_vector() -> None:
    assert scramble("secret", SALT) == SECRET_SCRAMBLE
    assert scramble("secret", SALT[:20]) == SECRET_SCRAMBLE  # only 20 bytes of salt count


def test_scramble_matches_the_connector() -> None:
    conn = tarantool.Connection("127.0.0.1", 1, connect_now=False)
    request = RequestAuthenticate(conn, SALT[:20], "alice", "pässword")
    body = msgpack.unpackb(request._body, strict_map_key=False)
    assert body[Key.TUPLE] == [CHAP_SHA1, scramble("pässword", SALT)]


def test_check_scramble_accepts_right_and_rejects_wrong_password() -> None:
    assert check_scramble(SECRET_SCRAMBLE, SALT, "secret")
    assert not check_scramble(SECRET_SCRAMBLE, SALT, "Secret")
    assert not check_scramble(scramble("secret", bytes(32)), SALT, "secret")
    assert not check_scramble(SECRET_SCRAMBLE[:-1], SALT, "secret")
    assert not check_scramble("not bytes", SALT, "secret")  # type: ignore[arg-type]
    assert check_scramble(scramble("", SALT), SALT, "")


def test_a_scramble_checks_against_the_stored_hash_alone() -> None:
    """Tarantool keeps sha1(sha1(password)); so may a config, without the password."""
    assert password_hash("secret").hex() == "14e65567abdb5135d0cfd9a70b3032c179a49ee7"
    assert check_scramble_hash(SECRET_SCRAMBLE, SALT, password_hash("secret"))
    assert not check_scramble_hash(SECRET_SCRAMBLE, SALT, password_hash("Secret"))
    assert not check_scramble_hash(SECRET_SCRAMBLE[:-1], SALT, password_hash("secret"))
