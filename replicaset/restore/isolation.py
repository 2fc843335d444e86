"""Who a restored copy is: a replica set of its own, served read-only, following no member.

The copy holds the original set's rows, its `_cluster` table included, so a server started on
it would follow every member listed there, and a copy under a member's UUIDs would be taken
for that member. So the copy gets (docs/restore.md, "Identity of the copy"):
- a new replica set UUID: the members of the original set refuse its SUBSCRIBE, JOIN and
  PREPARE, and it refuses theirs (both sides check the replica set UUID);
- a new instance UUID: no `_cluster` row names it, and a member's applier that reaches it at
  an address a member had refuses it as another instance;
- the largest instance id that is neither an origin of its rows nor in its `_cluster`, and
  never 1, the id that creates `_cluster` at a set's first start: `box.info` never shows it as
  one of the original members, and a stamp of its own could never be an origin's;
- `config.toml` with `read_only = true` and the source's `local_tables`, and `restore.toml`,
  which says where the copy comes from and marks it: `replicaset serve` follows no member of a
  copy and takes no write on it, whatever its `_cluster` and its config say.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

from replicaset.core.replicaset import BOOTSTRAP_ID, MEMBERS_MAX
from replicaset.identity import Identity, write_durably
from replicaset.restore.errors import RestoreError

MARKER_FILE = "restore.toml"
CONFIG_FILE = "config.toml"

TomlValue = str | int | list[str] | Mapping[int, int]


def is_copy(data_dir: Path) -> bool:
    """Whether `data_dir` was made by `replicaset restore`."""
    return (data_dir / MARKER_FILE).exists()


def copy_instance_id(taken: Iterable[int]) -> int:
    """The largest id in 2..31 not in `taken` (the origins and the `_cluster` ids of the copy)."""
    used = set(taken)
    free = next((i for i in range(MEMBERS_MAX, BOOTSTRAP_ID, -1) if i not in used), None)
    if free is None:
        raise RestoreError(f"every instance id from {BOOTSTRAP_ID + 1} to {MEMBERS_MAX} is an origin or a member "
                           "of the original set: none is left for the copy")
    return free


def new_identity(instance_id: int) -> Identity:
    return Identity(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()), instance_id=instance_id)


def write_copy_files(data_dir: Path, identity: Identity, *, local_tables: Iterable[str],
                     provenance: Mapping[str, TomlValue]) -> None:
    """The identity, config and marker of a copy; `provenance` goes into the marker."""
    identity.save(data_dir)
    write_durably(data_dir / CONFIG_FILE, _toml({"read_only": True, "local_tables": sorted(local_tables)}))
    write_durably(data_dir / MARKER_FILE,
                  "# A point-in-time copy made by `replicaset restore`: a replica set of its own, served\n"
                  "# read-only and following no member (docs/restore.md).\n" + _toml(provenance))


def _toml(values: Mapping[str, TomlValue | bool]) -> str:
    return "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())


def _toml_value(value: TomlValue | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {v}" for k, v in sorted(value.items())) + " }"
    if isinstance(value, list):
        return "[" + ", ".join(json.dumps(v, ensure_ascii=False) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)  # a JSON string or integer is a TOML one
