"""WAL GC on the server: the host of the driver's `core.gc` (docs/design/README.md §4.8).

Theory of operation. Every `[gc] interval_s` a pass hands the core the log's segments
(with their files' modification times: when each was last written), the kept
checkpoints the log continues and the registered peers, then removes what the core
says. The pass holds the writer's checkpoint lock and its token: no checkpoint comes or
goes and no append rolls a segment while the log's shape is read and cut. The peers'
consumers (the vclock each acknowledged to our relays) are kept in the metastore's
`/repl/{uuid}` at each pass, unsynced: a crash that loses the newest ones leaves older
vclocks, which only keep more of the log, and the peers acknowledge again once back.

Each pass is also a tombstone purge pass (`core.purge`, docs/design/tombstone-purge.md)
over the same acknowledgements: the registered members and SQLite's vclock are read under
the writer's token, so both are of one committed state; the tombstones the core names go in
a transaction of their own. Where a removed member's origin ends is kept in the metastore
(`/repl_removed/`), synced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import trio

from replicaset.config import Config
from replicaset.core import gc, purge
from replicaset.identity import Identity
from replicaset.member import GcAction, MemberDriver, PurgeAction
from replicaset.meta.repl import put_removed, put_repl, removed_ends, repl
from replicaset.meta.store import MetaStore
from replicaset.runtime.clock import WallClock
from replicaset.runtime.disk import DiskGuard
from replicaset.runtime.writer import Writer
from replicaset.storage import Engine
from wal import VClock


class HoldsMetastore(Protocol):
    meta: MetaStore


class WalGcNode(Protocol):
    """What WAL GC and the tombstone purge need of their member: the peers' consumers are
    kept in the quorum host's metastore."""

    config: Config
    identity: Identity
    driver: MemberDriver
    engine: Engine
    writer: Writer
    disk: DiskGuard
    clock: WallClock
    log: Any

    @property
    def quorum(self) -> HoldsMetastore: ...

    def members(self) -> list[tuple[int, str, str]]: ...


def wal_gc(config: Any) -> gc.WalGc:
    """The core with the configured retention (validated at start, with the delta sync
    thresholds, by `replicaset.config`)."""
    return gc.WalGc(min_retention_s=float(config["gc.min_retention_s"]),
                    max_retention_s=float(config["gc.max_retention_s"]))


class WalGcHost:
    def __init__(self, node: WalGcNode) -> None:
        self._node = node
        self.removed_segments = 0  # since start, for the console
        self.purged_tombstones = 0  # since start
        self.purge_stopped: str | None = None
        self._purged_under: dict[int, int] = {}  # the last bound purged under
        self._checkpoints: list[tuple[str, VClock]] = []  # the last pass's checkpoint consumers
        self._closed_s: dict[str, float] = {}  # a segment -> the first pass that saw it closed (the clock's)

    def _peers(self) -> dict[int, str]:
        """Registered members but this one: id -> uuid."""
        own = self._node.identity.instance_id
        return {instance_id: uuid for instance_id, uuid, _ in self._node.members() if instance_id != own}

    def restore(self) -> None:
        """The peers' consumers as the last run left them in the metastore."""
        meta = self._node.quorum.meta
        kept = {peer: repl(meta, uuid) for peer, uuid in self._peers().items()}
        self._node.driver.gc_restored({peer: acked or {} for peer, acked in kept.items()})
        self._node.driver.purge_restored(removed_ends(meta))

    async def run(self) -> None:
        interval = float(self._node.config["gc.interval_s"])
        while True:
            await trio.sleep(interval)
            await self.collect()

    def _written_s(self, path: Path, now_s: float, *, live: bool) -> float:
        """When the segment was last written, on the member's clock: no later than its
        mtime, nor than the first pass that saw it closed. The file system's clock is
        not the member's: a clock set back, or the simulator's, reads an mtime in the
        future, which would keep the segment for good."""
        mtime = path.stat().st_mtime
        return min(mtime, now_s) if live else min(mtime, self._closed_s.setdefault(path.name, now_s))

    async def collect(self) -> gc.Kept | None:
        """One pass; what stays and why (`box.info.gc`)."""
        node = self._node
        engine, writer = node.engine, node.writer
        peers = self._peers()
        meta = node.quorum.meta
        # A full disk keeps its room for what cannot wait: an older stored vclock only keeps
        # more WAL after a restart, and a purge put off runs at a later pass.
        disk_full = node.disk.poll()
        for peer, uuid in peers.items():
            acked = node.driver.gc.peers.get(peer)
            if acked and not disk_full:
                put_repl(meta, uuid, acked)
        async with writer.checkpoint_lock, writer.token:
            wal = engine.wal
            start = engine.log_start()
            now_s = node.clock.now_ns() / 1e9
            listed = wal.segments()
            segments = [gc.Segment(name=path.name, start=vclock,
                                   written_s=self._written_s(path, now_s, live=i == len(listed) - 1))
                        for i, (path, vclock) in enumerate(listed)]
            self._closed_s = {s.name: self._closed_s[s.name] for s in segments if s.name in self._closed_s}
            self._checkpoints = [(path.name, vclock) for path, vclock in engine.checkpoints() if start <= vclock]
            actions = node.driver.gc_collect(now_s, segments, checkpoints=[v for _, v in self._checkpoints],
                                             peers=frozenset(peers))
            for tagged in actions:
                assert isinstance(tagged, GcAction)
                removed = wal.remove_oldest(tagged.action.names)
                self.removed_segments += len(removed)
                node.log.info("wal_gc", removed=[p.name for p in removed], log_start=engine.log_start().to_dict(),
                              kept=len(wal.segments()))
            purging = () if disk_full else node.driver.purge_pass(trio.current_time(), frozenset(self._peers()))
        for tagged in purging:
            assert isinstance(tagged, PurgeAction)
            await self._purge(tagged.action)
        return node.driver.gc_kept

    async def _purge(self, action: purge.Action) -> None:
        node = self._node
        if isinstance(action, purge.PurgeUnder):
            done = await node.writer.purge_tombstones(action.bound)
            self.purged_tombstones += done.tombstones
            self._purged_under = dict(action.bound)
            (node.log.info if done.tombstones else node.log.debug)(
                "tombstones_purged", under=action.bound, tombstones=done.tombstones)
        elif isinstance(action, purge.RemovalSettled):
            put_removed(node.quorum.meta, action.member, action.last_lsn)
            node.log.info("removed_origin_settled", member=action.member, last_lsn=action.last_lsn)
        else:
            self.purge_stopped = action.reason
            node.log.error("tombstone_purge_stopped", reason=action.reason)

    def info_call(self) -> dict[str, Any]:
        """`box.info.gc()`, as Tarantool 2.6 answers it: the vclock the log starts at, the
        kept checkpoints, and one consumer per registered peer (`replica UUID`) at the vclock
        it acknowledged (none yet for a peer the GC meets at its next pass: it keeps every row
        for it). A checkpoint has no references: a JOIN keeps the file it streams
        open, which keeps it readable whatever the next checkpoint removes."""
        node = self._node
        start = node.engine.log_start()
        acked = node.driver.gc.peers
        return {
            "vclock": start.to_dict(),
            "signature": start.signature,
            "checkpoint_is_in_progress": node.writer.checkpointing,
            "checkpoints": [{"references": [], "vclock": vclock.to_dict(), "signature": vclock.signature}
                            for _, vclock in node.engine.checkpoints()],
            "consumers": [{"name": f"replica {uuid}", "vclock": dict(vclock), "signature": sum(vclock.values())}
                          for peer, uuid in sorted(self._peers().items()) for vclock in [acked.get(peer, {})]],
        }

    def info(self) -> dict[str, Any]:
        """`box.info.gc`: the consumers, the segments kept and why, as of the last pass (the
        checkpoints are not opened again for every `box.info`)."""
        node = self._node
        engine = node.engine
        segments = engine.wal.segments()
        kept = node.driver.gc_kept
        return {
            "consumers": [
                *({"name": f"replica {peer}", "vclock": acked} for peer, acked in sorted(node.driver.gc.peers.items())),
                *({"name": f"checkpoint {name}", "vclock": vclock.to_dict()} for name, vclock in self._checkpoints),
                {"name": "database", "vclock": engine.vclock.to_dict()},
            ],
            "segments": len(segments),
            "log_start": engine.log_start().to_dict(),
            "kept_because": None if kept is None else (
                f"{kept.keeper.value} {kept.peer}" if kept.peer is not None else kept.keeper.value),
            "removed_segments": self.removed_segments,
            "min_retention_s": node.driver.gc.min_retention_s,
            "max_retention_s": node.driver.gc.max_retention_s,
            "tombstones": {
                "purged": self.purged_tombstones,
                "purged_under": self._purged_under,
                "waiting_for": dict(epoch.wait_for) if (epoch := node.driver.purge.horizon.epoch) else {},
                "leaving": sorted(node.driver.purge.leaving),
                "stopped": self.purge_stopped,
            },
        }
