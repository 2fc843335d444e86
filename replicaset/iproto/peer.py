"""Peer-to-peer messages: Tarantool's codes where one exists, a private range otherwise.

Quorum transactions (docs/design/README.md §4.5) add PREPARE, COMMIT (carrying the exact WAL row), ABORT,
the question for a decision and the coordinator's heartbeat, each from a registered member
naming itself by id and UUID.

JOIN (65) registers a new instance and streams it the newest checkpoint in chunks, each
naming the checkpoint by its vclock and size; a JOIN that carries RESUME (what the joiner
kept of an interrupted transfer) is streamed only the rest when it names that same
checkpoint and its prefix digest matches. SUBSCRIBE (66) starts a relay. Rows,
acknowledgements, heartbeats and checkpoint chunks use private request types, and their
bodies private keys, both above Tarantool's ranges. PEER_AUTH proves, both ways, that
the two sides hold the same cluster secret (docs/security.md).
A row travels as the exact bytes of its WAL record (header, checksum and payload), so
one `(origin, lsn)` has one digest on every member and corruption on the way is caught.
"""

from enum import IntEnum

from .constants import PRIVATE_REQUEST_TYPE_MIN


class PeerRequest(IntEnum):
    ROWS = PRIVATE_REQUEST_TYPE_MIN + 1
    ACK = PRIVATE_REQUEST_TYPE_MIN + 2
    HEARTBEAT = PRIVATE_REQUEST_TYPE_MIN + 3
    CHECKPOINT_CHUNK = PRIVATE_REQUEST_TYPE_MIN + 4
    # PRIVATE_REQUEST_TYPE_MIN + 5 was REGISTER (a join forwarded to the one registrar), retired
    TXN_PREPARE = PRIVATE_REQUEST_TYPE_MIN + 6
    TXN_COMMIT = PRIVATE_REQUEST_TYPE_MIN + 7
    TXN_ABORT = PRIVATE_REQUEST_TYPE_MIN + 8
    TXN_QUERY = PRIVATE_REQUEST_TYPE_MIN + 9
    TXN_HEARTBEAT = PRIVATE_REQUEST_TYPE_MIN + 10
    # The dialer's proof that it holds the cluster secret, sent right after the greeting
    # (`peer_auth.py`); the answer carries the server's proof.
    PEER_AUTH = PRIVATE_REQUEST_TYPE_MIN + 11
    # "Do you hold this transaction's row?", about a removed coordinator's transaction
    # (`specs/QuorumRemoval.tla`): DECISION "commit", "abort", "no_row", or nil.
    TXN_QUERY_ROW = PRIVATE_REQUEST_TYPE_MIN + 12


class PeerKey(IntEnum):
    LAST_TXN = 0x70  # {origin: [lsn, txn_id]}
    INCLUDE_OWN = 0x71  # bool: send rows of the subscriber's own origin too
    RECORDS = 0x72  # [record bytes, ...]
    CHUNK = 0x73  # bytes of the checkpoint file
    OFFSET = 0x74  # where CHUNK starts in the file
    SIZE = 0x75  # the checkpoint file's size
    DIGEST = 0x76  # xxh3_64 of CHUNK (or of the whole file in the final reply)
    INSTANCE_ID = 0x77  # the id the joiner was registered with
    ADDRESS = 0x78  # HOST:PORT where the instance listens
    REGISTRATION_ROW = 0x79  # [origin, lsn]: a row at or after the joiner's `_cluster` row
    TXN_ID = 0x7A  # a quorum transaction's id
    COORDINATOR = 0x7B  # the instance id of its coordinator
    MEMBERS = 0x7C  # [instance id, ...]: the total membership it is decided on
    READS = 0x7D  # [[table, key, hlc, origin], ...]: each key's version as read
    VOTE = 0x7E  # PREPARE's answer: "prepared", "conflict", or nil (the outcome is known)
    CONFLICT = 0x7F  # [table, key, holder txn id or nil]
    DECISION = 0x80  # "commit", "abort", or nil (none known); "no_row" answers TXN_QUERY_ROW
    TXN_IDS = 0x81  # [txn id, ...]
    BARRIER = 0x82  # {origin: lsn}: what a joiner holds before it votes (MembershipQuorum R3)
    HELD = 0x83  # {origin: lsn}: what a member voting for a membership change holds durably
    ANONYMOUS = 0x84  # bool: JOIN/SUBSCRIBE of a read-only follower, never registered
    RESUME = 0x85  # JOIN: [vclock, size, offset, digest]: the first `offset` bytes of that checkpoint are kept
    NONCE = 0x86  # PEER_AUTH: the dialer's fresh random challenge
    PROOF = 0x87  # PEER_AUTH and its answer: an HMAC-SHA256 proof of the cluster secret
    REGISTERED = 0x88  # JOIN's end: [[instance id, uuid, address], ...] registered at the member serving it
