"""The node's membership duties, driven without a server socket (docs/design/README.md §4.7)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from replicaset.config import load
from replicaset.testing.processes import free_port
from replicaset.identity import Identity
from replicaset.iproto.codec import Frame, FrameDecoder, encode_error, encode_greeting, encode_ok
from replicaset.iproto.constants import ErrorCode, Key, RequestType
from replicaset.core.hlc import unpack_stamp
from replicaset.core.replicaset import BOOTSTRAP_ID, MEMBERS_MAX, PendingRegistration
from replicaset.core.replication import SILENCE_TIMEOUTS
from replicaset.runtime.applier import Upstream
from replicaset.runtime.node import CLUSTER_DDL, Node
from replicaset.runtime.applier import run_applier
from replicaset.runtime.errors import RequestError
from replicaset.runtime.writer import Writer
from replicaset.runtime.environment import Environment
from replicaset.testing.pagecache import PageCache
from wal import GroupCommitPolicy

JOINER = str(uuid.uuid4())
REPLICATION_TIMEOUT_S = 30.0  # as in production: its timeouts and backoffs pass in virtual time only
WAIT_S = 600.0  # virtual seconds
# The fake members talk over 127.0.0.1: the clock jumps once the loop sat idle this long in
# real time, not at once, so that bytes still in the kernel are not taken for silence.
SOCKET_AUTOJUMP_S = 0.01


class FixedClock:
    """A wall clock that reads what the test set."""

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def now_ns(self) -> int:
        return self.ns


def make_node(data_dir: Path, instance_id: int = BOOTSTRAP_ID, clock: FixedClock | None = None,
              **overrides: object) -> Node:
    identity = Identity(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()), instance_id=instance_id)
    return Node(config=load(overrides={"wal_mode": "write", **overrides}), identity=identity, data_dir=data_dir,
                **({"env": Environment(clock=clock)} if clock is not None else {}))


@asynccontextmanager
async def opened(node: Node) -> AsyncIterator[Node]:
    """The node's engine and writer, with its flusher, as `Node.run` starts them, but no
    sockets: `_cluster` made (on the bootstrap member) or its address updated, as at a start."""
    node.engine = node.open_engine()
    node.driver = node.open_member()
    node.writer = Writer(node.engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False,
                         on_flush=node._on_flush, on_synced=node._on_synced)
    try:
        async with trio.open_nursery() as nursery:
            node._nursery = nursery  # where the quorum host spawns its tasks
            nursery.start_soon(node.writer.run_flusher)
            await node._bootstrap_cluster()
            yield node
            nursery.cancel_scope.cancel()
    finally:
        node.engine.close()
        node.quorum.close()


async def serve_fake_member(nursery: trio.Nursery, handler: Callable[[trio.SocketStream], Awaitable[None]]) -> str:
    """A member played by `handler`, one call per connection; its address."""
    listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    return f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"


async def next_request(stream: trio.SocketStream, decoder: FrameDecoder) -> Frame | None:
    """The next frame a fake member receives, or None once the other end hung up."""
    while (frame := decoder.next_frame()) is None:
        try:
            data = await stream.receive_some(4096)
        except trio.BrokenResourceError:
            return None
        if not data:
            return None
        decoder.feed(data)
    return frame


def test_a_registration_under_wal_mode_write_survives_an_os_crash_of_the_registering_member(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = PageCache(monkeypatch)
    node = make_node(tmp_path)

    async def bootstrap_and_register() -> int:
        async with opened(node):
            return (await node.register(JOINER, "127.0.0.1:3302")).instance_id  # the id the joiner learns

    assert trio.run(bootstrap_and_register) == 2
    cache.os_crash(tmp_path / "wal")  # SQLite kept everything: it is ahead of what survived
    node.engine = node.open_engine()
    try:
        assert [(i, u) for i, u, _ in node.members()] == [(1, node.identity.instance_uuid), (2, JOINER)]
    finally:
        node.engine.close()


def test_a_registration_past_the_member_cap_is_refused_naming_it(tmp_path: Path) -> None:
    async def register_past_the_cap() -> RequestError:
        async with opened(make_node(tmp_path)) as node:
            for instance_id in range(2, MEMBERS_MAX + 1):
                await node.writer.execute_trusted("INSERT INTO _cluster VALUES (?, ?, ?)",
                                                  (instance_id, str(uuid.uuid4()), f"127.0.0.1:{3300 + instance_id}"))
            with pytest.raises(RequestError) as full:
                await node.register(str(uuid.uuid4()), "127.0.0.1:3302")
            return full.value

    full = trio.run(register_past_the_cap)
    assert full.code == ErrorCode.ILLEGAL_PARAMS and f"already has {MEMBERS_MAX} members" in full.message


def test_a_registration_without_a_quorum_is_an_error_reply_naming_who_answered(tmp_path: Path) -> None:
    """Member 2 of a set of two, member 1 unreachable: a registration is a QUORUM
    transaction, 2 of 2 are needed, and the joiner hears why it failed."""
    unreachable = f"127.0.0.1:{free_port()}"  # nothing listens there

    async def register_through_member_2() -> RequestError:
        async with opened(make_node(tmp_path, instance_id=2, replication_connect_quorum=0,
                                    replication_connect_timeout=1.0, **{"replication.synchro_timeout_s": 0.5})) as node:
            await node.writer.execute_trusted(CLUSTER_DDL)
            for instance_id, instance_uuid, address in ((BOOTSTRAP_ID, str(uuid.uuid4()), unreachable),
                                                        (2, node.identity.instance_uuid, "127.0.0.1:3302")):
                await node.writer.execute_trusted("INSERT INTO _cluster VALUES (?, ?, ?)",
                                                  (instance_id, instance_uuid, address))
            with pytest.raises(RequestError) as refused:
                await node.register(JOINER, "127.0.0.1:3303")
            assert [i for i, _, _ in node.members()] == [1, 2], "nothing registered"
        return refused.value

    refused = trio.run(register_through_member_2)
    assert refused.code == ErrorCode.SYNC_QUORUM_TIMEOUT
    assert "1 of 2 members prepared, 2 needed" in refused.message


def test_a_join_is_served_from_the_newest_checkpoint_the_wal_still_continues(tmp_path: Path) -> None:
    """docs/design/README.md §4.4: made on demand only when there is none, or when the log no longer holds
    the rows after it (the joiner could never catch up from it)."""
    node = make_node(tmp_path, wal_max_size=65536)

    async def snapshot_write_and_serve() -> tuple[str, str]:
        async with opened(node):
            made = await node.writer.checkpoint()  # box.snapshot()
            for n in range(100):
                await node.writer.execute_trusted("UPDATE _cluster SET address = ?", (f"127.0.0.1:{4000 + n}/" + "x" * 1000,))
            served, _ = await node.writer.open_newest_checkpoint()
            with served:
                return made, served.name

    made, served = trio.run(snapshot_write_and_serve)
    assert served == made and len(list((tmp_path / "snap").glob("*.snap"))) == 1

    segments = sorted((tmp_path / "wal").glob("*.wal"))
    assert len(segments) > 2, "the log rolled"
    for old in segments[:-1]:
        old.unlink()  # nothing deletes WAL yet (GC comes later): do what GC will do

    async def serve_again() -> str:
        async with opened(node):
            served, _ = await node.writer.open_newest_checkpoint()
            with served:
                return served.name

    assert trio.run(serve_again) != made, "a new checkpoint: the log no longer reaches back to the old one"
    assert len(list((tmp_path / "snap").glob("*.snap"))) == 2


def test_a_member_that_does_not_know_us_yet_is_asked_again(tmp_path: Path) -> None:
    """A joiner subscribes to every member at once; one that has not applied the joiner's
    `_cluster` row yet refuses with UNKNOWN_REPLICA, and soon will have it: that refusal must
    not stop the upstream for good, as a split brain does."""
    subscribes: list[int] = []
    asked_again = trio.Event()

    async def member_without_our_row(stream: trio.SocketStream) -> None:
        await stream.send_all(encode_greeting(version="2.10.0", instance_uuid=str(uuid.uuid4()), salt=os.urandom(32)))
        frame = await next_request(stream, FrameDecoder(1 << 20))
        if frame is None:
            return
        subscribes.append(frame.request_type)
        if len(subscribes) == 2:
            asked_again.set()
        await stream.send_all(encode_error(sync=frame.sync, schema_version=1, code=ErrorCode.UNKNOWN_REPLICA,
                                           message="not registered here: join first"))

    async def follow_it() -> None:
        async with opened(make_node(tmp_path, replication_timeout=REPLICATION_TIMEOUT_S)) as node, trio.open_nursery() as nursery:
            address = await serve_fake_member(nursery, member_without_our_row)
            nursery.start_soon(run_applier, node, Upstream(key=address, address=address, uuid=None))
            with trio.fail_after(WAIT_S):
                await asked_again.wait()
            nursery.cancel_scope.cancel()

    trio.run(follow_it, clock=trio.testing.MockClock(autojump_threshold=SOCKET_AUTOJUMP_S))
    assert subscribes == [RequestType.SUBSCRIBE] * 2


def test_a_silent_upstream_is_left_after_four_timeouts_and_asked_again_after_the_backoff(tmp_path: Path) -> None:
    """Tarantool's applier: an upstream that sends nothing (not even heartbeats) for
    4 * replication_timeout is taken for gone, and the next connect waits for the backoff
    (replication_timeout at the first failure). At 30 s these are minutes of real time."""
    member_uuid = str(uuid.uuid4())
    connected_at: list[float] = []
    subscribed_at: list[float] = []
    hung_up_at: list[float] = []
    reconnected = trio.Event()

    async def silent_member(stream: trio.SocketStream) -> None:
        connected_at.append(trio.current_time())
        if len(connected_at) == 2:
            reconnected.set()
        await stream.send_all(encode_greeting(version="2.10.0", instance_uuid=member_uuid, salt=os.urandom(32)))
        decoder = FrameDecoder(1 << 20)
        frame = await next_request(stream, decoder)
        assert frame is not None and frame.request_type == RequestType.SUBSCRIBE
        await stream.send_all(encode_ok(sync=frame.sync, schema_version=1, body={Key.INSTANCE_UUID: member_uuid, Key.VCLOCK: {}}))
        subscribed_at.append(trio.current_time())
        assert await next_request(stream, decoder) is None, "no row, no heartbeat: nothing for the applier to acknowledge"
        hung_up_at.append(trio.current_time())

    async def follow_it() -> str | None:
        async with opened(make_node(tmp_path, replication_timeout=REPLICATION_TIMEOUT_S)) as node, trio.open_nursery() as nursery:
            address = await serve_fake_member(nursery, silent_member)
            nursery.start_soon(run_applier, node, Upstream(key=address, address=address, uuid=None))
            with trio.fail_after(WAIT_S):
                await reconnected.wait()
            nursery.cancel_scope.cancel()
            return node.driver.appliers[address].message

    reason = trio.run(follow_it, clock=trio.testing.MockClock(autojump_threshold=SOCKET_AUTOJUMP_S))
    assert reason is not None and reason.startswith("no message from"), reason
    silence_s = hung_up_at[0] - subscribed_at[0]
    assert SILENCE_TIMEOUTS * REPLICATION_TIMEOUT_S < silence_s <= (SILENCE_TIMEOUTS + 1) * REPLICATION_TIMEOUT_S, silence_s
    backoff_s = connected_at[1] - hung_up_at[0]
    assert REPLICATION_TIMEOUT_S <= backoff_s <= 2 * REPLICATION_TIMEOUT_S, backoff_s


def test_a_failing_read_of_the_members_propagates_and_keeps_a_pending_registration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty member list would make a majority of one and clear the registration the
    joiner still waits for (docs/design/README.md §4.7): the error must reach the caller instead. The
    members are read again after a commit (`Node.members` keeps them until one), so the
    failing read is one that follows a change of `_cluster`."""
    from replicaset.identity import PENDING_REGISTRATION_FILE, save_pending_registration
    from replicaset.storage import SqlError

    save_pending_registration(tmp_path, PendingRegistration(origin=1, lsn=1, barrier={}))  # a row we hold: only the majority decides
    node = make_node(tmp_path)

    async def check() -> None:
        async with opened(node):
            assert len(node.members()) == 1
            await node.writer.execute_trusted("UPDATE _cluster SET address = ?", ("127.0.0.1:4001",))

            def broken(sql: str, binds: object = ()) -> None:
                raise SqlError("disk I/O error")

            monkeypatch.setattr(node.engine, "query", broken)
            with pytest.raises(SqlError, match="disk I/O error"):
                node.on_upstream_change()

    trio.run(check)
    assert (tmp_path / PENDING_REGISTRATION_FILE).exists()


def test_a_member_with_a_skewed_clock_stamps_its_writes_that_far_ahead(tmp_path: Path) -> None:
    """`[debug] clock_skew_ms` (the fault harness's clock skew): the HLC of the member reads
    a wall clock an hour ahead, so the bootstrap's own `_cluster` row carries a stamp an
    hour ahead of the true time."""
    skew_ms = 3_600_000
    now_ms = 1_800_000_000_000  # 2027-01-15
    node = make_node(tmp_path / "data", clock=FixedClock(now_ms * 1_000_000), **{"debug.clock_skew_ms": skew_ms})

    async def main() -> None:
        async with opened(node):
            [(hlc, _origin, *_)] = node.engine.stored_versions([("_cluster", "_cluster:1")]).values()
            assert unpack_stamp(hlc)[0] == now_ms + skew_ms, "the wall clock the node was given, skewed"

    trio.run(main)


def test_a_quorum_write_served_while_the_member_starts_leaves_it_running(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The port accepts clients before the member has finished starting, and a QUORUM
    write may be served meanwhile. The coordinator's transactions of the last run are
    rebuilt before anyone is served: rebuilt after, the rebuild met that write's record,
    refused it as "known already", and the member stopped (one start in four, loaded)."""
    from replicaset.iproto.client import Client
    from replicaset.runtime.server import serve

    (tmp_path / "data").mkdir()
    node = make_node(tmp_path / "data", listen="127.0.0.1:0")
    bootstrap = node._bootstrap_cluster
    answered: list[str] = []

    def write() -> None:
        host, port = node.listen_address.rsplit(":", 1)
        with Client.connect(host, int(port)) as client:
            client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")  # QUORUM, the built-in level
            answered.append("CREATE TABLE")

    async def bootstrap_after_a_write() -> None:
        await trio.to_thread.run_sync(write)
        await bootstrap()

    monkeypatch.setattr(node, "_bootstrap_cluster", bootstrap_after_a_write)

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                await nursery.start(serve, node)
                await trio.sleep(0.5)  # the member's tasks run a while, its quorum host among them
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert answered == ["CREATE TABLE"]


def test_the_members_are_read_again_after_a_change_of_cluster_only(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Every peer request checks its sender against the members: they are kept until a
    commit that may have changed `_cluster`, and a change is seen at the next call."""
    node = make_node(tmp_path)

    async def check() -> None:
        async with opened(node):
            await node.writer.execute_trusted("CREATE TABLE t(id INTEGER PRIMARY KEY)")
            assert [i for i, _, _ in node.members()] == [BOOTSTRAP_ID]
            queries: list[str] = []
            query = node.engine.query
            monkeypatch.setattr(node.engine, "query", lambda sql, binds=(): queries.append(sql) or query(sql, binds))
            for n in range(3):
                await node.writer.execute("INSERT INTO t VALUES (?)", [n])
                node.members()
            assert queries == [], "rows of other tables leave the members as they were"
            await node.writer.execute_trusted("UPDATE _cluster SET address = ?", ("127.0.0.1:4001",))
            assert [a for _, _, a in node.members()] == ["127.0.0.1:4001"]
            assert queries, "a change of _cluster is read"

    trio.run(check)
