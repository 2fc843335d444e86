"""Replication state per peer: the vclock each peer acknowledged, which WAL GC will keep
rows for (a GC consumer per peer, docs/design/README.md §4.8).

Written unsynced: a crash that loses the newest acknowledgement leaves an older vclock,
which only keeps more WAL; the peer acknowledges again after it reconnects.
"""

from __future__ import annotations

from collections.abc import Mapping

from wal.vclock import LSN_MAX, VCLOCK_MAX

from replicaset.meta import keys
from replicaset.meta.store import MetaStore, malformed


def _check_vclock(vclock: Mapping[object, object]) -> dict[int, int]:
    checked: dict[int, int] = {}
    for origin, lsn in vclock.items():
        if not (isinstance(origin, int) and not isinstance(origin, bool) and 0 <= origin < VCLOCK_MAX):
            raise ValueError(f"a vclock origin is an int in 0..{VCLOCK_MAX - 1}, got {origin!r}")
        if not (isinstance(lsn, int) and not isinstance(lsn, bool) and 0 <= lsn <= LSN_MAX):
            raise ValueError(f"a vclock lsn is an int in 0..{LSN_MAX}, got {lsn!r}")
        checked[origin] = lsn
    return checked


def put_repl(store: MetaStore, peer_uuid: str, acked: Mapping[int, int]) -> None:
    """`peer_uuid` holds `acked` (origin -> LSN) durably, as it told this member."""
    key = keys.repl(peer_uuid)
    vclock = _check_vclock(acked)
    with store.batch(sync=False) as batch:
        batch.put(key, vclock)


def repl(store: MetaStore, peer_uuid: str) -> dict[int, int] | None:
    """What `peer_uuid` last acknowledged; None for a peer that never did."""
    key = keys.repl(peer_uuid)
    value = store.get(key)
    if value is None:
        return None
    try:
        return _check_vclock(value)
    except (AttributeError, ValueError) as error:
        raise malformed(key, "a vclock", value) from error


def put_removed(store: MetaStore, instance_id: int, last_lsn: int) -> None:
    """The origin of removed member `instance_id` ends at `last_lsn` (`core.purge`), synced:
    a restart that forgot it would count the member again from nothing, and purge nothing."""
    checked = _check_vclock({instance_id: last_lsn})
    with store.batch(sync=True) as batch:
        batch.put(keys.repl_removed(instance_id), checked[instance_id])


def removed_ends(store: MetaStore) -> dict[int, int]:
    """Every settled removed origin: instance id -> its last LSN."""
    ends: dict[int, int] = {}
    for key, value in store.scan(keys.REPL_REMOVED):
        try:
            instance_id = int(key[len(keys.REPL_REMOVED):])
            ends.update(_check_vclock({instance_id: value}))
        except (AttributeError, ValueError) as error:
            raise malformed(key, "a removed member's last LSN", value) from error
    return ends
