"""The relay task: carries out the actions of the driver's relay on a subscribed
connection, fed by the writer's flushes and syncs; and the registry of the relay tasks."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import trio

from replicaset.core import replication as repl
from replicaset.iproto.codec import encode_request
from replicaset.iproto.constants import Key
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.member import Action, MemberDriver, RelayAction
from replicaset.runtime.links import FrameSink
from replicaset.runtime.writer import Writer
from replicaset.storage import Engine
from wal import Record, VClock, encode_record

RELAY_BATCH_ROWS = 256
FEED_QUEUE_MAX = 64


def record_bytes(record: Record) -> bytes:
    return encode_record(record, max_record_bytes=1 << 31)


def frames_of(records: Sequence[Record], budget_bytes: int) -> Iterator[list[bytes]]:
    """The encoded records in runs of at most `budget_bytes` (a record larger than that
    alone): 256 rows of large transactions made one frame past the subscriber's
    `max_frame_bytes`, which it refused, resubscribed, and got again, for ever."""
    run: list[bytes] = []
    size = 0
    for record in records:
        encoded = record_bytes(record)
        if run and size + len(encoded) > budget_bytes:
            yield run
            run, size = [], 0
        run.append(encoded)
        size += len(encoded)
    if run:
        yield run


@dataclass(frozen=True, slots=True)
class Synced:
    """The WAL was fsynced: the relay reads the new durable cut from the store."""


FeedItem = list[Record] | Synced


class Feed:
    """What the writer tells one relay, in order: rows flushed, and syncs. A full queue
    means "re-read the log": items were not kept for the relay."""

    def __init__(self) -> None:
        self.send, self.receive = trio.open_memory_channel[FeedItem](FEED_QUEUE_MAX)
        self.overflowed = False

    def push(self, item: FeedItem) -> None:
        try:
            self.send.send_nowait(item)
        except trio.WouldBlock:
            self.overflowed = True

    def drain(self) -> None:
        self.overflowed = False
        while True:
            try:
                self.receive.receive_nowait()
            except trio.WouldBlock:
                return


class Relays:
    """The node's relay tasks and the feeds the writer tells of its flushes and syncs; the
    relays themselves are the member driver's. A session hands a subscribed connection
    over here."""

    def __init__(self) -> None:
        # Told in the order they opened (a set's order is by address): a simulated run
        # replays step for step.
        self._feeds: dict[Feed, None] = {}

    def open_feed(self) -> Feed:
        """Open before the relay's log read: no flush falls between the two."""
        feed = Feed()
        self._feeds[feed] = None
        return feed

    def on_flush(self, records: list[Record]) -> None:
        for feed in self._feeds:
            feed.push(records)

    def on_synced(self) -> None:
        """The writer synced the WAL; the relays read the cut from the store."""
        for feed in self._feeds:
            feed.push(Synced())

    async def serve(
        self, driver: MemberDriver, conn: int, feed: Feed, first: list[Action], out: FrameSink, *,
        engine: Engine, writer: Writer, log: Any, frame_bytes: int,
    ) -> None:
        """Run the driver's relay on `conn` until it stops or its connection breaks; a ROWS
        frame holds at most `frame_bytes` of records (more for one record alone)."""
        try:
            await run_relay(driver, conn, feed, first, out, engine=engine, writer=writer, log=log,
                            frame_bytes=frame_bytes)
        finally:
            self.close_feed(feed)
            driver.relay_closed(conn)

    def close_feed(self, feed: Feed) -> None:
        self._feeds.pop(feed, None)


async def run_relay(
    driver: MemberDriver, conn: int, feed: Feed, first: list[Action], out: FrameSink, *, engine: Engine,
    writer: Writer, log: Any, frame_bytes: int,
) -> None:
    """Carry out the actions of the driver's relay on `conn`: read the log when it asks (at
    subscribe, and after it kept no rows), then follow the feed of flushes and syncs."""
    relay = driver.relays[conn]
    subscriber, timeout_s = relay.subscriber, relay.timeout_s

    async def read_log(after: VClock) -> None:
        """Rows flushed from now on reach the feed too (opened before): the relay drops
        the copies."""
        batch: list[Record] = []
        for record in engine.wal.read_from(after):
            batch.append(record)
            if len(batch) >= RELAY_BATCH_ROWS:
                await act(driver.relay_rows(conn, trio.current_time(), batch))
                batch = []
        await act(driver.relay_rows(conn, trio.current_time(), batch))

    async def act(actions: list[Action]) -> None:
        for tagged in actions:
            assert isinstance(tagged, RelayAction) and tagged.conn == conn
            action = tagged.action
            if isinstance(action, repl.SendRows):
                for run in frames_of(action.records, frame_bytes):
                    out.send_frame(encode_request(PeerRequest.ROWS, 0, {PeerKey.RECORDS: run}))
            elif isinstance(action, repl.SendHeartbeat):
                out.send_frame(encode_request(PeerRequest.HEARTBEAT, 0, {Key.VCLOCK: action.vclock}))
            elif isinstance(action, repl.SyncWal):
                writer.request_sync()
            elif isinstance(action, repl.ReadLog):
                await read_log(VClock(action.after))
            elif isinstance(action, repl.Disconnect):
                log.info("relay_stopped", subscriber=subscriber, reason=action.reason)
                raise _RelayStop(action.reason)
        await out.flush_outbox()

    try:
        await act(first)
        while True:
            with trio.move_on_after(timeout_s / 2) as idle:
                item = await feed.receive.receive()
            now = trio.current_time()
            if idle.cancelled_caught:
                await act(driver.relay_tick(conn, now))
                continue
            if feed.overflowed:
                feed.drain()
                await act(driver.relay_lost_rows(conn, now))
                continue
            actions = driver.relay_synced(conn, now) if isinstance(item, Synced) else driver.relay_rows(conn, now, item)
            # Rows the subscriber does not need (its own) are filtered out: without this
            # tick a relay busy with them would never heartbeat, and the subscriber would
            # take it for dead.
            await act(actions + driver.relay_tick(conn, now))
    except _RelayStop:
        return


class _RelayStop(Exception):
    pass
