"""The console's `box` on a running member (`replicaset/console.py` evaluates expressions
over it; docs/console.md lists every field).

- `box.info` (also `box.info()`): `Node.info`; `box.info.gc` our GC state, and
  `box.info.gc()` Tarantool's (`WalGcHost.info_call`).
- `box.cfg`: the options, and `replication` as the URIs the member follows: in a replica set
  they come from `_cluster`, not from the config's list.
- `box.snapshot()`, `box.remove(ID[, {force = true}])`.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from replicaset.console import Entry

if TYPE_CHECKING:
    from replicaset.runtime.node import Node


def namespace(node: Node) -> Entry:
    """What `box` holds for the console."""

    async def info() -> dict[str, Any]:
        return node.info()

    async def gc() -> dict[str, Any]:
        return node.wal_gc.info_call()

    return Entry(fields={
        "info": Entry(read=node.info, call=info, fields={"gc": Entry(read=node.wal_gc.info, call=gc)}),
        "cfg": Entry(read=partial(cfg, node)),
        "snapshot": Entry(call=partial(snapshot, node)),
        "remove": Entry(call=node.remove_member),
    })


def cfg(node: Node) -> dict[str, Any]:
    """`box.cfg`: the options as they are now, `replication` as the URIs followed."""
    return node.config.as_dict() | {"replication": sorted({u.address for u in node.upstreams().values()})}


async def snapshot(node: Node) -> str:
    """`box.snapshot()`: a checkpoint now."""
    await node.writer.checkpoint()
    return "ok"
