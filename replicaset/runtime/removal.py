"""A member's removal as members tell it: on the wire (the custom fields of the error that
refuses a removed instance's SUBSCRIBE), in a log line and in a sentence for the operator.

The fields come from a peer, so they are checked like any peer field before the replica-set
core judges them (`core.replicaset.is_removal_of`); malformed ones count as none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from replicaset.core.hlc import unpack_stamp
from replicaset.core.replicaset import MEMBERS_MAX, Removal

U64_MAX = 2**64 - 1
FIELDS = ("removed_id", "removed_by", "removal_lsn", "removal_hlc")


def to_fields(removal: Removal) -> dict[str, Any]:
    return dict(zip(FIELDS, (removal.instance_id, removal.by, removal.lsn, removal.hlc), strict=True))


def from_fields(fields: Any, uuid: str) -> Removal | None:
    """The removal of `uuid` a peer's refusal names, None when it names none (or garbage)."""
    if not isinstance(fields, dict):
        return None
    values = [fields.get(name) for name in FIELDS]
    if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= U64_MAX for v in values):
        return None
    instance_id, by, lsn, hlc = values
    if not (1 <= instance_id <= MEMBERS_MAX and 1 <= by <= MEMBERS_MAX and lsn > 0):
        return None
    return Removal(instance_id=instance_id, uuid=uuid, by=by, lsn=lsn, hlc=hlc)


def removed_at(removal: Removal) -> str:
    """The removal's wall time, from its row's HLC stamp (UTC, ISO 8601)."""
    ms = unpack_stamp(removal.hlc)[0]
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log_fields(removal: Removal) -> dict[str, Any]:
    return {"instance_id_removed": removal.instance_id, "removed_by": removal.by, "removed_at": removed_at(removal),
            "removal_row": [removal.by, removal.lsn], "removal_hlc": removal.hlc}


def describe(removal: Removal) -> str:
    """"was removed ... by instance 1 at <time>": the rest of a sentence naming the instance."""
    return (f"(id {removal.instance_id}) was removed from the replica set by instance {removal.by} at "
            f"{removed_at(removal)} (box.remove; its row {removal.by}:{removal.lsn})")
