"""chap-sha1, the authentication every Tarantool connector speaks.

The client proves it knows the password without sending it: the scramble mixes the
password's hash with the per-connection salt from the greeting, so a captured AUTH request
is useless on another connection.
"""

import hashlib
import hmac

#: The method name an AUTH request's TUPLE starts with, and the ID reply's AUTH_TYPE.
CHAP_SHA1 = "chap-sha1"

_SALT_BYTES = 20  # Tarantool sends 32 bytes of salt and uses the first 20


def scramble(password: str, salt: bytes) -> bytes:
    """sha1(password) XOR sha1(salt[:20] + sha1(sha1(password)))."""
    return _chap_sha1(password, salt)


def check_scramble(scramble: bytes, salt: bytes, password: str) -> bool:
    """Whether a client's scramble proves `password`, compared in constant time.

    A scramble that is not bytes (a peer may send any msgpack value) simply does not match.
    """
    return check_scramble_hash(scramble, salt, password_hash(password))


def _chap_sha1(password: str, salt: bytes) -> bytes:
    # A separate name because check_scramble's parameter is called `scramble`.
    hash1 = hashlib.sha1(password.encode("utf-8")).digest()
    hash2 = hashlib.sha1(hash1).digest()
    mask = hashlib.sha1(salt[:_SALT_BYTES] + hash2).digest()
    return bytes(a ^ b for a, b in zip(hash1, mask, strict=True))


def password_hash(password: str) -> bytes:
    """sha1(sha1(password)): what a server needs to check a scramble, as Tarantool keeps
    it in `_user`, so the password itself need not be kept."""
    return hashlib.sha1(hashlib.sha1(password.encode("utf-8")).digest()).digest()


def check_scramble_hash(scramble: bytes, salt: bytes, hash2: bytes) -> bool:
    """Whether a client's scramble proves the password whose `password_hash` is `hash2`:
    the scramble XOR sha1(salt + hash2) is sha1(password), whose sha1 must be `hash2`."""
    if not isinstance(scramble, bytes) or len(scramble) != len(hash2):
        return False
    mask = hashlib.sha1(salt[:_SALT_BYTES] + hash2).digest()
    hash1 = bytes(a ^ b for a, b in zip(scramble, mask, strict=True))
    return hmac.compare_digest(hashlib.sha1(hash1).digest(), hash2)
