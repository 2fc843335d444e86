"""FINDINGS F1 in the runtime: under `wal_mode = write` a relay ships a row of its own
member's origin only once an OS crash can no longer take it, or the member reuses the LSN
after the crash and two different rows carry one `(origin, lsn)`. Both ways rows reach a
relay are driven: the catch-up from the log (rows written before the subscriber came) and
the feed of new flushes (the writer's shipper). At every frame the relay sends, the test
takes the image an OS crash at that moment would leave of the WAL, and the frame's rows of
our origin must be in it."""

from __future__ import annotations

import os
from functools import partial
import time
import uuid
from pathlib import Path

import pytest
import trio

from replicaset.config import load
from replicaset.identity import Identity
from replicaset.iproto.codec import FrameDecoder
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.member import Accepted
from replicaset.runtime.node import Node
from replicaset.runtime.relay import run_relay
from replicaset.runtime.writer import Writer
from replicaset.testing.pagecache import PageCache
from wal import GroupCommitPolicy, Record, VClock, Wal, decode_record

OWN = 1
SUBSCRIBER = 2
ROWS_BEFORE = 20  # written before the subscriber comes: the relay's catch-up ships them
ROWS_AFTER = 20  # written while it listens: the feed ships them
FRAME_BYTES_MAX = 1 << 24
WAIT_S = 10
FSYNC_S = 0.02
REPLICATION_TIMEOUT_S = 30.0  # nobody acks: no silence timeout within the test


class SubscriberEnd:
    """The subscriber's end of the relay's connection (a `Session` as `run_relay` uses it):
    decodes each frame sent and, at that moment, takes what an OS crash would leave."""

    def __init__(self, cache: PageCache, wal_dir: Path, images: Path, own_rows_expected: int) -> None:
        self._cache = cache
        self._wal_dir = wal_dir
        self._images = images
        self._decoder = FrameDecoder(FRAME_BYTES_MAX)
        self._own_rows_expected = own_rows_expected
        self.shipped: list[tuple[list[Record], Path]] = []  # each ROWS frame, and its crash image
        self.all_shipped = trio.Event()

    def send_frame(self, data: bytes) -> None:
        self._decoder.feed(data)
        while (frame := self._decoder.next_frame()) is not None:
            if frame.request_type == PeerRequest.ROWS:
                image = self._images / str(len(self.shipped))
                self._cache.crash_image(self._wal_dir, image)
                self.shipped.append(([decode_record(raw)[0] for raw in frame.body[PeerKey.RECORDS]], image))
                if len(self.own_rows()) >= self._own_rows_expected:
                    self.all_shipped.set()

    async def flush_outbox(self) -> None:
        await trio.lowlevel.checkpoint()

    def own_rows(self) -> list[int]:
        return [r.lsn for records, _ in self.shipped for r in records if r.origin == OWN]


def surviving(wal_dir: Path) -> VClock:
    with Wal.open(wal_dir) as wal:
        return wal.vclock


def test_a_relay_ships_no_row_of_ours_an_os_crash_could_still_take(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = PageCache(monkeypatch)
    fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        """Writes go on while an fsync runs, as on a disk: the relay's catch-up then finds
        rows in the log that its sync did not cover."""
        fsync(fd)
        time.sleep(FSYNC_S)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    identity = Identity(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()), instance_id=OWN)
    node = Node(config=load(overrides={"wal_mode": "write", "replication_timeout": REPLICATION_TIMEOUT_S}), identity=identity,
                data_dir=tmp_path / "data")
    node.engine = node.open_engine()
    node.driver = node.open_member()
    node.writer = Writer(node.engine, group_commit=GroupCommitPolicy(4096, 16, 0), fsync=False,
                         on_commit=node._on_commit, on_flush=node._on_flush, on_synced=node._on_synced)  # as Node.run wires them
    images = tmp_path / "images"
    images.mkdir()
    wire = SubscriberEnd(cache, tmp_path / "data" / "wal", images, own_rows_expected=1 + ROWS_BEFORE + ROWS_AFTER)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(node.writer.run_flusher)
            await node.writer.execute_trusted("CREATE TABLE t(id INTEGER PRIMARY KEY)")  # no DDL lock here
            for n in range(ROWS_BEFORE):
                await node.writer.execute("INSERT INTO t VALUES (?)", [n])
            feed = node.relays.open_feed()
            conn = next(node.relay_ids)
            accepted = node.driver.relay_subscribe(conn, trio.current_time(), subscriber=SUBSCRIBER, vclock=VClock(),
                                                   last_txn={}, include_own=False)
            assert isinstance(accepted, Accepted)
            nursery.start_soon(partial(run_relay, node.driver, conn, feed, accepted.actions, wire, engine=node.engine,
                                       writer=node.writer, log=node.log, frame_bytes=1 << 20))
            for n in range(ROWS_BEFORE, ROWS_BEFORE + ROWS_AFTER):
                await node.writer.execute("INSERT INTO t VALUES (?)", [n])
            with trio.fail_after(WAIT_S):
                await wire.all_shipped.wait()
            nursery.cancel_scope.cancel()

    try:
        # Real time: the slowed fsyncs run in threads, and a MockClock would pass the deadlines meanwhile.
        trio.run(main)
    finally:
        node.engine.close()
    assert wire.own_rows() == list(range(1, 2 + ROWS_BEFORE + ROWS_AFTER)), "each row once, in order"
    for records, image in wire.shipped:
        durable = surviving(image).get(OWN)
        lost = [r.lsn for r in records if r.origin == OWN and r.lsn > durable]
        assert not lost, f"shipped {OWN}:{lost} while an OS crash would have left the WAL at {OWN}:{durable}"
    cache.os_crash(tmp_path / "data" / "wal")
    assert surviving(tmp_path / "data" / "wal").get(OWN) >= wire.own_rows()[-1]


def test_rows_go_in_frames_bounded_by_bytes_and_a_large_row_alone():
    """256 rows of large transactions in one frame passed the subscriber's max_frame_bytes:
    it refused the frame, resubscribed and got the same frame again, for ever."""
    from replicaset.runtime.relay import frames_of, record_bytes
    from wal import Record, RecordType

    def row(lsn: int, size: int) -> Record:
        return Record(type=RecordType.DML, origin=1, lsn=lsn, txn_id=lsn, payload=b"x" * size)

    records = [row(1, 400), row(2, 400), row(3, 5000), row(4, 100), row(5, 100)]
    runs = list(frames_of(records, 1000))
    assert [len(run) for run in runs] == [2, 1, 2], "a run never passes the budget; a larger row goes alone"
    assert [b for run in runs for b in run] == [record_bytes(r) for r in records], "every row, in order"
