"""One client connection speaking iproto.

Theory of operation: the read loop decodes frames and runs requests outside streams
itself, in arrival order; a write's reply is queued once its group commit is durable (the
writer's flush settles its ticket) and sent by the connection's sending task, so
pipelined writes share one flush; a QUORUM write and a peer's PREPARE wait for their
answer in a task beside the read loop. Each STREAM_ID gets a lane (a task
and a bounded queue) that runs that stream's requests in order. A stream transaction
takes the single writer for each of its statements only: between them its rows wait
outside SQLite (`Writer.stream_execute`), so no stream, however slow its client, holds up
another's statements, a decided quorum row or an applied one. It is rolled back when
`stream_timeout_s` passes or the connection closes. Replies gather in an outbox, sent
with one `send_all` per batch of frames read.
"""

from __future__ import annotations

from functools import partial
import os
from dataclasses import dataclass
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO, TypeVar

import trio

from replicaset.access import GUEST, NOBODY, Rights
from replicaset import console
from replicaset.console import ConsoleError
from replicaset.iproto import auth
from replicaset.iproto.codec import FrameDecoder, Frame, encode_error, encode_greeting, encode_ok
from replicaset.iproto.constants import GREETING_VERSION, ErrorCode, Key, RequestType
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.prepared import PreparedStatements
from replicaset.iproto.sql_wire import bind_metadata, decode_binds, metadata, sql_info, sql_type_name
from replicaset.iproto.system_views import decode_select, select_system_view
from replicaset.core import replication as repl
from replicaset.core.replication import ANONYMOUS_SUBSCRIBER
from replicaset.core.quorum import Level
from replicaset.core.streams import Aborted, ActiveTransaction, StreamTxn
from replicaset.iproto import peer_messages
from replicaset.iproto.peer import PeerRequest
from replicaset.runtime import box, removal as removals
from replicaset.runtime.errors import RequestError
from replicaset.runtime.links import REFUSAL_CODES
from replicaset.runtime.peer_access import PeerGate, PeerRefused, remote_address
from replicaset.runtime.transfer import ServeStart, resume_start, serve_checkpoint
from replicaset.runtime.writer import Ticket, WriteFailed
from replicaset.storage import (
    ConnectionValues,
    Captured,
    DdlNeedsLock,
    EngineFatal,
    SqlError,
    StatementResult,
    StatementTimeout,
    TxnConflict,
)
from replicaset.storage.statements import Columns, first_word
from wal import VClock

from replicaset.runtime.node import Node

RECEIVE_BYTES = 64 * 1024
# Replies held for a client past this are sent before another request is read: a client
# that pipelines without reading waits on its own socket, and the server's memory for it
# stays bounded (so does a stuck reader's).
OUTBOX_MAX_BYTES = 1024 * 1024
LANE_QUEUE_MAX = 256
STREAMS_PER_CONNECTION_MAX = 64
T = TypeVar("T", peer_messages.Hello, peer_messages.Subscribe)


class _ConnectionClosed(Exception):
    """We close this connection: its byte stream can no longer be trusted."""


TXN_REQUESTS = frozenset({PeerRequest.TXN_PREPARE, PeerRequest.TXN_COMMIT, PeerRequest.TXN_ABORT,
                          PeerRequest.TXN_QUERY, PeerRequest.TXN_HEARTBEAT, PeerRequest.TXN_QUERY_ROW})
# Governed by the cluster secret (`PeerGate`), not by user logins; by name, for the log.
PEER_REQUESTS: dict[int, str] = {kind: kind.name for kind in (RequestType.JOIN, RequestType.SUBSCRIBE, PeerRequest.ACK,
                                                               *sorted(TXN_REQUESTS))}
RETURN_VCLOCK = "return_vclock"
# CALL serves the `box` functions connectors call on their own (PyPI `tarantool`'s
# ConnectionPool calls box.info for `ro` and `status`), as the console evaluates them.
CALLABLE = {"box.info": "box.info", "box.snapshot": "box.snapshot()"}
_SQL_INSTEAD = "this server keeps data in SQL tables: use SQL (EXECUTE)"
# Tarantool's requests this server does not serve, with what to do instead.
UNSERVED_REQUESTS: dict[int, str] = {
    **{kind: f"{kind.name} requests are not supported: {_SQL_INSTEAD}" for kind in (
        RequestType.INSERT, RequestType.REPLACE, RequestType.UPDATE, RequestType.DELETE, RequestType.UPSERT)},
    RequestType.CALL_16: "CALL_16 (request 6, the call of Tarantool 1.6) is not supported: use CALL (request 10)",
}


@dataclass(frozen=True, slots=True)
class _Options:
    """EXECUTE's and BEGIN's OPTIONS map: `consistency` ("one", "quorum", "all") for
    writes, `wait_vclock` ({instance id: lsn}) for an EXECUTE that must see those rows,
    `return_vclock` (true) for a write whose reply must say the vclock it reached."""

    level: Level
    wait_vclock: VClock | None


def _returns_vclock(frame: Frame) -> bool:
    """Whether the request's OPTIONS ask for the vclock its write reached (checked by
    `_options` before anything ran). No connector asks on its own: a header key they do
    not know makes asynctnt warn, and net.box takes any body key it does not know of an
    EXECUTE reply for SQL_INFO."""
    raw = frame.body.get(Key.OPTIONS)
    return isinstance(raw, dict) and raw.get(RETURN_VCLOCK) is True


def _options(body: dict[int, Any], default: Level) -> _Options:
    raw = body.get(Key.OPTIONS)
    if raw is None or raw == []:  # Tarantool's connectors send an empty array
        return _Options(level=default, wait_vclock=None)
    if not isinstance(raw, dict):
        raise RequestError(ErrorCode.ILLEGAL_PARAMS, "OPTIONS must be a map")
    level = raw.get("consistency", default.value)
    if not isinstance(level, str) or level.lower() not in {lv.value for lv in Level}:
        raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"OPTIONS consistency must be one, quorum or all, got {level!r:.40}")
    wait = raw.get("wait_vclock")
    try:
        wait_vclock = None if wait is None else VClock(wait).replicated()
    except (TypeError, ValueError) as exc:
        raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"OPTIONS wait_vclock is not a vclock: {exc}") from None
    if not isinstance(raw.get(RETURN_VCLOCK, False), bool):
        raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"OPTIONS {RETURN_VCLOCK} must be true or false, got "
                                                     f"{raw[RETURN_VCLOCK]!r:.40}")
    return _Options(level=Level(level.lower()), wait_vclock=wait_vclock)


class Session:
    def __init__(self, node: Node, stream: trio.abc.Stream) -> None:
        self._node = node
        self._stream = stream
        self._outbox = bytearray()
        self._sending = False
        self._sent = trio.Event()  # set each time the sending task has emptied the outbox
        self._awaiting_flush = 0  # writes whose reply waits for their flush
        self._flush_replied = trio.Event()  # set, and replaced, each time such a reply is queued
        self._outbox_ready = trio.Event()  # set when a reply queued outside a request's task awaits its send
        self._lanes: dict[int, trio.MemorySendChannel[Frame]] = {}
        self._lane_backlog: dict[int, int] = {}
        self._stream0 = StreamTxn()
        self._relay_conn: int | None = None  # the driver's key of the relay this connection carries
        self._salt = os.urandom(32)
        self._rights: Rights = node.guest or NOBODY  # guest disabled: only peers' requests before AUTH
        self._default_level = Level(node.config["replication.default_write_consistency"].lower())
        self._prepared = PreparedStatements()
        self._values = ConnectionValues()  # what SQLite would keep for this client's connection
        self._peer = PeerGate(node.cluster_secret, instance_uuid=node.identity.instance_uuid, salt=self._salt,
                              remote=remote_address(stream), log=node.log)

    # ---------------------------------------------------------------- plumbing

    def _send(self, data: bytes) -> None:
        self._outbox += data

    send_frame = _send

    async def flush_outbox(self) -> None:
        await self._flush_outbox()

    async def _flush_outbox(self) -> None:
        """Send what the outbox holds; a task already sending picks up what others add,
        and one past `OUTBOX_MAX_BYTES` waits until it has."""
        if not self._outbox:
            return
        while self._sending:
            if len(self._outbox) <= OUTBOX_MAX_BYTES:
                return
            await self._sent.wait()
        self._sending = True
        try:
            while self._outbox:
                data, self._outbox = bytes(self._outbox), bytearray()
                await self._stream.send_all(data)
        finally:
            self._sending = False
            self._sent.set()
            self._sent = trio.Event()

    async def _send_everything(self) -> None:
        """Until the outbox is empty and no send is under way: before the connection
        closes. `_flush_outbox` leaves what others added to a task already sending, which
        the close would cancel, and the reply (a refusal's, why it closes) would be lost."""
        while self._outbox or self._sending:
            if self._sending:
                await self._sent.wait()
            else:
                await self._flush_outbox()

    async def _send_queued(self) -> None:
        """Sends the replies queued by the writer's flushes (`_reply_durable`), for the
        life of the connection."""
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready = trio.Event()
            await self._flush_outbox()

    def _reply_ok(self, frame: Frame, body: dict[int, Any] | None = None, *, vclock: dict[int, int] | None = None) -> None:
        self._send(encode_ok(sync=frame.sync, schema_version=self._node.schema_version, body=body, vclock=vclock))

    def _reply_error(self, sync: int, code: int, message: str, fields: dict[str, Any] | None = None) -> None:
        self._send(encode_error(sync=sync, schema_version=self._node.schema_version, code=code, message=message,
                                fields=fields))

    async def run(self) -> None:
        """Serve until the peer leaves; whatever goes wrong closes this connection only,
        except a fatal engine error, which must stop the process."""
        # Tarantool's version, not ours (box.info.version): connectors pick the requests
        # they send by it, and ours would make them skip ID and the UUID.
        greeting = encode_greeting(version=GREETING_VERSION, instance_uuid=self._node.identity.instance_uuid, salt=self._salt)
        try:
            await self._stream.send_all(greeting)
            async with trio.open_nursery() as sending:
                sending.start_soon(self._send_queued)
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    await self._read_loop(nursery)
                    await self._drain(nursery)
                with trio.move_on_at(nursery.cancel_scope.deadline):  # what the tasks queued, sent
                    await self._send_everything()
                sending.cancel_scope.cancel()
        except* EngineFatal:
            raise
        except* (trio.BrokenResourceError, trio.ClosedResourceError, _ConnectionClosed):
            pass
        except* Exception as group:
            self._node.log.error("session_failed", error=repr(group.exceptions[0]), exc_info=group)
        finally:
            await trio.aclose_forcefully(self._stream)

    async def _drain(self, nursery: trio.Nursery) -> None:
        """The peer closed its side: the lanes and the replies under way finish (then `run`
        sends what is left), all within `shutdown_grace_s`. The nursery's own exit waits
        for its tasks (the lanes, the replies waiting for a decision); its deadline cuts
        them off at the grace's end."""
        for channel in self._lanes.values():
            await channel.aclose()
        self._lanes.clear()
        nursery.cancel_scope.deadline = trio.current_time() + self._node.shutdown_grace_s
        while self._awaiting_flush:
            await self._flush_replied.wait()

    async def _read_loop(self, nursery: trio.Nursery) -> None:
        decoder = FrameDecoder(self._node.config.max_frame_bytes)
        while True:
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                return
            decoder.feed(data)
            while True:
                try:
                    frame = decoder.next_frame()
                except RemoteProtocolError as exc:
                    self._node.log.warning("bad_frame", error=exc.message, fatal=exc.fatal)
                    self._reply_error(exc.sync or 0, exc.code, exc.message)
                    if exc.fatal:
                        await self._send_everything()
                        raise _ConnectionClosed from exc
                    continue
                if frame is None:
                    break
                if frame.stream_id == 0 and not self._lane_backlog.get(0):
                    await self._handle_reporting(frame, self._stream0)
                else:
                    await self._route(frame, nursery)
                if len(self._outbox) > OUTBOX_MAX_BYTES:
                    await self._flush_outbox()
            await self._flush_outbox()

    async def _route(self, frame: Frame, nursery: trio.Nursery) -> None:
        lane = self._lanes.get(frame.stream_id)
        if lane is None:
            if len(self._lanes) > STREAMS_PER_CONNECTION_MAX:
                self._reply_error(frame.sync, ErrorCode.ILLEGAL_PARAMS, f"more than {STREAMS_PER_CONNECTION_MAX} streams on one connection")
                return
            lane, receive = trio.open_memory_channel[Frame](LANE_QUEUE_MAX)
            self._lanes[frame.stream_id] = lane
            nursery.start_soon(self._lane, frame.stream_id, receive)
        self._lane_backlog[frame.stream_id] = self._lane_backlog.get(frame.stream_id, 0) + 1
        await lane.send(frame)

    async def _lane(self, stream_id: int, frames: trio.MemoryReceiveChannel[Frame]) -> None:
        stream = self._stream0 if stream_id == 0 else StreamTxn()
        try:
            while True:
                with trio.move_on_at(stream.deadline_s) as scope:
                    try:
                        frame = await frames.receive()
                    except trio.EndOfChannel:
                        return
                if scope.cancelled_caught:
                    self._expire(stream)
                    continue
                await self._handle_reporting(frame, stream)
                self._lane_backlog[stream_id] -= 1
                await self._flush_outbox()
        finally:
            stream.dropped()

    async def _handle_reporting(self, frame: Frame, stream: StreamTxn) -> None:
        try:
            await self._handle(frame, stream)
        except PeerRefused as exc:
            self._reply_error(frame.sync, exc.code, exc.message)
            await self._send_everything()
            raise _ConnectionClosed from exc
        except (RequestError, RemoteProtocolError) as exc:
            self._reply_error(frame.sync, exc.code, exc.message, exc.fields if isinstance(exc, RequestError) else None)
        except WriteFailed as exc:  # a full disk refused what it needed written (box.snapshot(), a JOIN's checkpoint)
            self._reply_error(frame.sync, exc.code, str(exc))

    def _expire(self, stream: StreamTxn) -> None:
        stream.expired()
        self._node.log.info("stream_transaction_timeout")

    # ---------------------------------------------------------------- requests

    async def _handle(self, frame: Frame, stream: StreamTxn) -> None:
        kind = frame.request_type
        if kind == RequestType.PING:
            self._reply_ok(frame)
            return
        if kind == RequestType.ID:
            self._reply_ok(frame, {Key.VERSION: 3, Key.FEATURES: [0, 1, 2]})
            return
        if kind == RequestType.AUTH:
            self._auth(frame)
            self._reply_ok(frame)
            return
        if kind == PeerRequest.PEER_AUTH:
            self._reply_ok(frame, self._peer.authenticate(frame))
            return
        if kind in PEER_REQUESTS:
            self._peer.check(PEER_REQUESTS[kind])
        elif self._rights is NOBODY:
            raise RequestError(ErrorCode.ACCESS_DENIED, "authentication required: guest access is disabled on this "
                                                        "server ([auth] guest = false); log in with a user")
        if kind == RequestType.EXECUTE:
            await self._execute(frame, stream)
        elif kind == RequestType.PREPARE:
            self._prepare(frame)
        elif kind == RequestType.SELECT:
            self._select(frame)
        elif kind == RequestType.EVAL:
            await self._eval(frame)
        elif kind == RequestType.CALL:
            await self._call(frame)
        elif kind in UNSERVED_REQUESTS:
            raise RequestError(ErrorCode.UNSUPPORTED, UNSERVED_REQUESTS[kind])
        elif kind == RequestType.BEGIN:
            self._begin(frame, stream)
        elif kind == RequestType.COMMIT:
            await self._finish(frame, stream, commit=True)
        elif kind == RequestType.ROLLBACK:
            await self._finish(frame, stream, commit=False)
        elif kind == RequestType.SUBSCRIBE:
            await self._subscribe(frame)
        elif kind == PeerRequest.ACK:
            if self._relay_conn is None:
                raise RequestError(ErrorCode.PROTOCOL, "ACK on a connection that relays nothing")
            node = self._node
            node.quorum.carry_out(node.driver.relay_ack(self._relay_conn, trio.current_time(), peer_messages.ack(frame)))
        elif kind in TXN_REQUESTS:
            reply = await self._node.quorum.serve(frame)
            if callable(reply):
                self._nursery.start_soon(self._reply_when_ready, frame, reply)
            else:
                self._reply_ok(frame, reply)
        elif kind == RequestType.JOIN:
            await self._join(frame)
        else:
            raise RequestError(ErrorCode.UNKNOWN_REQUEST_TYPE, f"Unknown request type {kind}")

    def _check_replicaset(self, request: T) -> T:
        """A validated peer request, refused unless it is for our replica set."""
        self._node.check_replicaset(request.replicaset_uuid)
        return request

    async def _join(self, frame: Frame) -> None:
        hello = self._check_replicaset(peer_messages.hello(frame, "JOIN"))
        uuid, address = hello.instance_uuid, hello.address
        node = self._node
        if hello.anonymous:
            await self._join_anonymous(frame.sync, hello)
            return
        rejoining = node.member_id(uuid) is not None
        registration = await node.register(uuid, address)
        await node.wait_for_member(uuid)
        checkpoint, vclock, start = await self._join_checkpoint(hello.resume, fresh=rejoining)
        with checkpoint:
            node.log.info("join_serving", joiner_uuid=uuid, joiner_id=registration.instance_id,
                          checkpoint=checkpoint.name, vclock=vclock.to_dict(), **_resumed(hello.resume, start))
            await serve_checkpoint(self, frame.sync, checkpoint, vclock, registration, node.schema_version,
                                   start=start, chunk_bytes=node.config.checkpoint_chunk_bytes, registered=node.members)

    async def _join_anonymous(self, sync: int, hello: peer_messages.Hello) -> None:
        """A read-only follower's JOIN: the newest checkpoint, no registration (Tarantool's
        anonymous replica). A registered instance cannot turn anonymous: its id would vanish
        from what acknowledgements count."""
        node = self._node
        uuid = hello.instance_uuid
        if node.member_id(uuid) is not None:
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"instance {uuid} is a registered member: it cannot join as "
                                                         "an anonymous follower")
        checkpoint, vclock, start = await self._join_checkpoint(hello.resume, fresh=False)
        with checkpoint:
            node.log.info("join_serving", joiner_uuid=uuid, anonymous=True, checkpoint=checkpoint.name,
                          vclock=vclock.to_dict(), **_resumed(hello.resume, start))
            await serve_checkpoint(self, sync, checkpoint, vclock, None, node.schema_version,
                                   start=start, chunk_bytes=node.config.checkpoint_chunk_bytes)

    async def _join_checkpoint(
        self, resume: peer_messages.Resume | None, *, fresh: bool,
    ) -> tuple[BinaryIO, VClock, ServeStart]:
        """The checkpoint a JOIN is served, opened, and where to start in it: the rest of the
        newest one when the joiner kept a prefix of that very file; otherwise, for a member
        re-joining (`fresh`: anti-entropy, --rejoin), a new one from byte 0, since an older
        checkpoint would leave it as far behind as it was; otherwise the newest from 0. A
        checkpoint being resumed was the newest when the joiner began it, so a re-joiner that
        resumes is no further behind than one that did not break."""
        node = self._node
        chunk_bytes = node.config.checkpoint_chunk_bytes
        checkpoint, vclock = await node.writer.open_newest_checkpoint()
        start = ServeStart()
        if resume is not None:
            try:  # checking it reads up to the whole file: off the event loop
                start = await node.env.workers.run_sync(resume_start, checkpoint, vclock, resume, chunk_bytes)
            except BaseException:
                checkpoint.close()
                raise
        if start.offset or not fresh:
            return checkpoint, vclock, start
        checkpoint.close()
        await node.writer.checkpoint()
        checkpoint, vclock = await node.writer.open_newest_checkpoint()
        return checkpoint, vclock, ServeStart(refusal=start.refusal)

    async def _subscribe(self, frame: Frame) -> None:
        request = self._check_replicaset(peer_messages.subscribe(frame))
        uuid = request.instance_uuid
        node = self._node
        registered = node.member_id(uuid)
        if request.anonymous and registered is not None:
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"instance {uuid} is a registered member, not an anonymous "
                                                         "follower")
        subscriber = ANONYMOUS_SUBSCRIBER if request.anonymous else registered
        if subscriber is None:
            removal = node.removal_of(uuid)
            if removal is not None:  # the subscriber's core judges whether it is its own (`is_removal_of`)
                raise RequestError(ErrorCode.UNKNOWN_REPLICA, f"instance {uuid} {removals.describe(removal)}: "
                                                              "it is not a member any more", fields=removals.to_fields(removal))
            raise RequestError(ErrorCode.UNKNOWN_REPLICA, f"instance {uuid} is not registered in replica set {node.identity.replicaset_uuid}: join first")
        claimed = request.replica_id
        if claimed is not None and claimed != subscriber:
            message = f"instance {uuid} is registered as id {subscriber}, it says it is id {claimed}"
            node.log.warning("peer_refused", error=message)
            raise RequestError(ErrorCode.INSTANCE_UUID_MISMATCH, message)
        if self._relay_conn is not None:
            raise RequestError(ErrorCode.PROTOCOL, "this connection already relays")
        conn = next(node.relay_ids)
        feed = node.relays.open_feed()
        accepted = node.driver.relay_subscribe(conn, trio.current_time(), subscriber=subscriber, vclock=request.vclock,
                                               last_txn=request.last_txn, include_own=request.include_own)
        if isinstance(accepted, repl.Refuse):
            node.relays.close_feed(feed)
            node.log.error("subscribe_refused", subscriber=subscriber, error=accepted.message)
            raise RequestError(REFUSAL_CODES[accepted.refusal], accepted.message)
        self._relay_conn = conn
        # What a SUBSCRIBE says the subscriber holds is its first acknowledgement: a member that
        # has nothing new to acknowledge afterwards still counts as holding it (a joiner's
        # registration holders and the collection of decided records ask).
        node.quorum.carry_out(node.driver.relay_ack(conn, trio.current_time(), request.vclock))
        self._reply_ok(frame, {Key.VCLOCK: accepted.vclock, Key.INSTANCE_UUID: node.identity.instance_uuid})
        node.log.info("relay_started", subscriber=subscriber, vclock=request.vclock.to_dict(),
                      **({"anonymous": uuid} if request.anonymous else {}))
        if request.anonymous:
            node.anonymous_followers[conn] = uuid

        async def relay_then_close() -> None:
            """The connection is the relay's from now on: when it stops, the connection goes."""
            try:
                await node.relays.serve(node.driver, conn, feed, accepted.actions, self, engine=node.engine,
                                        writer=node.writer, log=node.log,
                                        frame_bytes=node.config.max_frame_bytes // 2)
            finally:
                node.anonymous_followers.pop(conn, None)
            await trio.aclose_forcefully(self._stream)

        self._nursery.start_soon(relay_then_close)

    def _auth(self, frame: Frame) -> None:
        """Log in as USER_NAME. A refused login is logged as a warning (the name, never the
        scramble) and leaves the session as it was, as in Tarantool."""
        user = frame.body.get(Key.USER_NAME)
        if not isinstance(user, str):
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "AUTH needs a user name")
        try:
            self._rights = self._login(user, frame.body.get(Key.TUPLE))
        except RequestError as exc:
            self._node.log.warning("login_refused", user=user[:64], code=int(exc.code), error=exc.message[:200],
                                   peer=remote_address(self._stream))
            raise

    def _login(self, user: str, tuple_: Any) -> Rights:
        node = self._node
        if user == GUEST:
            if node.guest is None:
                raise RequestError(ErrorCode.ACCESS_DENIED, "guest access is disabled on this server ([auth] guest = "
                                                            "false): log in with a user and password")
            return node.guest
        found = node.users.get(user)
        if found is None or found.password_hash is None:
            raise RequestError(ErrorCode.NO_SUCH_USER, f"User '{user[:64]}' is not found")
        if not (isinstance(tuple_, list) and len(tuple_) == 2 and tuple_[0] == "chap-sha1" and isinstance(tuple_[1], bytes)):
            raise RequestError(ErrorCode.UNKNOWN_AUTH_METHOD, "AUTH supports chap-sha1 only")
        if not auth.check_scramble_hash(tuple_[1], self._salt, found.password_hash):
            raise RequestError(ErrorCode.CREDS_MISMATCH, "User not found or supplied credentials are invalid")
        return found.rights

    def _check_sql(self, sql: str) -> None:
        """Refuse a statement that needs a privilege this session's user lacks: one dict
        lookup for the statement's tables (compiled once per text and schema) and one for
        the verdict memoed on them for this user."""
        try:
            access = self._node.engine.access(sql)
        except SqlError as exc:
            raise RequestError(ErrorCode.SQL_EXECUTE, str(exc)) from exc
        refusal = self._rights.sql_refusal(access)
        if refusal is not None:
            raise RequestError(ErrorCode.ACCESS_DENIED, refusal)

    def _prepare(self, frame: Frame) -> None:
        """PREPARE with SQL_TEXT compiles the text and registers it; with STMT_ID alone it
        drops that statement (unprepare) and answers with an empty body, as Tarantool."""
        body = frame.body
        if Key.SQL_TEXT not in body and Key.STMT_ID in body:
            self._prepared.unprepare(body[Key.STMT_ID])
            self._reply_ok(frame)
            return
        if Key.STMT_ID in body:
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "PREPARE takes SQL_TEXT or STMT_ID, not both")
        sql = body.get(Key.SQL_TEXT)
        if not isinstance(sql, str):
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "PREPARE needs SQL_TEXT (or STMT_ID alone to unprepare)")
        try:
            shape = self._node.engine.describe(sql)
        except SqlError as exc:
            raise RequestError(ErrorCode.SQL_EXECUTE, str(exc)) from exc
        if shape.is_empty:
            raise RequestError(ErrorCode.SQL_STATEMENT_EMPTY, "Failed to execute an empty SQL statement")
        if shape.has_tail:
            raise RequestError(ErrorCode.SQL_PREPARE, "Failed to prepare SQL statement: it holds more than one "
                                                      "statement; prepare each on its own")
        if not self._rights.sql_unrestricted:
            self._check_sql(sql)
        reply: dict[int, Any] = {
            Key.STMT_ID: self._prepared.prepare(sql),
            Key.BIND_COUNT: len(shape.parameters),
            Key.BIND_METADATA: bind_metadata(shape.parameters),
        }
        if shape.columns:
            reply[Key.METADATA] = metadata(_column_types(shape.columns, None))
        self._reply_ok(frame, reply)

    def _sql_text(self, body: dict[int, Any]) -> str:
        """EXECUTE's statement: SQL_TEXT, or the text this session prepared as STMT_ID.
        Either way it runs the same path, so a prepared statement answers, and is
        refused, exactly as its text would be."""
        if Key.STMT_ID in body:
            if Key.SQL_TEXT in body:
                raise RequestError(ErrorCode.ILLEGAL_PARAMS, "EXECUTE takes SQL_TEXT or STMT_ID, not both")
            return self._prepared.text(body[Key.STMT_ID])
        sql = body.get(Key.SQL_TEXT)
        if not isinstance(sql, str):
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "EXECUTE needs SQL_TEXT or STMT_ID")
        return sql

    async def _execute(self, frame: Frame, stream: StreamTxn) -> None:
        sql = self._sql_text(frame.body)
        if not first_word(sql):  # blanks and comments: SQLite runs nothing, and changes() is a past statement's
            raise RequestError(ErrorCode.SQL_STATEMENT_EMPTY, "Failed to execute an empty SQL statement")
        if not self._rights.sql_unrestricted:
            self._check_sql(sql)
        binds = decode_binds(frame.body.get(Key.SQL_BIND))
        node = self._node
        try:
            level = stream.statement(self._default_level)
        except Aborted as exc:
            raise _aborted_error(exc) from exc
        options = _options(frame.body, level)
        try:
            if options.wait_vclock is not None:
                await self._wait_vclock(options.wait_vclock)
            if stream.began:
                node.check_writable()
                result, captured = await node.writer.stream_execute(
                    stream.captured, sql, binds, quorum=stream.level is not Level.ONE, values=self._values)
                stream.ran(captured)
                self._ran(sql, result)
                self._reply_result(frame, result)
                return
            if node.engine.is_read(sql):
                result = node.engine.query(sql, binds, values=self._values)
                if result is not None:
                    self._reply_result(frame, result)
                    return
            node.check_writable()
            level = options.level
            if level is Level.ONE:
                try:
                    result, ticket = await node.writer.execute_nowait(sql, binds, self._values)
                    self._ran(sql, result)
                except DdlNeedsLock:
                    level = Level.QUORUM
            if level is not Level.ONE:
                started = trio.current_time()
                result, outcome = await node.writer.execute_quorum(
                    sql, binds, alone=partial(node.quorum.decides_alone, level), values=self._values)
                self._ran(sql, result)
                if isinstance(outcome, Ticket):  # decided alone: answered once fsynced, as the quorum's answer is
                    self._awaiting_flush += 1
                    outcome.on_settled(partial(self._reply_alone, frame, result, level, started))
                    return
                captured = outcome
                if captured.ddl is None:
                    self._nursery.start_soon(self._reply_when_decided, frame, result, captured, level)
                    return
                # DDL waits here: the statements behind it on this connection may need its schema.
                await self._commit_captured(captured, level)
                self._reply_result(frame, result, vclock=node.engine.vclock)
                return
        except StatementTimeout as exc:
            raise RequestError(ErrorCode.TIMEOUT, str(exc)) from exc
        except TxnConflict as exc:  # nothing of the transaction remains
            raise _aborted_error(stream.conflicted(str(exc))) from exc
        except SqlError as exc:
            raise RequestError(ErrorCode.SQL_EXECUTE, str(exc)) from exc
        if ticket.settled and ticket.error is None:
            self._reply_result(frame, result, vclock=node.engine.vclock)
        else:
            self._awaiting_flush += 1
            ticket.on_settled(partial(self._reply_durable, frame, result))

    def _ran(self, sql: str, result: StatementResult) -> None:
        """A statement of this session ran on the writer: what last_insert_rowid(),
        changes() and total_changes() answer next (storage.connection_values)."""
        self._values.wrote(first_word(sql), result.row_count, result.inserted_rowid)

    def _reply_durable(self, frame: Frame, result: StatementResult, error: Exception | None) -> None:
        """A write's reply, once its flush is done: queued, and sent by the outbox's task.
        It runs inside the writer's flush: what goes wrong here closes this connection
        only, as it did when each reply had a task of its own."""
        self._awaiting_flush -= 1
        self._flush_replied.set()
        self._flush_replied = trio.Event()
        try:
            if error is not None:  # a WriteFailed, or the engine's fatal error, which stops the member next
                self._reply_error(frame.sync, getattr(error, "code", ErrorCode.WAL_IO), str(error))
            else:
                self._reply_result(frame, result, vclock=self._node.engine.vclock)
        except Exception as exc:  # noqa: BLE001 - a bug in one reply must not fail the writer's flush
            self._node.log.error("session_failed", error=repr(exc), exc_info=exc)
            self._nursery.cancel_scope.cancel()
            return
        self._outbox_ready.set()

    async def _reply_when_ready(self, frame: Frame, body: Callable[[], Awaitable[dict[int, Any]]]) -> None:
        """A peer's request answered beside the read loop; sent with the replies ready
        meanwhile."""
        self._reply_ok(frame, await body())
        self._outbox_ready.set()

    async def _reply_when_decided(self, frame: Frame, result: StatementResult, captured: Captured,
                                  level: Level) -> None:
        """A QUORUM or ALL write waits for its level here, beside the connection's read
        loop: the requests behind it on the connection go on meanwhile, each answered by
        its sync, as Tarantool runs each request in a fiber of its own."""
        try:
            await self._commit_captured(captured, level)
        except RequestError as exc:
            self._reply_error(frame.sync, exc.code, exc.message)
        else:
            self._reply_result(frame, result, vclock=self._node.engine.vclock)
        await self._flush_outbox()

    def _reply_alone(self, frame: Frame, result: StatementResult, level: Level, started: float,
                     error: Exception | None) -> None:
        """A write this member decided alone (a set of one), counted with the quorum's."""
        failed = RequestError(getattr(error, "code", ErrorCode.WAL_IO), str(error)) if error is not None else None
        self._node.quorum.decided_alone(level, failed, trio.current_time() - started)
        self._reply_durable(frame, result, error)

    async def _commit_captured(self, captured: Captured, level: Level) -> None:
        """Decide a captured transaction at `level`. A DDL statement's (the DDL lock, docs/design/README.md
        §4.6) may take up to `[ddl] lock_lease_seconds` to be decided, any other
        `synchro_timeout_s`."""
        if captured.ddl is not None:
            await self._node.quorum.commit(captured, level, float(self._node.config["ddl.lock_lease_seconds"]))
        elif captured.rows:
            await self._node.quorum.commit(captured, level, self._synchro_timeout_s())

    def _synchro_timeout_s(self) -> float:
        return float(self._node.config["replication.synchro_timeout_s"])

    async def _wait_vclock(self, wanted: VClock) -> None:
        """Read-your-writes on any member, for reads and writes alike: wait until this
        member holds `wanted`, so that a statement naming what a DDL elsewhere created
        runs once that DDL is here."""
        node = self._node
        engine = node.engine
        with trio.move_on_after(self._synchro_timeout_s()):
            while not wanted <= engine.vclock:
                await node.vclock_advanced.wait()
            return
        raise RequestError(ErrorCode.TIMEOUT, f"this member's vclock {engine.vclock.to_dict()} did not reach "
                                              f"{wanted.to_dict()} within {self._synchro_timeout_s()} s")

    def _reply_result(self, frame: Frame, result: StatementResult, *, vclock: VClock | None = None) -> None:
        if result.columns:
            columns = _column_types(result.columns, result.rows[0] if result.rows else None)
            self._reply_ok(frame, {Key.METADATA: metadata(columns), Key.DATA: result.rows})
        else:
            # The vclock a write reached, to read it back anywhere with wait_vclock, for a
            # request that asked: no connector knows where else to find it.
            asked = vclock is not None and _returns_vclock(frame)
            self._reply_ok(frame, {Key.SQL_INFO: sql_info(result.row_count or 0, result.autoincrement_ids)},
                           vclock=vclock.replicated().to_dict() if asked else None)

    def _select(self, frame: Frame) -> None:
        """Only the system views connectors read at connect: data is read with SQL."""
        rows = select_system_view(self._node.system_views_for(self._rights), decode_select(frame.body))
        self._reply_ok(frame, {Key.DATA: rows})

    async def _eval(self, frame: Frame) -> None:
        """The console's expressions (`return box.info.vclock` as Tarantool users write
        them: the console takes the `return`)."""
        expr = frame.body.get(Key.EXPR)
        if not isinstance(expr, str):
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "EVAL needs EXPR")
        self._check_admin("universe ''")
        self._reply_ok(frame, {Key.DATA: [await self._console(expr)]})

    async def _call(self, frame: Frame) -> None:
        """CALL of the `box` functions in `CALLABLE`, answered as Tarantool answers a Lua
        function's one result; any other name is Tarantool's ER_NO_SUCH_PROC."""
        name = frame.body.get(Key.FUNCTION_NAME)
        if not isinstance(name, str):
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, "CALL needs FUNCTION_NAME")
        expr = CALLABLE.get(name)
        if expr is None:
            raise RequestError(ErrorCode.NO_SUCH_PROC, f"Procedure '{name[:64]}' is not defined: this server "
                                                       f"answers CALL of {' and '.join(CALLABLE)} only; run SQL "
                                                       "with EXECUTE")
        if frame.body.get(Key.TUPLE, []) != []:
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, f"{name} takes no arguments")
        self._check_admin(f"function '{name}'")
        self._reply_ok(frame, {Key.DATA: [await self._console(expr)]})

    def _check_admin(self, what: str) -> None:
        """EVAL and CALL reach the console (box.cfg, box.remove, the set's UUID): admin only."""
        if not self._rights.admin:
            raise RequestError(ErrorCode.ACCESS_DENIED, f"Execute access to {what} is denied for user "
                                                        f"'{self._rights.user}'")

    async def _console(self, expr: str) -> Any:
        try:
            return await console.evaluate(expr, box.namespace(self._node))
        except ConsoleError as exc:
            raise RequestError(ErrorCode.ILLEGAL_PARAMS, str(exc)) from exc

    def _begin(self, frame: Frame, stream: StreamTxn) -> None:
        if frame.stream_id == 0:
            raise RequestError(ErrorCode.UNABLE_TO_PROCESS_OUT_OF_STREAM, "BEGIN needs a STREAM_ID")
        timeout_s = self._node.config["transaction.stream_timeout_s"]
        requested = frame.body.get(Key.TIMEOUT)
        if isinstance(requested, (int, float)) and not isinstance(requested, bool) and requested > 0:
            timeout_s = min(timeout_s, requested)
        try:
            stream.begin(trio.current_time(), _options(frame.body, self._default_level).level, timeout_s)
        except ActiveTransaction as exc:
            raise RequestError(ErrorCode.ACTIVE_TRANSACTION, str(exc)) from exc
        self._reply_ok(frame)

    async def _finish(self, frame: Frame, stream: StreamTxn, *, commit: bool) -> None:
        if frame.stream_id == 0:
            raise RequestError(ErrorCode.UNABLE_TO_PROCESS_OUT_OF_STREAM, "COMMIT and ROLLBACK need a STREAM_ID")
        try:
            decided = stream.finish(commit=commit)
        except Aborted as exc:
            raise _aborted_error(exc) from exc
        captured = decided.captured if decided is not None else None
        if isinstance(captured, Captured) and captured.rows:
            assert decided is not None
            level, writer = decided.level, self._node.writer
            try:
                if level is not Level.ONE:
                    quorum = self._node.quorum
                    started = trio.current_time()
                    if await writer.commit_stream_alone(captured, partial(quorum.decides_alone, level)):
                        quorum.decided_alone(level, None, trio.current_time() - started)
                    else:
                        await writer.check_stream(captured)
                        await self._commit_captured(captured, level)
                else:
                    await writer.commit_stream(captured)
            except TxnConflict as exc:
                raise RequestError(ErrorCode.TRANSACTION_CONFLICT, str(exc)) from exc
            except SqlError as exc:
                raise RequestError(ErrorCode.SQL_EXECUTE, str(exc)) from exc
            except WriteFailed as exc:
                raise RequestError(exc.code, str(exc)) from exc
        self._reply_ok(frame)


def _aborted_error(aborted: Aborted) -> RequestError:
    """What a request of an aborted stream transaction hears, Tarantool's code for why."""
    code = ErrorCode.TRANSACTION_TIMEOUT if aborted.timeout else ErrorCode.TRANSACTION_CONFLICT
    return RequestError(code, aborted.message)


def _resumed(resume: peer_messages.Resume | None, start: ServeStart) -> dict[str, Any]:
    """What `join_serving` says of a joiner's RESUME: where it asked and where it got."""
    if resume is None:
        return {}
    return {"resume_asked_at": resume.offset, "resumed_at": start.offset, "resume_refused": start.refusal or None}


def _column_types(columns: Columns, first_row: list[Any] | None) -> list[tuple[str, str]]:
    """(name, Tarantool type) of each result column: the declared type's, else the type of
    the first row's value (an expression has no declared type), else "any"."""
    return [
        (name, sql_type_name(decl) if decl or first_row is None else _value_type(first_row[i]))
        for i, (name, decl) in enumerate(columns)
    ]


def _value_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bytes):
        return "varbinary"
    return "any"
