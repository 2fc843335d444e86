"""Write intents in the metastore: `replicaset.core.quorum.Intents`, durable, so that a
member that crashes after answering PREPARED still refuses the rows it promised.

Each intent is two keys written in one batch: `/intent/{table}/{key}` -> txn id (what
`holder` reads) and `/intent_txn/{txn_id}/{table}/{key}` (what `release` scans). Neither
placing nor releasing is synced: RocksDB keeps one log and a synced write makes every
earlier write durable, so the PENDING record the host syncs before PREPARED leaves makes
the intents durable too (one fsync per PREPARE, not two), and a crash keeps a prefix of
the writes. An intent that outlives a crash belongs to a transaction that is pending (it
is resolved by asking) or decided (recovery releases it: `replicaset.meta.recovery`).
`IntentFilter` answers most `holder` calls from memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from replicaset.core.transitions import LocalProtocolError
from replicaset.meta import keys as paths
from replicaset.meta.filter import IntentFilter
from replicaset.meta.keys import IntentKey
from replicaset.meta.store import MetaStore, malformed


def _txn_id(key: bytes, value: object) -> int:
    try:
        return paths.check_txn_id(value)
    except ValueError as error:
        raise malformed(key, "a txn id", value) from error


def _intent_key(key: bytes, value: object) -> IntentKey:
    try:
        return paths.check_intent_key(tuple(value) if isinstance(value, list) else value)
    except ValueError as error:
        raise malformed(key, "a (table, key) pair", value) from error


class IntentIndex(Mapping[int, frozenset[IntentKey]]):
    """The intents by transaction, read from `/intent_txn/` on each use."""

    def __init__(self, store: MetaStore) -> None:
        self._store = store

    def __getitem__(self, txn_id: int) -> frozenset[IntentKey]:
        placed = frozenset(_intent_key(key, value) for key, value in self._store.scan(paths.intent_txn_prefix(txn_id)))
        if not placed:
            raise KeyError(txn_id)
        return placed

    def __iter__(self) -> Iterator[int]:
        last = None
        for key in self._store.scan_keys(paths.INTENT_TXN):
            try:
                txn_id = paths.txn_id_after(paths.INTENT_TXN, key)
            except ValueError as error:
                raise malformed(key, "an intent index entry", key) from error
            if txn_id != last:
                last = txn_id
                yield txn_id

    def __len__(self) -> int:
        return sum(1 for _ in self)


class StoredIntents:
    """The intents of one member, in its metastore; same interface as `Intents`."""

    def __init__(self, store: MetaStore) -> None:
        self._store = store
        self._filter = IntentFilter()
        for key in store.scan_keys(paths.INTENT):
            self._filter.add(key)

    @property
    def keys(self) -> Mapping[int, frozenset[IntentKey]]:
        return IntentIndex(self._store)

    def holder(self, key: IntentKey) -> int | None:
        """A miss in the filter answers without reading RocksDB; a hit is checked there."""
        path = paths.intent(key)
        if not self._filter.might_hold(path):
            return None
        value = self._store.get(path)
        return None if value is None else _txn_id(path, value)

    def place(self, txn_id: int, placed: Iterable[IntentKey]) -> None:
        """Durable with the next synced write. A key this transaction holds already is left
        as it is."""
        new = []
        for key in frozenset(placed):
            held = self.holder(key)
            if held is None:
                new.append(key)
            elif held != txn_id:
                raise LocalProtocolError(f"{key!r} is held by transaction {held:#x}, not {txn_id:#x}")
        with self._store.batch(sync=False) as batch:
            for key in new:
                batch.put(paths.intent(key), txn_id)
                batch.put(paths.intent_txn(txn_id, key), list(key))
        for key in new:
            self._filter.add(paths.intent(key))

    def release(self, txn_id: int) -> frozenset[IntentKey]:
        released = self.keys.get(txn_id, frozenset())
        with self._store.batch(sync=False) as batch:
            for key in released:
                batch.delete(paths.intent(key))
                batch.delete(paths.intent_txn(txn_id, key))
        for key in released:
            self._filter.discard(paths.intent(key))
        return released

    def check_invariants(self) -> None:
        holders = {_intent_key_of(path): _txn_id(path, value) for path, value in self._store.scan(paths.INTENT)}
        indexed = {(key, txn_id) for txn_id, placed in self.keys.items() for key in placed}
        assert indexed == set(holders.items()), "one intent per key, indexed by its transaction"
        assert len(self._filter) == len(holders), "the filter counts each live intent once"
        assert all(self._filter.might_hold(paths.intent(key)) for key in holders), "the filter holds every intent"


def _intent_key_of(path: bytes) -> IntentKey:
    table, _, row = path[len(paths.INTENT):].decode().partition("/")
    return table, row
