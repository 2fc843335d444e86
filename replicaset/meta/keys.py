"""The metastore's key namespace (Marmot's layout, one database per member): every key is
ASCII path text, and fixed-width numbers keep each prefix in numeric order.

| key | value |
|---|---|
| `/txn/{txn_id:016x}` | a transaction record |
| `/txn_idx/pend/{txn_id:016x}` | the txn id: the transaction is undecided |
| `/txn_idx/seq/{origin}/{lsn:020d}/{txn_id:016x}` | the txn id: committed at that WAL row |
| `/intent/{table}/{key}` | the txn id whose intent holds the row |
| `/intent_txn/{txn_id:016x}/{table}/{key}` | `[table, key]`: the intent, by transaction |
| `/repl/{peer_uuid}` | the vclock the peer acknowledged |
| `/repl_removed/{instance_id:010d}` | the last LSN of a removed member's origin (tombstone purge) |
| `/removed/{instance_uuid}` | `[instance_id, by, lsn, hlc]`: who removed that instance, by which row (`meta.removed`) |

An intent key is a `(table, key)` pair: the table's name and the row's text key
(`replicaset.storage.keys.intent_key`, e.g. `users:1`). The key may hold any character;
the table may not hold `/`, which ends it in the paths above.
"""

from __future__ import annotations

TXN = b"/txn/"
TXN_PENDING = b"/txn_idx/pend/"
TXN_SEQ = b"/txn_idx/seq/"
INTENT = b"/intent/"
INTENT_TXN = b"/intent_txn/"
REPL = b"/repl/"
REPL_REMOVED = b"/repl_removed/"
REMOVED = b"/removed/"

TXN_ID_MAX = 2**64 - 1
TXN_ID_HEX = 16

IntentKey = tuple[str, str]


def check_txn_id(txn_id: object) -> int:
    if not isinstance(txn_id, int) or isinstance(txn_id, bool) or not 0 <= txn_id <= TXN_ID_MAX:
        raise ValueError(f"a txn id is an int in 0..2**64-1, got {txn_id!r}")
    return txn_id


def check_intent_key(key: object) -> IntentKey:
    if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(part, str) for part in key)):
        raise ValueError(f"an intent key is a (table, key) pair of str, got {key!r}")
    table, row = key
    if not table or "/" in table:
        raise ValueError(f"a table name in an intent key is non-empty and has no '/', got {table!r}")
    if not row:
        raise ValueError(f"the row key of an intent on {table!r} is empty")
    return table, row


def txn(txn_id: int) -> bytes:
    return TXN + f"{check_txn_id(txn_id):016x}".encode()


def txn_pending(txn_id: int) -> bytes:
    return TXN_PENDING + f"{check_txn_id(txn_id):016x}".encode()


def txn_seq(origin: int, lsn: int, txn_id: int) -> bytes:
    return TXN_SEQ + f"{origin}/{lsn:020d}/{check_txn_id(txn_id):016x}".encode()


def txn_id_after(prefix: bytes, key: bytes) -> int:
    """The txn id that follows `prefix` in `key` (the pending and by-transaction indexes)."""
    return int(key[len(prefix):len(prefix) + TXN_ID_HEX], 16)


def intent(key: IntentKey) -> bytes:
    table, row = check_intent_key(key)
    return INTENT + f"{table}/{row}".encode()


def intent_txn_prefix(txn_id: int) -> bytes:
    return INTENT_TXN + f"{check_txn_id(txn_id):016x}/".encode()


def intent_txn(txn_id: int, key: IntentKey) -> bytes:
    table, row = check_intent_key(key)
    return intent_txn_prefix(txn_id) + f"{table}/{row}".encode()


def repl(peer_uuid: str) -> bytes:
    if not isinstance(peer_uuid, str) or not peer_uuid or "/" in peer_uuid:
        raise ValueError(f"a peer uuid is a non-empty str without '/', got {peer_uuid!r}")
    return REPL + peer_uuid.encode()


def removed(instance_uuid: str) -> bytes:
    if not isinstance(instance_uuid, str) or not instance_uuid or "/" in instance_uuid:
        raise ValueError(f"an instance uuid is a non-empty str without '/', got {instance_uuid!r}")
    return REMOVED + instance_uuid.encode()


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (the prefixes here end in an
    ASCII byte, so adding one to the last byte never carries)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def repl_removed(instance_id: int) -> bytes:
    return REPL_REMOVED + f"{instance_id:010d}".encode()
