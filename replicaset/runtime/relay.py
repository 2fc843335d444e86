"""The relay task: carries out a relay core's actions on a subscribed connection, fed by
the writer's flushes and syncs; and the registry of the node's relays."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import trio

from replicaset.core import replication as repl
from replicaset.iproto.codec import encode_request
from replicaset.iproto.constants import Key
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.links import FrameSink
from replicaset.runtime.writer import Writer
from replicaset.storage import Engine
from wal import Record, VClock, encode_record

RELAY_BATCH_ROWS = 256
FEED_QUEUE_MAX = 64


def record_bytes(record: Record) -> bytes:
    return encode_record(record, max_record_bytes=1 << 31)


@dataclass(frozen=True, slots=True)
class Synced:
    """The WAL was fsynced up to `vclock`."""

    vclock: VClock


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


@dataclass
class Downstream:
    relay: repl.Relay
    uuid: str


class Relays:
    """The node's relays: one downstream per subscriber, and the feeds the writer tells of
    its flushes and syncs. A session hands a subscribed connection over here."""

    def __init__(self, check_invariants: Callable[[], None] | None = None) -> None:
        """`check_invariants`, in debug runs, is called after every relay event."""
        self.downstreams: dict[int, Downstream] = {}
        self._feeds: set[Feed] = set()
        self._check_invariants = check_invariants

    def open_feed(self) -> Feed:
        """Open before the relay's log read: no flush falls between the two."""
        feed = Feed()
        self._feeds.add(feed)
        return feed

    def on_flush(self, records: list[Record]) -> None:
        for feed in self._feeds:
            feed.push(records)

    def on_synced(self, vclock: VClock) -> None:
        for feed in self._feeds:
            feed.push(Synced(vclock))

    def acked(self, origin: int) -> dict[int, int]:
        """What each subscriber acknowledged of `origin`'s rows."""
        return {subscriber: d.relay.acked.get(origin) for subscriber, d in self.downstreams.items()}

    def __iter__(self) -> Iterator[Downstream]:
        return iter(list(self.downstreams.values()))

    async def serve(
        self, relay: repl.Relay, uuid: str, feed: Feed, first: list[repl.Action], out: FrameSink, *,
        engine: Engine, writer: Writer, log: Any,
    ) -> None:
        """Run a subscribed relay until it stops or its connection breaks."""
        self.downstreams[relay.subscriber] = Downstream(relay=relay, uuid=uuid)
        try:
            await run_relay(relay, feed, first, out, engine=engine, writer=writer, log=log,
                            check_invariants=self._check_invariants)
        finally:
            self.close_feed(feed)
            current = self.downstreams.get(relay.subscriber)
            if current is not None and current.relay is relay:
                del self.downstreams[relay.subscriber]

    def close_feed(self, feed: Feed) -> None:
        self._feeds.discard(feed)


async def run_relay(
    relay: repl.Relay, feed: Feed, first: list[repl.Action], out: FrameSink, *, engine: Engine, writer: Writer, log: Any,
    check_invariants: Callable[[], None] | None = None,
) -> None:
    """Carry out the relay core's actions: read the log when it asks (at subscribe, and
    after it kept no rows), then follow the feed of flushes and syncs."""

    async def read_log(after: VClock) -> None:
        """Rows flushed from now on reach the feed too (opened before): the relay drops
        the copies."""
        batch: list[Record] = []
        for record in engine.wal.read_from(after):
            batch.append(record)
            if len(batch) >= RELAY_BATCH_ROWS:
                await act(relay.rows(trio.current_time(), batch, engine.wal.synced_vclock))
                batch = []
        await act(relay.rows(trio.current_time(), batch, engine.wal.synced_vclock))

    async def act(actions: list[repl.Action]) -> None:
        for action in actions:
            if isinstance(action, repl.SendRows):
                body = {PeerKey.RECORDS: [record_bytes(r) for r in action.records]}
                out.send_frame(encode_request(PeerRequest.ROWS, 0, body))
            elif isinstance(action, repl.SendHeartbeat):
                out.send_frame(encode_request(PeerRequest.HEARTBEAT, 0, {Key.VCLOCK: action.vclock}))
            elif isinstance(action, repl.SyncWal):
                writer.request_sync()
            elif isinstance(action, repl.ReadLog):
                await read_log(VClock(action.after))
            elif isinstance(action, repl.Disconnect):
                log.info("relay_stopped", subscriber=relay.subscriber, reason=action.reason)
                raise _RelayStop(action.reason)
        if check_invariants is not None:
            check_invariants()
        await out.flush_outbox()

    try:
        await act(first)
        while True:
            with trio.move_on_after(relay.timeout_s / 2) as idle:
                item = await feed.receive.receive()
            now = trio.current_time()
            if idle.cancelled_caught:
                await act(relay.tick(now, engine.vclock))
                continue
            if feed.overflowed:
                feed.drain()
                await act(relay.lost_rows(now))
                continue
            actions = relay.synced(now, item.vclock) if isinstance(item, Synced) else relay.rows(now, item, engine.wal.synced_vclock)
            # Rows the subscriber does not need (its own) are filtered out: without this
            # tick a relay busy with them would never heartbeat, and the subscriber would
            # take it for dead.
            await act(actions + relay.tick(now, engine.vclock))
    except _RelayStop:
        return


class _RelayStop(Exception):
    pass
