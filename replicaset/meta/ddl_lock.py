"""The DDL lock record (DESIGN 4.6): which member holds the set's DDL lock, for which
transaction, until when. The store keeps the record only; whether a lease has expired is
the caller's question, asked with its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from replicaset.meta import keys
from replicaset.meta.keys import check_txn_id
from replicaset.meta.store import MetaStore, malformed


@dataclass(frozen=True, slots=True, kw_only=True)
class DdlLock:
    """`expires_s`: the end of the lease, on the clock of whoever granted it."""

    holder: int
    txn_id: int
    expires_s: float

    def __post_init__(self) -> None:
        if not isinstance(self.holder, int) or isinstance(self.holder, bool):
            raise ValueError(f"a DDL lock holder is an instance id (int), got {self.holder!r}")
        check_txn_id(self.txn_id)
        if not isinstance(self.expires_s, (int, float)) or isinstance(self.expires_s, bool):
            raise ValueError(f"a DDL lock expiry is a number of seconds, got {self.expires_s!r}")


def put_ddl_lock(store: MetaStore, lock: DdlLock) -> None:
    """Synced: a member grants the lock to a peer only once it is durable."""
    with store.batch(sync=True) as batch:
        batch.put(keys.DDL_LOCK, {"holder": lock.holder, "txn_id": lock.txn_id, "expires_s": lock.expires_s})


def ddl_lock(store: MetaStore) -> DdlLock | None:
    value = store.get(keys.DDL_LOCK)
    if value is None:
        return None
    try:
        return DdlLock(holder=value["holder"], txn_id=value["txn_id"], expires_s=value["expires_s"])
    except (KeyError, TypeError, ValueError) as error:
        raise malformed(keys.DDL_LOCK, "a DDL lock", value) from error


def clear_ddl_lock(store: MetaStore) -> None:
    """Synced, like the grant: a released lock must not come back after a crash."""
    with store.batch(sync=True) as batch:
        batch.delete(keys.DDL_LOCK)
