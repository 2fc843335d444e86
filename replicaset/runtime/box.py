"""The console's `box` on a running member (`replicaset/console.py` evaluates expressions
over it; docs/console.md lists every field).

- `box.info` (also `box.info()`): `Node.info`; `box.info.gc` our GC state, and
  `box.info.gc()` Tarantool's (`WalGcHost.info_call`).
- `box.cfg`: the options, and `replication` as the URIs the member follows: in a replica set
  they come from `_cluster`, not from the config's list.
- `box.cfg{...}`: `Config.change` checks and keeps the values of the dynamic options, then each
  change reaches what uses it. `read_only`, `replication_connect_timeout` and
  `replication.synchro_timeout_s` are read where they are used; `log_level` goes to the
  process's log filter; `checkpoint_interval` reschedules the checkpoint daemon;
  `checkpoint_count` is what the engine keeps at its next checkpoint; `replication_timeout`,
  `replication_skip_conflict` and `replication_connect_quorum` go to the driver, for every
  applier and relay and those to come. A change lasts until the process stops
  (docs/console.md).
- `box.snapshot()`, `box.remove(ID[, {force = true}])`.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from replicaset.config import ConfigError, StaticOption
from replicaset.console import ConsoleError, Entry
from replicaset.iproto.constants import ErrorCode
from replicaset.runtime.errors import RequestError
from replicaset.runtime.logging import set_level

if TYPE_CHECKING:
    from replicaset.runtime.node import Node

REPLICATION_OPTIONS = frozenset({"replication_timeout", "replication_skip_conflict", "replication_connect_quorum"})


def namespace(node: Node) -> Entry:
    """What `box` holds for the console."""

    async def info() -> dict[str, Any]:
        return node.info()

    async def gc() -> dict[str, Any]:
        return node.wal_gc.info_call()

    return Entry(fields={
        "info": Entry(read=node.info, call=info, fields={"gc": Entry(read=node.wal_gc.info, call=gc)}),
        "cfg": Entry(read=partial(cfg, node), call=partial(configure, node)),
        "snapshot": Entry(call=partial(snapshot, node)),
        "remove": Entry(call=node.remove_member),
    })


def cfg(node: Node) -> dict[str, Any]:
    """`box.cfg`: the options as they are now, `replication` as the URIs followed."""
    return node.config.as_dict() | {"replication": sorted({u.address for u in node.upstreams().values()})}


async def configure(node: Node, options: Any = None) -> None:
    """`box.cfg{name = value, ...}`: all the changes or none (ER_RELOAD_CFG for an option a
    running member cannot change, ER_CFG for a bad one)."""
    if options is None:
        return
    if not isinstance(options, dict):
        raise ConsoleError(f"box.cfg takes a table of options, as box.cfg{{read_only = true}}, got {options!r:.40}")
    if options.get("read_only") is False and (node.isolated or node.identity.anonymous):
        kind = "a restored copy (docs/restore.md)" if node.isolated else "an anonymous follower"
        raise RequestError(ErrorCode.CFG, f"Incorrect value for option 'read_only': {kind} is always read-only")
    try:
        changed = node.config.change(options)
    except StaticOption as exc:
        raise RequestError(ErrorCode.RELOAD_CFG, str(exc)) from None
    except ConfigError as exc:
        raise RequestError(ErrorCode.CFG, str(exc)) from None
    if not changed:
        return
    if "log_level" in changed:
        set_level(changed["log_level"])
    node.log.info("box_cfg", changed=changed)
    if "checkpoint_interval" in changed:
        node.checkpoints.reschedule()
    if "checkpoint_count" in changed:
        node.engine.config = dataclasses.replace(node.engine.config, checkpoint_count=changed["checkpoint_count"])
    if changed.keys() & REPLICATION_OPTIONS:
        node.carry_out(node.driver.replication_configured(
            trio.current_time(), **node.replication_settings(), participant_timeout_s=node.quorum.participant_timeout_s(),
            connect_quorum=node.config.replication_connect_quorum))


async def snapshot(node: Node) -> str:
    """`box.snapshot()`: a checkpoint now."""
    await node.writer.checkpoint()
    return "ok"
