"""An applier behind its relay takes every frame one receive brought in one writer turn.

Found by the fault harness on a loaded machine (`tools/chaos.py --seed 4 --faults
remove-rejoin` beside other work): an applier that flushed and acknowledged each ROWS frame
on its own fell further behind with every frame, up to a thousand rows; a registration's
row at the end of that backlog was confirmed only after `replication_connect_timeout`, and
the join failed."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import trio
import trio.testing

from replicaset.iproto.codec import FrameDecoder, encode_greeting, encode_ok, encode_request
from replicaset.iproto.constants import Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.applier import Upstream, run_applier
from replicaset.runtime.relay import record_bytes
from tests.runtime.test_applier_schema import rows_under_a_schema_of_another_origin, until
from tests.runtime.test_node import SOCKET_AUTOJUMP_S, make_node, next_request, opened, serve_fake_member
from wal import Record, VClock


def member_sending_at_once(rows: list[Record], upstream_uuid: str, acks: list[dict[int, int]]):
    """A fake member whose relay is ahead of its subscriber: one ROWS frame per row, all
    in one write, as a backlog reaches a subscriber's socket."""
    async def handler(stream: trio.SocketStream) -> None:
        await stream.send_all(encode_greeting(version="2.10.0", instance_uuid=upstream_uuid, salt=os.urandom(32)))
        decoder = FrameDecoder(1 << 20)
        frame = await next_request(stream, decoder)
        assert frame is not None and frame.request_type == RequestType.SUBSCRIBE
        last = {row.origin: row.lsn for row in rows}
        await stream.send_all(encode_ok(sync=frame.sync, schema_version=1,
                                        body={Key.INSTANCE_UUID: upstream_uuid, Key.VCLOCK: last}))
        await stream.send_all(b"".join(encode_request(PeerRequest.ROWS, 0, {PeerKey.RECORDS: [record_bytes(row)]})
                                       for row in rows))
        while (frame := await next_request(stream, decoder)) is not None:
            if frame.request_type == PeerRequest.ACK:
                acks.append(dict(frame.body[Key.VCLOCK]))

    return handler


def test_frames_received_together_are_applied_in_one_turn_and_acknowledged_once(tmp_path: Path) -> None:
    acks: list[dict[int, int]] = []

    async def follow() -> tuple[list[list[object]], VClock]:
        node = make_node(tmp_path / "node", replication_timeout=0.5)
        async with opened(node), trio.open_nursery() as nursery:
            ddl, data = rows_under_a_schema_of_another_origin(tmp_path, list(node.engine.wal.read_from(VClock())))
            address = await serve_fake_member(nursery, member_sending_at_once([ddl, data], str(uuid.uuid4()), acks))
            nursery.start_soon(run_applier, node, Upstream(key=address, address=address, uuid=None))
            await until(lambda: any(ack.get(3) == 1 for ack in acks))
            await trio.sleep(1.0)  # no further acknowledgement of rows: the heartbeats' are the relay's to ask
            rows = node.engine.query("SELECT * FROM t").rows
            nursery.cancel_scope.cancel()
            return rows, node.engine.vclock

    rows, vclock = trio.run(follow, clock=trio.testing.MockClock(autojump_threshold=SOCKET_AUTOJUMP_S))
    assert rows == [[1, "x"]] and vclock.get(2) == 1 and vclock.get(3) == 1
    assert [{2: ack.get(2), 3: ack.get(3)} for ack in acks] == [{2: 1, 3: 1}], \
        f"the two frames were applied, flushed and acknowledged together: {acks}"
