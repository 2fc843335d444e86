"""The fast path in front of the intents: most PREPAREs touch rows no intent holds, and
this answers that without a RocksDB read.

Marmot's design names a cuckoo filter. This is a counted set of 64-bit xxh3 digests instead, one
int per live intent: exact (a "no" is always right, a "maybe" is wrong only when two keys
share a digest, about 2**-64 a pair), O(1) for a lookup, an insert and a delete, and
nothing to tune or to overflow. The count keeps two keys that share a digest correct: the
digest stays until both are gone, so a delete never hides an intent. A cuckoo filter (a
few bytes a key) would only save memory; it is for later, when live intents number in the
millions. The filter lives in memory and is rebuilt from the `/intent/` prefix at open.
"""

from __future__ import annotations

import xxhash


class IntentFilter:
    """Which intent keys (the metastore keys under `/intent/`) might be live."""

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}

    def __len__(self) -> int:
        """Live keys added and not discarded."""
        return sum(self._counts.values())

    def might_hold(self, key: bytes) -> bool:
        """False: no intent holds `key`. True: one may; the store has the answer."""
        return xxhash.xxh3_64_intdigest(key) in self._counts

    def add(self, key: bytes) -> None:
        """Add a key once, when its intent is placed."""
        digest = xxhash.xxh3_64_intdigest(key)
        self._counts[digest] = self._counts.get(digest, 0) + 1

    def discard(self, key: bytes) -> None:
        """Remove a key once, when its intent is released. The caller adds and discards each
        intent exactly once; a discard of a digest that is not there shows it did not."""
        digest = xxhash.xxh3_64_intdigest(key)
        count = self._counts.get(digest, 0)
        if count == 0:
            raise KeyError(f"{key!r} is not in the intent filter")
        if count == 1:
            del self._counts[digest]
        else:
            self._counts[digest] = count - 1
