"""The metastore: one RocksDB database (rocksdict, raw bytes) per member, keys from
`replicaset.meta.keys`, values msgpack.

Every write goes through a batch, so one logical change (an intent and its index entry, a
decision and the move out of the pending index) lands whole or not at all. A batch says
whether it is synced: `sync=True` makes it durable before `batch` returns, with every
write before it (one log, recovered to a point in time), which a member needs before it
answers a peer (a PREPARE's intents and record); an unsynced batch may be lost in a
crash, with every write after it, which is fine for what recovery can redo or does not
need.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack
import rocksdict

from replicaset.meta.keys import prefix_end


class MetaError(Exception):
    """The metastore cannot be opened, or holds something it cannot read: the member must
    not go on as if the record were absent."""


class MetaWriteFailed(MetaError):
    """RocksDB failed a write (a full disk): it refuses every write after that until it is
    reopened, and rocksdict offers no `DB::Resume`. The member cannot record decisions any
    more and must stop; what the failed write and the unsynced ones before it held is what
    recovery redoes (docs/design/metastore.md), so a restart once space is freed is safe."""


def _describe(key: bytes) -> str:
    return key.decode("utf-8", errors="backslashreplace")


def encode(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def decode(key: bytes, raw: bytes) -> Any:
    """`raw` as stored under `key`; MetaError naming the key when it is not msgpack."""
    try:
        return msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise MetaError(f"metastore value under {_describe(key)!r} does not decode: {error}") from error


def malformed(key: bytes, what: str, value: Any) -> MetaError:
    """The error for a value that decodes but is not the record its key promises."""
    return MetaError(f"metastore value under {_describe(key)!r} is not {what}: {value!r}")


class Batch:
    """Puts and deletes that `MetaStore.batch` writes together when its block ends."""

    def __init__(self) -> None:
        self._batch = rocksdict.WriteBatch(raw_mode=True)

    def put(self, key: bytes, value: Any) -> None:
        self._batch.put(key, encode(value))

    def delete(self, key: bytes) -> None:
        self._batch.delete(key)


class MetaStore:
    """An open metastore directory; RocksDB's LOCK file keeps a second opener out."""

    def __init__(self, path: Path, db: rocksdict.Rdict) -> None:
        self.path = path
        self._db: rocksdict.Rdict | None = db
        self.failed: MetaWriteFailed | None = None

    def __repr__(self) -> str:
        return f"MetaStore({str(self.path)!r})"

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> MetaStore:
        """Open (creating) the metastore in directory `path`."""
        path = Path(path)
        options = rocksdict.Options(raw_mode=True)
        # A crash keeps a prefix of the writes: what makes one synced write cover those before it.
        options.set_wal_recovery_mode(rocksdict.DBRecoveryMode.point_in_time())
        try:
            db = rocksdict.Rdict(str(path), options)
        except Exception as error:
            if "LOCK" in str(error):
                raise MetaError(f"metastore {str(path)!r} is already open (its RocksDB LOCK is held)") from error
            raise MetaError(f"cannot open metastore {str(path)!r}: {error}") from error
        return cls(path, db)

    def close(self) -> None:
        """Close; after a failed write RocksDB's close fails the same way (its last flush)
        and still lets the directory go, so that second report of one condition is dropped."""
        db, self._db = self._db, None
        if db is None:
            return
        try:
            db.close()
        except Exception as error:
            if self.failed is None:
                raise self._write_failed("close", error) from error

    def __enter__(self) -> MetaStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_db(self) -> rocksdict.Rdict:
        if self._db is None:
            raise MetaError(f"metastore {str(self.path)!r} is closed")
        return self._db

    def get(self, key: bytes) -> Any | None:
        """The value under `key`, None when there is none (nil is never stored alone)."""
        raw = self._open_db().get(key)
        return None if raw is None else decode(key, raw)

    def scan(self, prefix: bytes) -> Iterator[tuple[bytes, Any]]:
        """Every key under `prefix` in key order, with its value."""
        for key, raw in self._raw_scan(prefix):
            yield key, decode(key, raw)

    def scan_keys(self, prefix: bytes) -> Iterator[bytes]:
        """Every key under `prefix` in key order (index prefixes, whose values say nothing)."""
        for key, _ in self._raw_scan(prefix):
            yield key

    def _raw_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        bounds = rocksdict.ReadOptions()
        bounds.set_iterate_upper_bound(prefix_end(prefix))
        yield from self._open_db().items(from_key=prefix, read_opt=bounds)

    def sync(self) -> None:
        """Every write so far durable: RocksDB's one log, fsynced."""
        db = self._open_db()
        try:
            db.flush_wal(sync=True)
        except Exception as error:
            raise self._write_failed("sync", error) from error

    def _write_failed(self, what: str, error: Exception) -> MetaWriteFailed:
        """The first failure is kept: RocksDB answers every later write with "Writer has
        previous error", which says less than the first one."""
        if self.failed is None:
            self.failed = MetaWriteFailed(f"metastore {str(self.path)!r}: {what} failed: {error}; RocksDB takes no "
                                          f"write after this until reopened: restart the member once space is freed")
        return self.failed

    @contextmanager
    def batch(self, *, sync: bool) -> Iterator[Batch]:
        """Collect writes in the block and write them as one; nothing is written when the
        block raises. `sync` has no default: each writer says whether it must be durable."""
        db = self._open_db()
        batch = Batch()
        yield batch
        try:
            db.write(batch._batch)
        except Exception as error:
            raise self._write_failed("write", error) from error
        if sync:
            # Not `WriteOptions.sync`: rocksdict holds the GIL through that fsync, so a sync in
            # a worker thread would stop the event loop all the same; `flush_wal` lets it go.
            self.sync()
