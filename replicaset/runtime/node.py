"""The node: one instance's engine, writer, iproto server and timers under one nursery."""

from __future__ import annotations

import itertools
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from replicaset import __version__, access, console
from replicaset.config import Config
from replicaset.core.anti_entropy import AntiEntropy, Repair
from replicaset.core.purge import TombstonePurge
from replicaset.core.quorum import CLUSTER_TABLE
from replicaset.core.replicaset import (
    BOOTSTRAP_ID,
    MembersFull,
    QuorumReached,
    RecoveryDone,
    RecoveryGaveUp,
    RegistrationHeld,
    Rejoin,
    RejoinNeeded,
    RejoinRefused,
    Removal,
    Removed,
    PendingRegistration,
    ReplicaSet,
    allocate_id,
    must_recover,
)
from replicaset.identity import Identity, JoinUpstream, clear_pending_registration, load_pending_registration
from replicaset.iproto.system_views import Space, SystemView, build_system_views
from replicaset.member import Action, MemberDriver, Membership, SetAction
from replicaset.meta.removed import put_removal, removal as removal_record
from replicaset.runtime import removal as removals, repairs
from replicaset.runtime.anti_entropy import AntiEntropyHost
from replicaset.runtime.logging import event_sink, get_logger
from replicaset.runtime.applier import Upstream, run_applier
from replicaset.runtime.checkpoint_daemon import CheckpointDaemon
from replicaset.runtime.clock import now_ms
from replicaset.runtime.disk import DiskGuard
from replicaset.runtime.environment import MACHINE, Environment
from replicaset.runtime.errors import RequestError
from replicaset.runtime.quorum import QuorumHost
from replicaset.runtime.relay import Relays
from replicaset.runtime.spaces import describe_spaces
from replicaset.runtime.peer_access import PeerCredentials, load_secret, warn_if_exposed
from replicaset.runtime import tls
from replicaset.runtime.swim import SwimHost
from replicaset.runtime.trace_file import TraceFile
from replicaset.runtime.transfer import Registration
from replicaset.runtime.wal_gc import WalGcHost, wal_gc
from replicaset.runtime.writer import Writer
from replicaset.storage import Engine, EngineConfig, SqlError
from replicaset.iproto.constants import ErrorCode
from wal import GroupCommitPolicy, RecordType, WalError, WalMode

CLEAN_STOP_FILE = "clean_stop"
CLUSTER_DDL = "CREATE TABLE _cluster(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, address TEXT NOT NULL)"
REJOIN_CHECK_S = 0.02  # a member waiting to re-join looks again: its timeout runs on the clock
REGISTER_RETRY_S = 0.1  # after a conflicting registration: its row is on its way
# A conflict (another registration won, or members see different memberships for now) and
# a member not taking writes yet pass; a registration tries again until the join's deadline.
RETRIED_REGISTRATION = frozenset({ErrorCode.TRANSACTION_CONFLICT, ErrorCode.READONLY})


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


class ListenFailed(Exception):
    """The listen address cannot be bound (in use, not this host's): the member cannot
    serve, and says so in one line rather than a traceback."""


class AddressMismatch(Exception):
    """The member was started at another address than its `_cluster` row names: its peers
    dial it there (and SWIM answers there), so it would see them all dead and stay
    `loading` while they see it dead. The message says where to start it, and how a
    member moves, where it can."""

    def __init__(self, message: str, *, registered: str, listen: str) -> None:
        super().__init__(message)
        self.registered = registered
        self.listen = listen


@dataclass(frozen=True)
class Listening:
    host: str
    port: int


class Node:
    version = __version__
    shutdown_grace_s = 5.0

    def __init__(
        self, *, config: Config, identity: Identity, data_dir: Path, force_recovery: bool = False, rejoin: bool = False,
        isolated: bool = False, move: bool = False, env: Environment = MACHINE,
    ) -> None:
        self.config = config
        self.env = env  # the network, worker threads, the date and chance (runtime/environment.py)
        self.clock = env.clock  # the date; durations are trio's clock
        # `serve --move`: a member alone in its set may start at a new address, which its
        # `_cluster` row then takes (`_check_registered_address`).
        self.move = move
        self._members: tuple[tuple[Engine, int], list[tuple[int, str, str]]] | None = None  # `members()`, and when read
        # A restored copy (docs/restore.md): it follows no one, whatever `_cluster` and the config list.
        self.isolated = isolated
        self.identity = identity
        self.data_dir = data_dir
        self.force_recovery = force_recovery
        # The UUID each upstream (by Upstream.key: a member's UUID, or a configured address)
        # answered SUBSCRIBE with.
        self.upstream_uuids: dict[str, str] = {}
        # Configured addresses found to be this instance, or a member followed by its UUID.
        self.ignored_addresses: set[str] = set()
        self.relays = Relays()
        self.relay_ids = itertools.count(1)  # the driver's keys of the relays, one per subscribed connection
        self.allow_rejoin = rejoin or config["replication.auto_rejoin"]
        self.rejoin_through: str | None = None
        self.driver: MemberDriver  # once the engine is open (`open_member`)
        self._register_lock = trio.Lock()
        self.log = get_logger(identity.instance_id)
        self.disk = DiskGuard(data_dir, self.log)  # opened (its reserve made) by `run`
        self.started_s: float | None = None  # trio's clock, once running
        self.schema_version = 1
        self.vclock_advanced = trio.Event()  # set, and replaced, at every flush that advanced the vclock
        self._system_views: dict[SystemView, list[list[Any]]] | None = None
        self.listen_address = config.listen
        self.trace_file: TraceFile | None = None
        self.swim: SwimHost | None = None  # once listening, unless isolated
        self._registered: dict[str, int] = {}  # `_cluster` as last seen: uuid -> id, to notice removals
        self.removed = False  # this member's own row is gone: it takes no writes
        self.killed = False  # stopped as kill -9 stops a process (`kill`)
        self.removal: Removal | None = None  # who removed this member, once it learned it: it stops
        self.links_open: dict[str, trio.Event] = {}  # upstream key -> set when its applier's link closes
        self.join_upstreams = JoinUpstream.load_all(data_dir)  # each followed until `_cluster` names it
        self.anonymous_followers: dict[int, str] = {}  # relay connection -> the follower's uuid
        # Users and guest's rights, read once (docs/access-control.md); passwords only hashed.
        self.users = access.parse_users(config["auth.users"])
        self.guest = access.guest_rights(self.users, config["auth.guest"])
        self._views_by_user: dict[str, dict[SystemView, list[list[Any]]]] = {}
        self.cluster_secret = load_secret(config)
        self.server_tls = tls.server_context(config)
        self.peer_credentials = PeerCredentials(instance_uuid=identity.instance_uuid, secret=self.cluster_secret,
                                                tls=tls.client_context(config))

    def check_replicaset(self, replicaset_uuid: str) -> None:
        """A peer's request is refused unless it is for our replica set."""
        ours = self.identity.replicaset_uuid
        if replicaset_uuid != ours:
            message = f"Replica set UUID mismatch: expected {ours}, got {replicaset_uuid}"
            self.log.warning("peer_refused", error=message)
            raise RequestError(ErrorCode.REPLICASET_UUID_MISMATCH, message)

    def check_writable(self) -> None:
        if self.config.read_only:
            raise RequestError(ErrorCode.READONLY, "Can't modify data on a read-only instance - box.cfg.read_only is true")
        if self.removed:
            raise RequestError(ErrorCode.READONLY, "Can't modify data: this instance was removed from the replica set")
        if self.driver.running:
            return
        self.on_upstream_change()
        now = trio.current_time()
        why = self.driver.write_refusal(now)
        if why is not None:
            status = self.driver.status(now).value
            raise RequestError(ErrorCode.READONLY, f"Can't modify data on an instance in status {status}: {why}")

    # ---------------------------------------------------------------- lifecycle

    def open_engine(self) -> Engine:
        cfg = self.config
        return Engine.open(
            EngineConfig(
                data_dir=self.data_dir,
                instance_id=self.identity.instance_id,
                wal_mode=WalMode(cfg.wal_mode),
                wal_max_size_bytes=cfg.wal_max_size,
                max_txn_bytes=cfg.max_txn_bytes,
                local_tables=frozenset(cfg.local_tables),
                auto_id_mode=cfg["sql.auto_id_mode"],
                checkpoint_count=cfg.checkpoint_count,
                ddl_lock=True,
                statement_timeout_s=float(cfg["sql.statement_timeout_s"]),
            ),
            clock_ms=self.clock_ms,
            log=event_sink(self.log),
        )

    def clock_ms(self) -> int:
        """The wall clock the HLC reads, `[debug] clock_skew_ms` off the true one: the fault
        harness skews one member's clock to show that last-writer-wins and the HLC's
        monotony hold when members' clocks disagree."""
        return now_ms(self.clock) + self.config["debug.clock_skew_ms"]

    def open_member(self) -> MemberDriver:
        """The member's driver over the open engine. Its replica-set core waits for `run`
        to know the peers and whether it must recover; until then it takes no write. A
        pending registration waits for a majority to hold our `_cluster` row (docs/design/README.md §4.7).
        The metastore opens with it: the driver's participant is what it recovers."""
        cfg = self.config
        self.quorum = QuorumHost(self)
        return MemberDriver(
            instance_id=self.identity.instance_id,
            store=self.engine,
            replicaset=self._replicaset(recovering=False, connect_deadline_s=0.0,
                                        registration=load_pending_registration(self.data_dir)),
            membership=self.membership,
            **self.replication_settings(),
            check_invariants=cfg["debug.check_invariants"],
            check_store=self._check_engine,
            trace=self._open_trace(),
            participant=self.quorum.participant(),
            wal_gc=wal_gc(cfg),
            # Members stop taking a removed member's rows within a `_cluster` refresh (one
            # replication_timeout) of applying the removal, and acknowledge at heartbeats.
            tombstone_purge=TombstonePurge(settle_s=10 * cfg.replication_timeout),
            repair=AntiEntropy(member=self.identity.instance_id,
                               threshold_rows=cfg["replication.delta_sync_threshold_transactions"],
                               threshold_s=float(cfg["replication.delta_sync_threshold_seconds"]),
                               runs=self._repair_counts()),
        )

    def replication_settings(self) -> dict[str, Any]:
        """The driver's `replication_timeout` and `replication_skip_conflict`, at start and
        at each `box.cfg` change of them; an applier backs off eight timeouts at most (1 s
        at least) between connects."""
        timeout_s = self.config.replication_timeout
        return {"timeout_s": timeout_s, "backoff_max_s": max(timeout_s * 8, 1.0),
                "skip_conflict": self.config.replication_skip_conflict}

    def _repair_counts(self) -> dict[Repair, int]:
        try:
            return repairs.load(self.data_dir)
        except repairs.CountsUnreadable as exc:
            self.log.warning("repair_counts_unreadable", error=str(exc), hint="counting repairs from zero again")
            return {}

    def _open_trace(self) -> TraceFile | None:
        """`[debug] trace_file`, relative to the data directory: where the driver traces."""
        name = self.config["debug.trace_file"]
        if not name or self.trace_file is not None:
            return self.trace_file
        self.trace_file = TraceFile(self.data_dir / name, on_failure=lambda error: self.log.error(
            "trace_file_stopped", path=str(self.data_dir / name), error=str(error)))
        self.log.info("tracing", path=str(self.trace_file.path))
        return self.trace_file

    def _check_engine(self) -> None:
        if not self.writer.in_thread:  # a flush or a checkpoint in a thread is mid-way
            self.engine.check_invariants()

    def _replicaset(self, *, recovering: bool, connect_deadline_s: float,
                    registration: PendingRegistration | None) -> ReplicaSet:
        return ReplicaSet(
            instance_id=self.identity.instance_id,
            configured_quorum=self.config.replication_connect_quorum,
            connect_deadline_s=connect_deadline_s,
            recovering=recovering,
            registration=registration,
            allow_rejoin=self.allow_rejoin,
        )

    async def run(
        self, serve_connection: Callable[[trio.abc.Stream], Awaitable[None]], *,
        observers: Sequence[Callable[..., Awaitable[None]]] = (), task_status: Any = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled; `serve_connection` speaks iproto (over TLS with `[tls]`) on each accepted one.
        Each of `observers` is started with the node (`nursery.start(observer, node)`) before the port
        accepts anyone, so that it sees every request."""
        self.started_s = trio.current_time()
        self.disk.open()
        clean_marker = self.data_dir / CLEAN_STOP_FILE
        unclean = not clean_marker.exists() and (self.data_dir / "db.sqlite").exists()
        clean_marker.unlink(missing_ok=True)
        # A start refused before it serves (the port taken, another address than the one
        # registered) must leave an unclean stop unclean, for the start that serves.
        self._unclean_kept = unclean
        self.engine = self.open_engine()
        self.driver = self.open_member()
        self.wal_gc = WalGcHost(self)
        self.anti_entropy = AntiEntropyHost(self)
        self.checkpoints = CheckpointDaemon(self)
        self.writer = Writer(
            self.engine,
            group_commit=GroupCommitPolicy(
                max_batch_bytes=self.config["wal.group_commit_bytes_max"],
                max_batch_count=self.config["wal.group_commit_rows_max"],
                max_delay_ms=self.config["wal.group_commit_delay_ms"],
            ),
            fsync=self.config.wal_mode == "fsync",
            workers=self.env.workers,
            on_commit=self._on_commit,
            on_flush=self._on_flush,
            on_synced=self._on_synced,
            space_check=self.disk.check,
        )
        host, port = parse_address(self.config.listen)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self.quorum.restart()  # before the port accepts anyone
                for observer in observers:
                    await nursery.start(observer, self)
                try:
                    listeners, sockname = await self.env.network.listen(host, port)
                except OSError as exc:
                    raise ListenFailed(f"cannot listen on {self.config.listen}: {exc.strerror or exc}") from exc
                self.listen_address = f"{sockname[0]}:{sockname[1]}"
                try:  # bound, not yet accepting: a refused start serves no one
                    self._check_registered_address()
                except AddressMismatch:
                    for listener in listeners:
                        await listener.aclose()
                    raise
                await nursery.start(trio.serve_listeners, serve_connection, listeners)
                self._unclean_kept = False
                warn_if_exposed(self.log, sockname[0], self.cluster_secret)
                if not self.isolated and not self.identity.anonymous:  # a follower is in no one's view
                    self.swim = self._start_swim(sockname[0], sockname[1])
                nursery.start_soon(self.writer.run_flusher)
                nursery.start_soon(self.disk.run)
                nursery.start_soon(self.checkpoints.run)
                await self._bootstrap_cluster()
                peers = self.upstreams()
                self.driver.replicaset = self._replicaset(
                    recovering=must_recover(unclean=unclean, wal_mode_write=self.config.wal_mode == "write",
                                            has_peers=bool(peers), force_recovery=self.force_recovery),
                    connect_deadline_s=trio.current_time() + self.config.replication_connect_timeout,
                    registration=self.driver.replicaset.registration,
                )
                if self.driver.recovering:
                    self.log.warning("recovering_own_rows", peers=sorted(u.address for u in peers.values()))
                for key in sorted(peers):
                    self._start_applier(peers[key])
                self.on_upstream_change()  # with no peer to wait for, the quorum is met now
                nursery.start_soon(self._watch_members)
                nursery.start_soon(self.quorum.run)
                self.wal_gc.restore()
                nursery.start_soon(self.wal_gc.run)
                if self.swim is not None:
                    nursery.start_soon(self.swim.run)
                nursery.start_soon(self.anti_entropy.run)
                self.log.info(
                    "listening", listen=self.listen_address, vclock=self.engine.vclock.to_dict(),
                    replicaset_uuid=self.identity.replicaset_uuid, instance_uuid=self.identity.instance_uuid,
                )
                task_status.started(Listening(sockname[0], sockname[1]))
        finally:
            with trio.CancelScope(shield=True):
                await self._close()

    def _start_swim(self, host: str, port: int) -> SwimHost | None:
        """SWIM on the UDP port of the listen address; a member whose UDP port is taken
        runs without it (box.info.members empty, removal needs force) and says so."""
        swim = SwimHost(self)
        try:
            swim.bind(host, port)
        except OSError as exc:
            swim.close()
            self.log.error("swim_disabled", error=str(exc), address=f"{host}:{port}")
            return None
        self.driver.swim = swim.core
        return swim

    def kill(self) -> None:
        """Stop at once, as kill -9 stops the process (the simulator's crash): nothing
        pending is flushed and no clean stop is marked; the stores are closed as the
        kernel closes a dead process's files (SQLite's open transaction rolled back), so
        the next start recovers from what reached the files."""
        self.killed = True
        self._nursery.cancel_scope.cancel()

    async def _close(self) -> None:
        if self.writer.fatal is None and not self.killed:
            async with self.writer.token:
                await self.writer._flush_now()
        self.engine.close()
        self.quorum.close()
        if self.swim is not None:
            self.swim.close()
        if self.trace_file is not None:
            self.trace_file.close()
        if self.killed:
            return
        if self.writer.fatal is None and not self._unclean_kept:
            (self.data_dir / CLEAN_STOP_FILE).touch()
        self.log.info("stopped")

    # ---------------------------------------------------------------- membership

    async def _bootstrap_cluster(self) -> None:
        """The first start of a replica set's first member creates `_cluster` with itself."""
        if self.identity.instance_id != BOOTSTRAP_ID or self.members():
            await self._update_own_address()
            return
        async with self.writer.token:
            for sql, binds in (
                (CLUSTER_DDL, ()),
                ("INSERT INTO _cluster(id, uuid, address) VALUES (?, ?, ?)",
                 (BOOTSTRAP_ID, self.identity.instance_uuid, self.listen_address)),
            ):
                txn = self.engine.begin()
                self.engine.execute(txn, sql, binds, trusted=True)
                self.engine.commit(txn)
                await self.writer._flush_now()

    def _check_registered_address(self) -> None:
        """Refuse to serve at another address than the one this member is registered at
        (docs/replication.md, "Addresses"). The row may name the address as configured
        (`localhost:3301`) or as bound (`127.0.0.1:3301`); either is this member. A
        restored copy (served anywhere, its `_cluster` the original set's) and a follower
        (no row) are not checked."""
        if self.isolated or self.identity.anonymous:
            return
        members = self.members()
        registered = next((address for _, uuid, address in members if uuid == self.identity.instance_uuid), None)
        if registered is None or registered in (self.config.listen, self.listen_address):
            return
        alone = len(members) == 1
        if alone and self.move:
            self.log.warning("moving", registered=registered, listen=self.listen_address)
            return
        me = self.identity.instance_id
        if alone:
            how = f"to move it, start it with --listen {self.listen_address} --move"
        else:
            how = ("a member of a set with other members cannot move in place: they dial the address in _cluster and "
                   f"would not learn a new one; to move it, stop it, remove it (box.remove({me}) on another member) "
                   "and join a new member at the new address")
        raise AddressMismatch(f"instance {me} is registered at {registered} (its _cluster row) but was started at "
                              f"{self.listen_address}: start it at {registered} (--listen, or listen in the config); "
                              f"{how}", registered=registered, listen=self.listen_address)

    async def _update_own_address(self) -> None:
        row = [m for m in self.members() if m[1] == self.identity.instance_uuid]
        if row and row[0][2] != self.listen_address and not self.config.read_only:
            await self.writer.execute_trusted("UPDATE _cluster SET address = ? WHERE uuid = ?", (self.listen_address, self.identity.instance_uuid))

    def members(self) -> list[tuple[int, str, str]]:
        """The registered members, `(id, uuid, address)`. Empty only before the bootstrap
        member created `_cluster`; any other failure propagates: an empty answer here would
        make a majority of one (docs/design/style.md §9). Read again only after a commit
        that may have changed `_cluster`: every peer request asks, and two queries each
        cost more than the request."""
        engine = self.engine
        seen = (engine, engine.system_changes)
        if self._members is not None and self._members[0] == seen:
            return list(self._members[1])
        found = engine.query("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = '_cluster'")
        if found is None or not found.rows:
            return []
        listing = engine.query("SELECT id, uuid, address FROM _cluster ORDER BY id")
        assert listing is not None, "a SELECT never writes"
        members = [(int(i), str(u), str(a)) for i, u, a in listing.rows]
        self._members = (seen, members)
        return list(members)

    def member_id(self, uuid: str) -> int | None:
        return next((i for i, u, _ in self.members() if u == uuid), None)

    def upstreams(self) -> dict[str, Upstream]:
        """Every member but us, by UUID, the members our join named until `_cluster` names
        them (`JoinUpstream`), and the configured addresses of no member."""
        if self.isolated:
            return {}
        mine = {self.listen_address, self.config.listen} | self.ignored_addresses
        found = {
            uuid: Upstream(key=uuid, address=address, uuid=uuid)
            for _, uuid, address in self.members()
            if uuid != self.identity.instance_uuid and address
        }
        for joined in self.join_upstreams:
            if joined.uuid not in found and joined.address not in mine:
                found[joined.uuid] = Upstream(key=joined.uuid, address=joined.address, uuid=joined.uuid)
        taken = {u.address for u in found.values()} | mine
        configured = {a: Upstream(key=a, address=a, uuid=None) for a in self.config.replication if a not in taken}
        return found | configured

    def membership(self) -> Membership:
        """The set as this member knows it, for the driver: the registered members, the
        upstreams to follow, and the instance id of each upstream that answered SUBSCRIBE."""
        members = self.members()
        ids = {uuid: i for i, uuid, _ in members}
        return Membership(
            members=len(members),
            upstreams=frozenset(self.upstreams()),
            ids={key: ids[uuid] for key, uuid in self.upstream_uuids.items() if uuid in ids},
        )

    def _start_applier(self, upstream: Upstream) -> None:
        if upstream.key not in self.driver.appliers:
            self._nursery.start_soon(run_applier, self, upstream)

    async def _watch_members(self) -> None:
        """Full mesh: follow every registered member, including those that join later, and
        none that was removed."""
        while True:
            await trio.sleep(self.config.replication_timeout)
            self._notice_removals()
            for upstream in self.upstreams().values():
                self._start_applier(upstream)
            self.on_upstream_change()
            await self._rejoin_if_needed()

    def _notice_removals(self) -> None:
        """Members whose `_cluster` row went (`box.remove`, here or elsewhere): their
        appliers stop for good, SWIM gossips REMOVED, and once nothing of theirs is on its
        way the participant hears it (`_stop_following`); this member, removed, takes no
        more writes (they would fork from the set). Any change of `_cluster` also reaches
        the participant (a joiner is followed from now on), and the members our join named
        are settled (`_settle_join_upstreams`)."""
        current = {uuid: instance_id for instance_id, uuid, _ in self.members()}
        gone = {uuid: instance_id for uuid, instance_id in self._registered.items() if uuid not in current}
        changed, self._registered = current != self._registered, current
        now = trio.current_time()
        if self.join_upstreams:
            self._settle_join_upstreams(current, now)
        if changed:
            self.driver.txn_members(now, self.quorum.view())
        for uuid, instance_id in gone.items():
            removal = self._removal_here(instance_id, uuid)
            if uuid == self.identity.instance_uuid:
                self.removed = True
                if removal is None:  # its tombstone went already: who and when are unknown here
                    self.log.error("removed_from_replicaset", instance_id=instance_id)
                else:
                    self.carry_out(self.driver.own_row_deleted(now, removal))
                continue
            if removal is not None:
                put_removal(self.quorum.meta, removal)
            self.log.warning("member_removed", member=instance_id, uuid=uuid,
                             **(removals.log_fields(removal) if removal is not None else {}))
            if self.swim is not None:
                self.swim.removed(instance_id)
            keys = [k for k in self.driver.appliers if self.upstream_uuids.get(k, k) == uuid]
            for key in keys:
                self.carry_out(self.driver.applier_removed(key, now))
            self._nursery.start_soon(self._stop_following, instance_id, keys)

    def _settle_join_upstreams(self, current: dict[str, int], now: float) -> None:
        """A member our join named is followed as any member once `_cluster` names it; one
        removed before we caught up (its `_cluster` row's tombstone is here, and our
        registration is held, so the tombstone is not an older holder's of a reused id) is
        followed no more."""
        caught_up = self.driver.replicaset.registration is None
        named = [u for u in self.join_upstreams if u.uuid in current]
        removed = [u for u in self.join_upstreams if u not in named and caught_up and u.instance_id
                   and self.engine.tombstone(CLUSTER_TABLE, f"{CLUSTER_TABLE}:{u.instance_id}") is not None]
        for upstream in named:
            self.log.info("join_upstream_registered", uuid=upstream.uuid)
        for upstream in removed:
            self.log.info("join_upstream_removed", uuid=upstream.uuid, member=upstream.instance_id)
            self.carry_out(self.driver.applier_removed(upstream.uuid, now))
        if named or removed:
            self.join_upstreams = [u for u in self.join_upstreams if u not in named and u not in removed]
            JoinUpstream.save_all(self.data_dir, self.join_upstreams)

    def _removal_here(self, instance_id: int, uuid: str) -> Removal | None:
        """The removal of `instance_id` as this member applied it: the row that left its
        `_cluster` row's tombstone."""
        tombstone = self.engine.tombstone(CLUSTER_TABLE, f"{CLUSTER_TABLE}:{instance_id}")
        if tombstone is None:
            return None
        hlc, by, lsn = tombstone
        return Removal(instance_id=instance_id, uuid=uuid, by=by, lsn=lsn, hlc=hlc)

    def removal_of(self, uuid: str) -> Removal | None:
        """The removal of instance `uuid` this member noticed (kept in the metastore), for
        the refusal of its SUBSCRIBE."""
        return removal_record(self.quorum.meta, uuid)

    async def _stop_following(self, member: int, keys: list[str]) -> None:
        """Spec StopFollowing (`specs/QuorumRemoval.tla`): removed `member` is followed no
        more once its appliers' links are closed with every row they took applied, no
        COMMIT of its is on its way to the writer (those arriving now are refused: it is
        not registered), and the removal is durable here (an OS crash that lost it would
        have this member follow `member` again). Only then may this member tell an asker it
        holds no row of `member`'s transactions, and ask about its own."""
        for key in keys:
            closed = self.links_open.get(key)
            if closed is not None:
                await closed.wait()
        await self.quorum.commits_settled(member)
        await self.writer.sync_wal()
        self.driver.txn_stop_following(trio.current_time(), member, view=self.quorum.view())
        self.log.info("member_unfollowed", member=member)

    async def remove_member(self, instance_id: int, options: dict[str, Any] | None = None) -> dict[str, Any]:
        """`box.remove(ID)`: delete the member's `_cluster` row by a QUORUM transaction
        (docs/design/README.md §4.7), shrinking total membership. Refused for this member itself, an id not
        registered, and a member SWIM holds alive unless `{force = true}`: a live member
        removed goes on taking writes that no one takes any more."""
        # The console hands over whatever the expression held: check it before using it.
        if not isinstance(instance_id, int) or isinstance(instance_id, bool):
            raise console.ConsoleError(f"box.remove takes an instance id, got {instance_id!r:.40}")
        if options is not None and not isinstance(options, dict):
            raise console.ConsoleError(f"box.remove's options must be a table like {{force = true}}, got {options!r:.40}")
        force = bool((options or {}).get("force", False))
        members = {i: (u, a) for i, u, a in self.members()}
        if instance_id == self.identity.instance_id:
            raise console.ConsoleError("a member cannot remove itself: remove it through another member")
        if instance_id not in members:
            raise console.ConsoleError(f"instance {instance_id} is not registered in this replica set")
        state = self.driver.swim.state_of(instance_id) if self.driver.swim is not None else None
        if not force and (state is None or state.value in ("alive", "joining", "suspect")):
            raise console.ConsoleError(f"instance {instance_id} is {state.value if state else 'not known to be dead'}: "
                               "stop it first, or box.remove(ID, {force = true})")
        self.check_writable()
        try:
            _, captured = await self.writer.capture("DELETE FROM _cluster WHERE id = ?", (instance_id,), trusted=True)
        except SqlError as exc:
            raise RequestError(ErrorCode.SQL_EXECUTE, f"removing instance {instance_id} failed: {exc}") from exc
        row, _ = await self.quorum.commit_change(captured, self.config["replication.synchro_timeout_s"])
        uuid, address = members[instance_id]
        self.log.warning("member_removal_committed", member=instance_id, uuid=uuid, address=address, row=list(row),
                         forced=force, swim_state=state.value if state else None)
        self._notice_removals()
        return {"removed": instance_id, "uuid": uuid, "members": len(members) - 1}

    async def _rejoin_if_needed(self) -> None:
        """No member has the rows we lack (their logs start later): only a new checkpoint
        can bring us back. Our own rows beyond it must first be held by the member we
        re-join through (docs/design/README.md §4.4), or they would be thrown away."""
        while True:
            actions = self.driver.check_rejoin(trio.current_time(), rejoin_timeout_s=self.config.replication_connect_timeout)
            for action in _set_actions(actions):
                if isinstance(action, RejoinNeeded):
                    self.log.error("rejoin_needed", reason=action.reason,
                                   hint="restart with `replicaset serve --rejoin` or set [replication] auto_rejoin = true")
                    self.rejoin_through = ""
                elif isinstance(action, Rejoin):
                    through = {i: a for i, _, a in self.members()}[action.through]
                    self.anti_entropy.keep_counts()
                    self.log.warning("rejoin", through=through, own_lsn=action.own_lsn)
                    self.rejoin(through)
                elif isinstance(action, RejoinRefused):
                    self.log.error("rejoin_refused", reason=action.reason)
                    self.rejoin_through = ""
            if not self.driver.rejoin_waiting:
                return
            await trio.sleep(REJOIN_CHECK_S)

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """A task of the member's own, stopped with it."""
        self._nursery.start_soon(fn, *args)

    def rejoin(self, through: str) -> None:
        """Stop, to join again through the member at `through` (the command line does it)."""
        self.rejoin_through = through
        self._nursery.cancel_scope.cancel()

    async def register(self, uuid: str, address: str) -> Registration:
        """`uuid`'s id (its old one if it has one), registered by this member, any member,
        with a QUORUM transaction writing its `_cluster` row (`specs/MembershipQuorum.tla`):
        two registrations from one view take the same smallest free id, so they conflict
        on its row and one wins; the loser tries again once the winner's row is here, until
        `replication_connect_timeout`; so does a member that takes no writes yet (a joiner
        itself, until a majority holds its row). The quorum commit returns once a majority
        holds the row durably, whatever `wal_mode` says (rule 3, F5). Every failure is a
        RequestError, so that the joiner gets an error reply, not a dropped connection."""
        deadline = trio.current_time() + self.config.replication_connect_timeout
        async with self._register_lock:
            while True:
                members = self.members()
                existing = next((i for i, u, _ in members if u == uuid), None)
                if existing is not None:
                    return await self._held_registration(existing)
                try:
                    instance_id, _ = allocate_id(((i, u) for i, u, _ in members), uuid,
                                                 retired=(o for o, lsn in self.engine.vclock.items() if o and lsn))
                except MembersFull as exc:
                    raise RequestError(ErrorCode.ILLEGAL_PARAMS, str(exc)) from exc
                try:
                    return await self._register_new(instance_id, uuid, address, deadline)
                except RequestError as exc:
                    if exc.code not in RETRIED_REGISTRATION or trio.current_time() >= deadline:
                        raise
                    self.log.info("registration_retries", joiner_uuid=uuid, joiner_id=instance_id, reason=str(exc))
                await trio.sleep(REGISTER_RETRY_S)

    async def _register_new(self, instance_id: int, uuid: str, address: str, deadline: float) -> Registration:
        self.check_writable()
        try:
            _, captured = await self.writer.capture("INSERT INTO _cluster(id, uuid, address) VALUES (?, ?, ?)",
                                                    (instance_id, uuid, address), trusted=True)
        except SqlError as exc:
            raise RequestError(ErrorCode.SQL_EXECUTE, f"registering instance {uuid} failed: {exc}") from exc
        (origin, lsn), barrier = await self.quorum.commit_change(captured, max(deadline - trio.current_time(),
                                                                              REGISTER_RETRY_S))
        registration = Registration(instance_id=instance_id,
                                    pending=PendingRegistration(origin=origin, lsn=lsn, barrier=barrier))
        self.log.info("member_registered", joiner_id=instance_id, joiner_uuid=uuid, address=address,
                      row=[origin, lsn], barrier=barrier)
        return registration

    async def _held_registration(self, instance_id: int) -> Registration:
        """An instance registered already (a re-join, or a registration retried): its row
        is here, so our vclock of the origin that wrote it last reaches it. It may be
        applied here and not durable yet: we sync before the id leaves (F5)."""
        try:
            await self.writer.sync_wal()
        except WalError as exc:
            raise RequestError(ErrorCode.WAL_IO, f"registering instance {instance_id} failed: {exc}") from exc
        version = self.engine.stored_versions([(CLUSTER_TABLE, f"{CLUSTER_TABLE}:{instance_id}")])
        origin = next(iter(version.values()))[1] if version else self.identity.instance_id
        return Registration(instance_id=instance_id,
                            pending=PendingRegistration(origin=origin, lsn=self.engine.vclock.get(origin), barrier={}))

    async def wait_for_member(self, uuid: str) -> None:
        """Until the `_cluster` row of `uuid` is applied here, so that what we serve holds it."""
        with trio.move_on_after(self.config.replication_connect_timeout):
            while self.member_id(uuid) is None:
                await self.vclock_advanced.wait()
            return
        raise RequestError(ErrorCode.TIMEOUT, f"the _cluster row of instance {uuid} did not arrive here within "
                                              f"replication_connect_timeout = {self.config.replication_connect_timeout} s")

    # ---------------------------------------------------------------- status

    def on_upstream_change(self) -> None:
        """Membership or upstreams may have changed: the driver's replica-set core looks again."""
        self.carry_out(self.driver.members_changed(trio.current_time()))

    def carry_out(self, actions: Sequence[Action]) -> None:
        """The replica-set core's actions: logged, and a registration held forgotten on disk.
        An applier's or a relay's are their task's to carry out."""
        for action in _set_actions(actions):
            if isinstance(action, RecoveryDone):
                self.log.info("recovery_done", vclock=self.engine.vclock.to_dict(), not_answered=list(action.not_answered))
            elif isinstance(action, QuorumReached):
                self.log.info("connect_quorum_reached", quorum=action.quorum)
            elif isinstance(action, RegistrationHeld):
                clear_pending_registration(self.data_dir)
                self.log.info("registration_held", holders=list(action.holders), members=action.members)
            elif isinstance(action, RecoveryGaveUp):
                self.log.info("recovery_gave_up", upstream=action.upstream)
            elif isinstance(action, Removed):
                self._stop_removed(action)

    def _stop_removed(self, removed: Removed) -> None:
        """This member is removed from the set: one line, then the process stops with its
        own exit code (`cli.EXIT_REMOVED`); a restart would only be refused again."""
        self.removal, self.removed = removed.removal, True
        upstream = self.upstreams().get(removed.told_by) if removed.told_by is not None else None
        self.log.error("removed_from_replicaset", **removals.log_fields(removed.removal),
                       learned_from=upstream.address if upstream is not None else removed.told_by,
                       hint="this data directory cannot serve again: join as a new instance with an empty one")
        self._nursery.cancel_scope.cancel()

    def status(self) -> str:
        self.on_upstream_change()
        return self.driver.status(trio.current_time()).value

    def _on_commit(self, records: Sequence[Any]) -> None:
        if self.driver.tracing:
            self.driver.committed(trio.current_time(), records)

    def _on_flush(self, records: list[Any]) -> None:
        if any(r.type == RecordType.DDL for r in records):
            self.schema_version += 1
            self._system_views = None
            self._views_by_user = {}
        if self.driver.tracing:
            self.driver.wal_flushed(trio.current_time())
        self.quorum.rows_flushed()
        self.relays.on_flush(records)
        self.vclock_advanced.set()
        self.vclock_advanced = trio.Event()

    def _on_synced(self, advanced: bool) -> None:
        self.driver.wal_synced(trio.current_time(), advanced=advanced)
        self.quorum.synced()
        self.relays.on_synced()

    # ---------------------------------------------------------------- views

    def system_views(self) -> dict[SystemView, list[list[Any]]]:
        """The system views' rows, listing the SQL tables as spaces. Built once per schema
        version: connectors read them at every connect and after every schema change."""
        if self._system_views is None:
            self._system_views = build_system_views(self._sql_spaces())
        return self._system_views

    def system_views_for(self, rights: access.Rights) -> dict[SystemView, list[list[Any]]]:
        """The system views as `rights.user` sees them: only the tables it has a privilege
        on, as Tarantool's `_vspace` and `_vindex` show a user (docs/access-control.md)."""
        views = self.system_views()
        if rights.sees_every_table:
            return views
        seen = self._views_by_user.get(rights.user)
        if seen is None:
            ids = {row[0] for row in views[SystemView.VSPACE] if rights.sees(row[2])}
            seen = self._views_by_user[rights.user] = {
                view: [row for row in rows if row[0] in ids] if view is not SystemView.VCOLLATION else rows
                for view, rows in views.items()
            }
        return seen

    def _sql_spaces(self) -> list[Space]:
        """Each table and view as a space (replicaset.runtime.spaces); one it cannot
        describe is listed without a format and logged, never failing the view."""
        def skipped(name: str, error: Exception) -> None:
            self.log.warning("system_view_incomplete", table=name, error=repr(error),
                             schema_version=self.schema_version)

        return describe_spaces(self.engine.connections.reader, local_tables=frozenset(self.config.local_tables),
                               skipped=skipped)

    def info(self) -> dict[str, Any]:
        vclock = self.engine.vclock
        me = self.identity
        return {
            "version": self.version,
            "id": me.instance_id,
            "uuid": me.instance_uuid,
            "cluster": {"uuid": me.replicaset_uuid},
            "lsn": vclock.get(me.instance_id),
            "vclock": vclock.to_dict(),
            "signature": vclock.signature,
            "status": self.status(),
            "ro": bool(self.config.read_only) or self.status() != "running",
            "uptime": int(trio.current_time() - self.started_s) if self.started_s is not None else 0,
            "listen": self.listen_address,
            "pid": os.getpid(),
            "replication": self.replication_info(),
            "replication_anon": self.anonymous_info(),
            "synchro": self.quorum.synchro_info(),
            "gc": self.wal_gc.info(),
            "members": self.swim.info() if self.swim is not None else [],
            "swim": self.swim.stats() if self.swim is not None else None,
            "anti_entropy": self.anti_entropy.info(),
        }

    def replication_info(self) -> dict[int, dict[str, Any]]:
        """`box.info.replication`: every registered member, with our link to it each way."""
        now = trio.current_time()
        vclock = self.engine.vclock
        result: dict[int, dict[str, Any]] = {}
        for instance_id, uuid, address in self.members() or [(self.identity.instance_id, self.identity.instance_uuid, self.listen_address)]:
            entry: dict[str, Any] = {"id": instance_id, "uuid": uuid, "lsn": vclock.get(instance_id)}
            core = self.driver.appliers.get(uuid)
            if core is not None and uuid != self.identity.instance_uuid:
                entry["upstream"] = {
                    "status": core.state.value,
                    "idle": round(now - core.last_heard_s, 3),
                    "peer": core.peer,
                    "lag": round(core.lag_s, 3),
                    **({"message": core.message} if core.message else {}),
                }
            relay = self.driver.downstream(instance_id)
            if relay is not None:
                entry["downstream"] = {
                    "status": relay.state.value,
                    "vclock": relay.acked.to_dict(),
                    "idle": round(now - relay.last_ack_s, 3),
                    "lag": round(max(0.0, relay.last_sent_s - relay.last_ack_s), 3),
                }
            if instance_id != self.identity.instance_id:
                entry["prepare"] = self.quorum.prepare_info(instance_id)
            result[instance_id] = entry
        return result

    def anonymous_info(self) -> dict[str, Any]:
        """`box.info.replication_anon`: the read-only followers this member relays to."""
        now = trio.current_time()
        followers = {}
        for conn, uuid in sorted(self.anonymous_followers.items()):
            relay = self.driver.relays.get(conn)
            if relay is not None:
                followers[uuid] = {"status": relay.state.value, "vclock": relay.acked.to_dict(),
                                   "idle": round(now - relay.last_ack_s, 3)}
        return {"count": len(followers), "followers": followers}


def _set_actions(actions: Sequence[Action]) -> list[Any]:
    return [tagged.action for tagged in actions if isinstance(tagged, SetAction)]
