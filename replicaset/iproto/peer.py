"""Peer-to-peer messages: Tarantool's codes where one exists, a private range otherwise.

JOIN (65) registers a new instance and streams it the newest checkpoint in chunks;
SUBSCRIBE (66) starts a relay. Rows, acknowledgements, heartbeats and checkpoint chunks use
private request types, and their bodies private keys, both above Tarantool's ranges.
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
    REGISTER = PRIVATE_REQUEST_TYPE_MIN + 5


class PeerKey(IntEnum):
    LAST_TXN = 0x70  # {origin: [lsn, txn_id]}
    INCLUDE_OWN = 0x71  # bool: send rows of the subscriber's own origin too
    RECORDS = 0x72  # [record bytes, ...]
    CHUNK = 0x73  # bytes of the checkpoint file
    OFFSET = 0x74  # where CHUNK starts in the file
    SIZE = 0x75  # the checkpoint file's size
    DIGEST = 0x76  # xxh3_64 of CHUNK (or of the whole file in the final reply)
    INSTANCE_ID = 0x77  # the id the registrar allocated
    ADDRESS = 0x78  # HOST:PORT where the instance listens
    REGISTRAR_LSN = 0x79  # the registrar's LSN at or after the instance's `_cluster` row
