"""A replica set of the server's own members in one trio run, on the simulated world
(`sim_world.py`): bootstrap, join, stop, start again, cut links, and a client.

Each member is what `replicaset bootstrap`, `join` and `serve` build: `Node` served by
`runtime.server.serve`, joined by `runtime.join.join_async`, each in a data directory
under `root`, and each at its own host (`127.0.0.N:3301`) of the simulated network.
"""

from __future__ import annotations

import random
import shutil
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import trio
import trio.testing

from replicaset.config import Config, load
from replicaset.core.replication import ApplierState
from replicaset.identity import Identity
from replicaset.iproto.constants import Key, RequestType
from replicaset.runtime.environment import Environment
from replicaset.runtime.join import join_async, rejoin_async
from replicaset.runtime.links import PeerError, PeerLink
from replicaset.runtime.node import Node
from replicaset.runtime.server import serve
from replicaset.testing.sim_world import InlineWorkers, SimClock, SimNetwork, seed_scheduler

PORT = 3301
CLIENT_HOST = "127.0.1.1"
MAX_FRAME_BYTES = 16 * 1024 * 1024


@dataclass
class SimMember:
    host: str
    data_dir: Path
    identity: Identity
    config: Config
    seed: int
    node: Node | None = None
    scope: trio.CancelScope | None = None
    stopped: trio.Event = field(default_factory=trio.Event)

    @property
    def address(self) -> str:
        return f"{self.host}:{PORT}"

    @property
    def id(self) -> int:
        return self.identity.instance_id


class SimSet:
    def __init__(self, root: Path, seed: int, nursery: trio.Nursery, settings: Mapping[str, Any] = (), *,
                 lose_unsynced: Callable[[Path], None] | None = None) -> None:
        """`lose_unsynced(directory)` takes a directory back to what its fsyncs made durable
        (the page cache of `replicaset/testing/pagecache.py`), for `os_crash`."""
        self.root = root
        self.rng = random.Random(seed)
        self.network = SimNetwork(random.Random(self.rng.random()))
        self.replicaset_uuid = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.members: list[SimMember] = []
        self._nursery = nursery
        self._settings = dict(settings)
        self._clients: dict[str, PeerLink] = {}
        self.stopping = False  # a member is stopping
        self._lose_unsynced = lose_unsynced

    def _member(self, number: int, *, instance_id: int = 0) -> SimMember:
        """The `number`th host's instance, with a new UUID (its id is the join's to give)."""
        host = f"127.0.0.{number}"
        config = load(overrides={"listen": f"{host}:{PORT}", **self._settings})
        identity = Identity(replicaset_uuid=self.replicaset_uuid, instance_id=instance_id,
                            instance_uuid=str(uuid.UUID(int=self.rng.getrandbits(128), version=4)))
        return SimMember(host=host, data_dir=self.root / f"member{number}", identity=identity, config=config,
                         seed=self.rng.getrandbits(32))

    async def three(self, *ddl: str) -> list[SimMember]:
        """A set of three, as an operator brings one up: bootstrap, the `ddl`, two joins,
        and every member following every other."""
        first = await self.bootstrap()
        for sql in ddl:
            await self.execute(first, sql)
        await self.join(first)
        await self.join(first)
        await self.meshed()
        return self.members

    async def bootstrap(self) -> SimMember:
        member = self._member(1, instance_id=1)
        member.data_dir.mkdir(parents=True)
        member.identity.save(member.data_dir)
        self.members.append(member)
        await self.start(member)
        return member

    async def join(self, through: SimMember, *, serve: bool = True) -> SimMember:
        """`replicaset join` through `through`, then (unless not `serve`) served until it runs."""
        member = self._member(len(self.members) + 1)
        await self._join(member, through)
        self.members.append(member)
        if serve:
            await self.start(member)
            await self.running(member)
        return member

    async def replace(self, member: SimMember, through: SimMember) -> SimMember:
        """What an operator does for a member whose disk is gone: kill it, `box.remove` it
        through `through` (forced: it is dead, whatever SWIM has seen yet), wipe its data
        directory and join a new instance at the same address, which takes its place in
        `members`."""
        if not member.stopped.is_set():
            await self.crash(member)
        await self.eval(through, f"box.remove({member.id}, {{force = true}})")
        shutil.rmtree(member.data_dir)
        fresh = self._member(int(member.host.rpartition(".")[2]))
        await self._join(fresh, through)
        self.members[self.members.index(member)] = fresh
        await self.start(fresh)
        await self.running(fresh)
        return fresh

    async def _join(self, member: SimMember, through: SimMember) -> None:
        member.data_dir.mkdir(parents=True)
        identity = await join_async(member.data_dir, replicaset_uuid=self.replicaset_uuid, peers=[through.address],
                                    listen=member.address, network=self.network.at(member.host),
                                    instance_uuid=member.identity.instance_uuid)
        if identity is None:
            raise RuntimeError(f"{member.address} could not join through {through.address}")
        member.identity = identity

    async def running(self, member: SimMember, timeout_s: float = 30.0) -> None:
        """Wait, on the simulated clock, until `member` takes writes (box.info.status running)."""
        assert member.node is not None
        with trio.fail_after(timeout_s):
            while not member.node.driver.running:
                await trio.sleep(0.01)

    def environment(self, member: SimMember) -> Environment:
        return Environment(network=self.network.at(member.host), workers=InlineWorkers(), clock=SimClock(),
                           seed=member.seed)

    async def start(self, member: SimMember) -> None:
        """Serve `member` (again), as `replicaset serve` does, until `stop`."""
        member.node = self._node(member)
        member.stopped = trio.Event()
        await self._nursery.start(self._serve, member)

    def _node(self, member: SimMember) -> Node:
        return Node(config=member.config, identity=member.identity, data_dir=member.data_dir,
                    env=self.environment(member))

    async def _serve(self, member: SimMember, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Serve, and when the node stops to re-join (`Node.rejoin`: too far behind for any
        member's log), re-join through the member it names and serve again, as `replicaset
        serve` does."""
        assert member.node is not None
        try:
            with trio.CancelScope() as member.scope:
                await serve(member.node, task_status=task_status)
                while member.node.rejoin_through:
                    identity = await rejoin_async(member.data_dir, member.config, member.identity,
                                                  member.node.rejoin_through, network=self.network.at(member.host))
                    if identity is None:
                        raise RuntimeError(f"{member.address} could not re-join through {member.node.rejoin_through}")
                    member.identity = identity
                    member.node = self._node(member)
                    await serve(member.node)
        finally:
            member.stopped.set()

    async def stop(self, member: SimMember) -> None:
        """A clean stop (SIGTERM): the node flushes, closes its stores, says `stopped`."""
        await self._end(member, lambda node: member.scope.cancel() if member.scope is not None else None)

    async def crash(self, member: SimMember) -> None:
        """kill -9: nothing pending is flushed, no clean stop is marked (`Node.kill`); the
        next `start` recovers from what reached the files."""
        await self._end(member, Node.kill)

    @property
    def can_os_crash(self) -> bool:
        return self._lose_unsynced is not None

    async def os_crash(self, member: SimMember) -> None:
        """The member's machine loses power: killed, then its WAL back to what was fsynced.
        SQLite and RocksDB sync in C, out of the page cache's sight: they keep what they
        wrote, and the start after finds SQLite ahead of its WAL (docs/design/README.md §4.4)."""
        assert self._lose_unsynced is not None
        await self.crash(member)
        self._lose_unsynced(member.data_dir / "wal")

    async def _end(self, member: SimMember, how: Callable[[Node], None]) -> None:
        """Its links are cut first: trio cancels a scope's tasks in an order of its own (by
        address), which must not decide what the other members see (`stopping` is set
        meanwhile, for a replay check to look away)."""
        assert member.node is not None
        self.stopping = True
        cut = self.network.isolate(member.host)
        how(member.node)
        await member.stopped.wait()
        for other in cut:
            self.network.heal(member.host, other)
        self.stopping = False
        client = self._clients.pop(member.address, None)
        if client is not None:
            await client.aclose()

    async def execute(self, member: SimMember, sql: str, binds: list[Any] | None = None, *,
                      consistency: str | None = None) -> Any:
        """EXECUTE on `member` as a connector sends it; the reply's body (`PeerError` on an error)."""
        body: dict[int, Any] = {Key.SQL_TEXT: sql, Key.SQL_BIND: binds or []}
        if consistency is not None:
            body[Key.OPTIONS] = {"consistency": consistency}
        return await self._request(member, RequestType.EXECUTE, body)

    async def eval(self, member: SimMember, expr: str) -> list[Any]:
        """EVAL of the admin console's language (`box.remove(3)`, `box.info`): its results."""
        return (await self._request(member, RequestType.EVAL, {Key.EXPR: expr, Key.TUPLE: []})).get(Key.DATA, [])

    async def _request(self, member: SimMember, request_type: int, body: dict[int, Any]) -> Any:
        link = self._clients.get(member.address)
        if link is None:
            link = await PeerLink.open(member.address, MAX_FRAME_BYTES, network=self.network.at(CLIENT_HOST))
            self._clients[member.address] = link
        try:
            await link.send(request_type, body)
            return (await link.receive()).body
        except PeerError:  # an error reply, read whole: the link goes on
            raise
        except BaseException:
            if self._clients.get(member.address) is link:
                del self._clients[member.address]
            await link.aclose()
            raise

    async def meshed(self, timeout_s: float = 30.0) -> None:
        """Wait until every running member follows every other (box.info.replication: each
        upstream `follow`), as an operator waits before calling a set ready."""
        with trio.fail_after(timeout_s):
            while not all(self._follows_all(m) for m in self._running()):
                await trio.sleep(0.05)

    def _follows_all(self, member: SimMember) -> bool:
        assert member.node is not None
        node = member.node
        following = {node.upstream_uuids.get(key) for key, applier in node.driver.appliers.items()
                     if applier.state is ApplierState.FOLLOW}
        return following >= {m.identity.instance_uuid for m in self._running() if m is not member}

    def _running(self) -> list[SimMember]:
        return [m for m in self.members if m.node is not None and not m.stopped.is_set()]

    async def rows(self, member: SimMember, sql: str) -> list[list[Any]]:
        return (await self.execute(member, sql)).get(Key.DATA, [])

    def vclock(self, member: SimMember) -> dict[int, int]:
        assert member.node is not None
        return member.node.engine.vclock.to_dict()

    def vclocks(self) -> list[dict[int, int]]:
        return [self.vclock(m) for m in self._running()]

    async def converged(self, timeout_s: float = 30.0) -> list[dict[int, int]]:
        """Wait, on the simulated clock, until every running member holds the same vclock."""
        with trio.fail_after(timeout_s):
            while len({tuple(sorted(v.items())) for v in self.vclocks()}) > 1:
                await trio.sleep(0.05)
        return self.vclocks()


def simulate(root: Path, seed: int, scenario: Callable[[SimSet], Awaitable[Any]], *,
             instruments: Sequence[trio.abc.Instrument] = (), **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    """Run `scenario` on a new set in one trio run on the simulated clock, then stop every
    member; its result and every log line the members wrote (structlog's, captured).
    `stopping` is set from the end of the scenario on: trio cancels the members' tasks in
    an order of its own (by address), which a replay check must not look at."""
    result: list[Any] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            rs = SimSet(root, seed, nursery, **options)
            for instrument in instruments:
                if isinstance(instrument, WorldWatcher):
                    instrument.world = rs
            result.append(await scenario(rs))
            rs.stopping = True
            nursery.cancel_scope.cancel()

    with structlog.testing.capture_logs() as logs:
        seed_scheduler(seed)
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0), instruments=list(instruments))
    return result[0], logs


class WorldWatcher(trio.abc.Instrument):
    """An instrument told which set it watches (`simulate` sets `world`)."""

    world: SimSet | None = None
