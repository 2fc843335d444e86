"""Prometheus metrics of one member, served over HTTP on `metrics_listen` (docs/metrics.md).

Theory of operation. A scrape reads the member as it is at that moment, through the
pieces `box.info` is built from (`replication_info`, `synchro_info`, `box.info.gc`, the
engine's vclock and WAL segments), so the endpoint and the console cannot disagree and
nothing is counted twice. Only what exists just as it happens is recorded here as it
happens: how long a client waited for its QUORUM or ALL commit, and why one failed. The
quorum host reports each outcome through its `on_outcome` hook, at the one place the
console's outcomes are counted.

The HTTP side answers one request a connection: the request head is read within
`REQUEST_HEAD_BYTES_MAX` bytes and `READ_TIMEOUT_S`, parsed by plain functions that
touch no socket (`parse_request`, `route`, `encode_response`), answered, and the
connection closed. A bad request gets its 4xx and closes only its own connection. The
connections are tasks of the node's nursery, at most `CONNECTIONS_MAX` at once, and the
collection runs in the trio thread between two steps of the node: no thread, and no
lock to take on state the node's tasks change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from replicaset.core import quorum as q
from replicaset.core.replicaset import Status
from replicaset.core.replication import ApplierState, RelayState
from replicaset.core.swim import MemberState
from replicaset.runtime.errors import RequestError

if TYPE_CHECKING:
    from replicaset.runtime.node import Node

REQUEST_HEAD_BYTES_MAX = 8 * 1024
READ_TIMEOUT_S = 5.0
SEND_TIMEOUT_S = 10.0
CONNECTIONS_MAX = 16
RECEIVE_BYTES = 4096
LINGER_S = 1.0
DRAIN_BYTES_MAX = 64 * 1024
METRICS_PATH = "/metrics"
# From a commit in one group flush to one waiting out `[ddl] lock_lease_seconds`.
LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
OBSERVED_LEVELS = (q.Level.QUORUM, q.Level.ALL)  # ONE commits do not pass through the quorum host
TEXT = "text/plain; charset=utf-8"


# ---------------------------------------------------------------- what a member shows


def failure_reason(error: q.TxnError | RequestError | None, confirmed: bool) -> str | None:
    """Why a client did not hear "committed", or None when it did: refused by a member
    (`conflict`), aborted short of a quorum (`quorum_not_reached`), undecided at the
    deadline (`timeout`), its row not written (`write_failed`), or committed but not held
    durably by the level's members in time (`unconfirmed`)."""
    if error is None:
        return None if confirmed else "unconfirmed"
    if isinstance(error, q.Conflict):
        return "conflict"
    if isinstance(error, q.QuorumNotReached):
        return "quorum_not_reached"
    if isinstance(error, q.Timeout):
        return "timeout"
    return "write_failed"


class NodeMetrics:
    """A member's metrics in a registry of their own: a collector reading the node at
    scrape time, and the commit latencies and failures observed as they happen."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._instance = str(node.identity.instance_id)
        self.registry = CollectorRegistry(auto_describe=False)
        self._latency = Histogram("replicaset_commit_latency_seconds",
                                  "Time a client waited for its committed QUORUM or ALL transaction to be decided and "
                                  "held durably by the level's members", ["instance_id", "level"],
                                  buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self._failures = Counter("replicaset_commit_failures",
                                 "QUORUM and ALL transactions whose client did not hear committed, by reason",
                                 ["instance_id", "level", "reason"], registry=self.registry)
        for level in OBSERVED_LEVELS:
            self._latency.labels(self._instance, level.value)
        self.registry.register(self)

    def observe_outcome(self, level: q.Level, error: q.TxnError | RequestError | None, confirmed: bool,
                        elapsed_s: float) -> None:
        """The quorum host's hook: one client's transaction ended after `elapsed_s`."""
        reason = failure_reason(error, confirmed)
        if reason is None:
            self._latency.labels(self._instance, level.value).observe(elapsed_s)
        else:
            self._failures.labels(self._instance, level.value, reason).inc()

    def render(self, accept: str) -> tuple[bytes, str]:
        """The exposition the scraper's Accept header asks for, and its content type."""
        encoder, content_type = choose_encoder(accept)
        return encoder(self.registry), content_type

    def collect(self) -> Iterator[Metric]:
        node = self._node
        yield from self._identity()
        yield from self._replication(node.replication_info())
        yield from self._synchro(node.quorum.synchro_info())
        yield from self._wal()
        yield from self._gc(node.wal_gc.info())
        if node.swim is not None:
            yield from self._members(node.swim.info())
        runs = self._counter("replicaset_anti_entropy_runs", "Repairs by kind since the member was made, across "
                             "restarts and re-joins: delta (the applier streams), snapshot (a checkpoint transfer) "
                             "or gap (a re-join: the rows were gone everywhere)", "kind")
        for kind, count in node.anti_entropy.info()["runs"].items():
            runs.add_metric([self._instance, kind], count)
        yield runs

    # ---------------------------------------------------------------- families

    def _gauge(self, name: str, doc: str, *labels: str) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=["instance_id", *labels])

    def _counter(self, name: str, doc: str, *labels: str) -> CounterMetricFamily:
        return CounterMetricFamily(name, doc, labels=["instance_id", *labels])

    def _identity(self) -> Iterator[Metric]:
        node, me = self._node, self._instance
        identity = node.identity
        info = self._gauge("replicaset_info", "This member: always 1, its identity in the labels",
                           "instance_uuid", "replicaset_uuid", "version")
        info.add_metric([me, identity.instance_uuid, identity.replicaset_uuid, node.version], 1)
        yield info
        # The driver's word, as of the member's last look at its upstreams (every
        # replication_timeout): box.info.status looks again first, a scrape changes nothing.
        current = node.driver.status(trio.current_time())
        status = self._gauge("replicaset_status", "box.info.status: 1 for the current one", "status")
        for state in Status:
            status.add_metric([me, state.value], 1 if state is current else 0)
        yield status
        vclock = self._gauge("replicaset_vclock",
                             "box.info.vclock: the highest LSN of each origin applied here (origin 0: local rows)",
                             "origin")
        for origin, lsn in sorted(node.engine.vclock.to_dict().items()):
            vclock.add_metric([me, str(origin)], lsn)
        yield vclock

    def _replication(self, replication: dict[int, dict[str, Any]]) -> Iterator[Metric]:
        me = self._instance
        status = self._gauge("replicaset_peer_status",
                             "box.info.replication: the state of the link with each peer, 1 for the current one "
                             "(upstream: our applier, downstream: our relay)", "peer", "direction", "status")
        lag = self._gauge("replicaset_peer_lag_seconds", "box.info.replication lag of each link", "peer", "direction")
        idle = self._gauge("replicaset_peer_idle_seconds", "Seconds since each link last heard from the peer",
                           "peer", "direction")
        states: dict[str, type[ApplierState] | type[RelayState]] = {"upstream": ApplierState, "downstream": RelayState}
        for peer, entry in sorted(replication.items()):
            for direction, kinds in states.items():
                link = entry.get(direction)
                if link is None:
                    continue
                labels = [me, str(peer), direction]
                for state in kinds:
                    status.add_metric([*labels, state.value], 1 if state.value == link["status"] else 0)
                lag.add_metric(labels, link["lag"])
                idle.add_metric(labels, link["idle"])
        yield from (status, lag, idle)

    def _members(self, members: list[dict[str, Any]]) -> Iterator[Metric]:
        """box.info.members: SWIM's view of each member, 1 for its current state."""
        me = self._instance
        state = self._gauge("replicaset_member_state", "SWIM's view of each member: 1 for its current state",
                            "member", "state")
        incarnation = self._gauge("replicaset_member_incarnation", "SWIM incarnation of each member", "member")
        for member in members:
            for value in MemberState:
                state.add_metric([me, str(member["id"]), value.value], 1 if value.value == member["state"] else 0)
            incarnation.add_metric([me, str(member["id"])], member["incarnation"])
        yield from (state, incarnation)

    def _synchro(self, synchro: dict[str, Any]) -> Iterator[Metric]:
        me = self._instance
        commits = self._counter("replicaset_commits",
                                "box.info.synchro outcomes: QUORUM and ALL transactions this member coordinated, by "
                                "level and outcome", "level", "outcome")
        for level, outcomes in sorted(synchro["outcomes"].items()):
            commits.add_metric([me, level, "committed"], outcomes["committed"])
            commits.add_metric([me, level, "failed"], outcomes["failed"])
        yield commits
        gauges = (
            ("replicaset_txn_undecided", "QUORUM and ALL transactions this member coordinates, not decided yet",
             synchro["queue"]["len"]),
            ("replicaset_txn_prepared", "Transactions prepared here and not decided yet", synchro["prepared"]["len"]),
            ("replicaset_txn_intents", "Write intents held here (the DDL lock among them)", synchro["intents"]),
        )
        for name, doc, value in gauges:
            family = self._gauge(name, doc)
            family.add_metric([me], value)
            yield family
        collected = self._counter("replicaset_gc_txn_records_removed",
                                  "Decided transaction records deleted by the collection since start")
        collected.add_metric([me], synchro["collected"])
        yield collected

    def _wal(self) -> Iterator[Metric]:
        me = self._instance
        paths = [path for path, _ in self._node.engine.wal.segments()]
        segments = self._gauge("replicaset_wal_segments", "WAL segment files kept")
        segments.add_metric([me], len(paths))
        size = self._gauge("replicaset_wal_bytes", "Bytes in the WAL segment files kept")
        size.add_metric([me], sum(path.stat().st_size for path in paths))
        yield from (segments, size)

    def _gc(self, gc: dict[str, Any]) -> Iterator[Metric]:
        me = self._instance
        consumers = self._gauge("replicaset_gc_consumer_lsn",
                                "box.info.gc consumers: the LSN of each origin a consumer still needs the WAL from",
                                "consumer", "origin")
        for consumer in gc["consumers"]:
            for origin, lsn in sorted(consumer["vclock"].items()):
                consumers.add_metric([me, consumer["name"], str(origin)], lsn)
        yield consumers
        removed = self._counter("replicaset_gc_removed_segments", "WAL segments removed by GC since start")
        removed.add_metric([me], gc["removed_segments"])
        yield removed
        purged = self._counter("replicaset_gc_tombstones_purged", "Tombstones purged since start")
        purged.add_metric([me], gc["tombstones"]["purged"])
        yield purged


# ---------------------------------------------------------------- HTTP, without a socket


class BadRequest(Exception):
    """The scraper sent something that is not an HTTP request we can read."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    method: str
    target: str
    accept: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    status: HTTPStatus
    content_type: str = TEXT
    body: bytes = b""


def head_end(received: bytes) -> int | None:
    """Where the request head ends (past its blank line), or None while it has not."""
    ends = [i + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (i := received.find(mark)) >= 0]
    return min(ends) if ends else None


def parse_request(head: bytes) -> Request:
    """An HTTP/1.x request head: the request line, then `Name: value` lines."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the request head is not ASCII") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/") or parts[2] not in ("HTTP/1.0",
                                                                                                       "HTTP/1.1"):
        raise BadRequest(f"not an HTTP/1.x request line: {lines[0][:80]!r}")
    accept = ""
    for line in lines[1:]:
        if not line:
            break
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(f"not a header line: {line[:80]!r}")
        if name.lower() == "accept":
            accept = value.strip()
    return Request(method=parts[0], target=parts[1], accept=accept)


def route(request: Request, render: Callable[[str], tuple[bytes, str]]) -> Response:
    """GET (or HEAD) /metrics renders the metrics; anything else is refused."""
    if request.target.partition("?")[0] != METRICS_PATH:
        return Response(status=HTTPStatus.NOT_FOUND, body=b"only /metrics is served here\n")
    if request.method not in ("GET", "HEAD"):
        return Response(status=HTTPStatus.METHOD_NOT_ALLOWED, body=b"GET /metrics\n")
    body, content_type = render(request.accept)
    return Response(status=HTTPStatus.OK, content_type=content_type, body=body)


def encode_response(response: Response, *, head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {response.status.value} {response.status.phrase}\r\n"
            f"Content-Type: {response.content_type}\r\nContent-Length: {len(response.body)}\r\n"
            "Connection: close\r\n\r\n")
    return head.encode("ascii") + (b"" if head_only else response.body)


def _refusal(status: HTTPStatus, why: str) -> Response:
    return Response(status=status, body=why.encode("utf-8", "replace") + b"\n")


# ---------------------------------------------------------------- HTTP over trio


async def _read_request(stream: trio.abc.ReceiveStream, head_bytes_max: int) -> Request:
    received = b""
    while (end := head_end(received)) is None:
        if len(received) > head_bytes_max:
            raise BadRequest(f"the request head is over {head_bytes_max} bytes")
        data = await stream.receive_some(RECEIVE_BYTES)
        if not data:
            raise BadRequest("the connection closed before the end of the request head")
        received += data
    if end > head_bytes_max:
        raise BadRequest(f"the request head is over {head_bytes_max} bytes")
    return parse_request(received[:end])


async def serve_http_connection(
    stream: trio.abc.Stream, render: Callable[[str], tuple[bytes, str]], *,
    head_bytes_max: int = REQUEST_HEAD_BYTES_MAX, read_timeout_s: float = READ_TIMEOUT_S,
    send_timeout_s: float = SEND_TIMEOUT_S, log: Any = None,
) -> None:
    """One request on `stream`, answered, and the stream closed. `render` failing
    answers 500 and is logged."""
    response = _refusal(HTTPStatus.REQUEST_TIMEOUT, f"no request head within {read_timeout_s} s")
    head_only = False
    try:
        with trio.move_on_after(read_timeout_s):
            request = await _read_request(stream, head_bytes_max)
            head_only = request.method == "HEAD"
            try:
                response = route(request, render)
            except Exception as exc:  # a bug in the collection must not stop the member
                if log is not None:
                    log.error("metrics_failed", error=repr(exc), exc_info=exc)
                response = _refusal(HTTPStatus.INTERNAL_SERVER_ERROR, "collecting the metrics failed")
    except BadRequest as exc:
        response = _refusal(HTTPStatus.BAD_REQUEST, str(exc))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await trio.aclose_forcefully(stream)
        return
    await answer_and_close(stream, response, head_only=head_only, send_timeout_s=send_timeout_s)


async def answer_and_close(stream: trio.abc.Stream, response: Response, *, head_only: bool = False,
                           send_timeout_s: float = SEND_TIMEOUT_S) -> None:
    """Send `response` within `send_timeout_s` and close. What the scraper sent beyond
    the head is drained first (up to `DRAIN_BYTES_MAX`, for `LINGER_S`): closing over
    unread bytes resets the connection, and the scraper might lose the answer. A scraper
    that went away is no error."""
    try:
        with trio.move_on_after(send_timeout_s):
            await stream.send_all(encode_response(response, head_only=head_only))
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
        drained = 0
        with trio.move_on_after(LINGER_S):
            while drained < DRAIN_BYTES_MAX and (data := await stream.receive_some(RECEIVE_BYTES)):
                drained += len(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def serve_metrics(node: Node, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Serve `node`'s metrics on `metrics_listen` until cancelled; observe its quorum
    host's outcomes from now on (the node starts this before it takes any request)."""
    metrics = NodeMetrics(node)
    node.quorum.on_outcome = metrics.observe_outcome
    connections = trio.CapacityLimiter(CONNECTIONS_MAX)

    async def serve_connection(stream: trio.SocketStream) -> None:
        try:
            connections.acquire_nowait()
        except trio.WouldBlock:  # closed at once: an answer would hold one more task for its timeouts
            await trio.aclose_forcefully(stream)
            return
        try:
            await serve_http_connection(stream, metrics.render, log=node.log)
        finally:
            connections.release()

    address = node.config.metrics_listen
    host, port = _host_port(address)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on metrics_listen = {address}: {exc.strerror}") from exc
    sockname = listeners[0].socket.getsockname()
    node.log.info("metrics_listening", listen=f"{sockname[0]}:{sockname[1]}", path=METRICS_PATH)
    task_status.started(sockname[1])
    await trio.serve_listeners(serve_connection, listeners)
