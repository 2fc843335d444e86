"""Removed members, by instance UUID: who removed each and by which row, so that a removed
instance that comes back (it was down at its removal) is told so at its SUBSCRIBE and stops
(`core.replicaset.Removal`), instead of being refused as unknown for ever.

Written synced when a member notices a removal: removals are rare, and a record lost in a
crash would leave the removed instance waiting for good, unless another member tells it.
"""

from __future__ import annotations

from replicaset.core.replicaset import Removal
from replicaset.meta import keys
from replicaset.meta.store import MetaStore, malformed

_ID_MAX = 31
_U64_MAX = 2**64 - 1


def put_removal(store: MetaStore, removal: Removal) -> None:
    with store.batch(sync=True) as batch:
        batch.put(keys.removed(removal.uuid), [removal.instance_id, removal.by, removal.lsn, removal.hlc])


def removal(store: MetaStore, instance_uuid: str) -> Removal | None:
    """The removal of `instance_uuid` this member noticed, None when it noticed none."""
    key = keys.removed(instance_uuid)
    value = store.get(key)
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 4 and all(isinstance(v, int) and not isinstance(v, bool)
                                                                for v in value)):
        raise malformed(key, "[instance_id, by, lsn, hlc]", value)
    instance_id, by, lsn, hlc = value
    if not (1 <= instance_id <= _ID_MAX and 1 <= by <= _ID_MAX and 0 < lsn <= _U64_MAX and 0 <= hlc <= _U64_MAX):
        raise malformed(key, "a removal with ids in 1..31 and a positive lsn", value)
    return Removal(instance_id=instance_id, uuid=instance_uuid, by=by, lsn=lsn, hlc=hlc)
