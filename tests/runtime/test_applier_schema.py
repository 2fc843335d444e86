"""The applier task while rows wait for their schema (docs/design/README.md §4.6), on virtual time: the
wait is the applier core's, the task only looks again until the core lets the rows go."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio
import trio.testing

from replicaset.core.replication import ApplierState
from replicaset.iproto.codec import FrameDecoder, encode_greeting, encode_ok, encode_request
from replicaset.iproto.constants import Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.applier import Upstream, run_applier
from replicaset.runtime.node import Node
from replicaset.runtime.relay import record_bytes
from tests.runtime.test_node import SOCKET_AUTOJUMP_S, WAIT_S, make_node, next_request, opened, serve_fake_member
from tests.sim.test_unique_resolution import Clock, open_engine, write
from wal import Record, VClock

TIMEOUT_S = 0.5


def rows_under_a_schema_of_another_origin(root: Path, node_log: list[Record]) -> tuple[Record, Record]:
    """Member 2's DDL row, and member 3's data row written under it."""
    clock = Clock()
    member2, member3 = open_engine(root, "m2", 2, clock), open_engine(root, "m3", 3, clock)
    try:
        for engine in (member2, member3):
            for record in node_log:
                engine.apply(record)
            engine.flush()
        (ddl,) = write(member2, "CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)")
        member3.apply(ddl)
        member3.flush()
        (data,) = write(member3, "INSERT INTO t VALUES (1, 'x')")
        return ddl, data
    finally:
        member2.close()
        member3.close()


def member_sending(row: Record, upstream_uuid: str, acks: list[dict[int, int]], connections: list[float]):
    async def handler(stream: trio.SocketStream) -> None:
        connections.append(trio.current_time())
        await stream.send_all(encode_greeting(version="2.10.0", instance_uuid=upstream_uuid, salt=os.urandom(32)))
        decoder = FrameDecoder(1 << 20)
        frame = await next_request(stream, decoder)
        assert frame is not None and frame.request_type == RequestType.SUBSCRIBE
        await stream.send_all(encode_ok(sync=frame.sync, schema_version=1,
                                        body={Key.INSTANCE_UUID: upstream_uuid, Key.VCLOCK: {row.origin: row.lsn}}))
        await stream.send_all(encode_request(PeerRequest.ROWS, 0, {PeerKey.RECORDS: [record_bytes(row)]}))
        while (frame := await next_request(stream, decoder)) is not None:
            if frame.request_type == PeerRequest.ACK:
                acks.append(dict(frame.body[Key.VCLOCK]))

    return handler


async def until(condition, step_s: float = 0.05) -> None:
    with trio.fail_after(WAIT_S):
        while not condition():
            await trio.sleep(step_s)


@asynccontextmanager
async def a_row_waiting(
    tmp_path: Path, acks: list[dict[int, int]], connections: list[float]
) -> AsyncIterator[tuple[Node, str, Record]]:
    """A node following a fake member that sent member 3's row written under member 2's
    DDL row, which the node does not hold; entered once the row waits in the applier.
    Yields the node, the upstream's key and that DDL row; the fake member and the applier
    stop at the end of the block."""
    node = make_node(tmp_path / "node", replication_timeout=TIMEOUT_S)
    async with opened(node), trio.open_nursery() as nursery:
        ddl, data = rows_under_a_schema_of_another_origin(tmp_path, list(node.engine.wal.read_from(VClock())))
        address = await serve_fake_member(nursery, member_sending(data, str(uuid.uuid4()), acks, connections))
        nursery.start_soon(run_applier, node, Upstream(key=address, address=address, uuid=None))
        await until(lambda: address in node.driver.appliers and node.driver.appliers[address].waiting is not None)
        yield node, address, ddl
        nursery.cancel_scope.cancel()


def test_a_row_waits_for_its_schema_brought_by_another_path_then_is_applied_and_acknowledged(tmp_path: Path) -> None:
    acks: list[dict[int, int]] = []
    connections: list[float] = []

    async def follow() -> tuple[list[list[object]], VClock]:
        async with a_row_waiting(tmp_path, acks, connections) as (node, _, ddl):
            await trio.sleep(TIMEOUT_S)  # longer than the silence timeout's half: the applier ticks no silence
            await node.writer.apply([ddl])  # as another upstream would
            await until(lambda: any(ack.get(3) == 1 for ack in acks))
            rows = node.engine.query("SELECT * FROM t").rows
            return rows, node.engine.vclock

    rows, vclock = trio.run(follow, clock=trio.testing.MockClock(autojump_threshold=SOCKET_AUTOJUMP_S))
    assert rows == [[1, "x"]] and vclock.get(2) == 1 and vclock.get(3) == 1
    assert len(connections) == 1, "the wait did not cost the link"


def test_a_row_whose_schema_never_comes_breaks_the_link_after_the_silence_timeout(tmp_path: Path) -> None:
    acks: list[dict[int, int]] = []
    connections: list[float] = []

    async def follow() -> tuple[str | None, float, VClock]:
        async with a_row_waiting(tmp_path, acks, connections) as (node, address, _):
            waiting_from = trio.current_time()
            applier = node.driver.appliers[address]
            await until(lambda: applier.state is ApplierState.DISCONNECTED, step_s=0.01)
            message, waited_s = applier.message, trio.current_time() - waiting_from
            await until(lambda: len(connections) == 2)
            return message, waited_s, node.engine.vclock

    message, waited_s, vclock = trio.run(follow, clock=trio.testing.MockClock(autojump_threshold=SOCKET_AUTOJUMP_S))
    assert message is not None and "3:1 waited too long for its schema 2:1" in message, message
    assert 4 * TIMEOUT_S - 0.1 <= waited_s <= 4 * TIMEOUT_S + 0.1, waited_s
    assert vclock.get(3) == 0 and acks == [], "a row that waits is not acknowledged"
