"""The quorum host's link to one peer (`replicaset.runtime.quorum._Link`): when the peer
leaves, or answers nonsense, every request on the link fails with an error the host takes
for a lost message, never one that escapes into the node's nursery and stops the member."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from types import SimpleNamespace
from typing import Any

import trio

from replicaset.core import quorum as q
from replicaset.iproto.codec import Frame, FrameDecoder, encode_greeting, encode_ok
from replicaset.iproto.constants import GREETING_VERSION, Key, RequestType
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.runtime.links import PeerError
from replicaset.runtime.quorum import QuorumHost, _Link
from replicaset.runtime.environment import MACHINE

WAIT_S = 10.0


async def _greet(stream: trio.SocketStream) -> None:
    await stream.send_all(encode_greeting(version=GREETING_VERSION, instance_uuid=str(uuid.uuid4()), salt=bytes(32)))


async def _answer_each(stream: trio.SocketStream, body: Callable[[Frame], dict[int, Any]] = lambda frame: {}) -> None:
    """A fake peer that answers every request with OK and `body` of it."""
    await _greet(stream)
    decoder = FrameDecoder(1 << 20)
    while data := await stream.receive_some():
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            await stream.send_all(encode_ok(sync=frame.sync, schema_version=1, body=body(frame)))


async def _link_to(nursery: trio.Nursery, peer: Callable[[trio.SocketStream], Awaitable[None]]) -> _Link:
    """A link of member 1 to a fake member 2, `peer`, served on a free port."""
    listeners = await nursery.start(trio.serve_tcp, peer, 0)
    port = listeners[0].socket.getsockname()[1]
    node = SimpleNamespace(config=_Config({"cluster.dial": {}}), spawn=nursery.start_soon,
                           identity=SimpleNamespace(instance_id=1), peer_credentials=None, env=MACHINE)
    return _Link(node, 2, f"127.0.0.1:{port}")  # type: ignore[arg-type]


def test_a_request_whose_peer_leaves_before_answering_fails_as_a_lost_message() -> None:
    """A request is on its way when the peer leaves and the link's reader closes the
    link: it fails as a PeerError, which the host treats as a lost message, not as
    trio.ClosedResourceError (which the host did not catch: kill -9 of one member stopped
    another, seen in tests/server/test_quorum_faults.py's bank transfers)."""

    async def main() -> None:
        async def peer(stream: trio.SocketStream) -> None:
            await _greet(stream)
            await stream.receive_some()  # the request came: leave without an answer
            await stream.aclose()

        outcome: list[BaseException | None] = []

        async def request(link: _Link) -> None:
            try:
                await link.request(RequestType.PING, {})
            except Exception as exc:  # whatever it is, the test names it
                outcome.append(exc)
            else:
                outcome.append(None)

        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                link = await _link_to(nursery, peer)
                nursery.start_soon(request, link)
                while not outcome:
                    await trio.sleep(0.001)
                nursery.cancel_scope.cancel()
        assert isinstance(outcome[0], PeerError), outcome

    trio.run(main)


class _SendsFail:
    """A link's stream whose writes fail as a reset connection's do; the rest is the
    real stream's, so closing it ends the reader's wait."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream

    async def send_all(self, data: bytes) -> None:
        raise trio.BrokenResourceError("socket connection broken: [Errno 104] Connection reset by peer")

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def test_a_request_whose_write_fails_fails_as_a_lost_message() -> None:
    """The peer resets the connection as a request is written: the sending task closes
    the link under the reader, whose wait ends with trio.ClosedResourceError. The request
    fails as a PeerError, never with that error, which the host did not catch: it stopped
    member 3 of a chaos run (seed 4242) that was coordinating a transaction."""

    async def main() -> None:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                link = await _link_to(nursery, _answer_each)
                await link.request(RequestType.PING, {})  # the link is open and answered
                assert link._link is not None
                link._link.stream = _SendsFail(link._link.stream)  # type: ignore[assignment]
                try:
                    await link.request(RequestType.PING, {})
                except Exception as exc:  # whatever it is, the test names it
                    outcome: BaseException | None = exc
                else:
                    outcome = None
                nursery.cancel_scope.cancel()
        assert isinstance(outcome, PeerError), repr(outcome)
        assert "member 2" in str(outcome), outcome

    trio.run(main)


def test_requests_made_together_leave_in_one_write_and_each_gets_its_own_answer() -> None:
    """Eight transactions' PREPAREs made in one turn of the event loop: one write carries
    them all (a system call each was a fifth of a coordinator's CPU), and each request
    still gets the answer to its own sync."""

    async def main() -> None:
        peer = partial(_answer_each, body=lambda frame: {Key.DATA: [frame.body[Key.DATA]]})
        answers: dict[int, object] = {}

        async def request(link: _Link, n: int) -> None:
            reply = await link.request(RequestType.PING, {Key.DATA: n})
            answers[n] = reply.body[Key.DATA]

        writes: list[int] = []
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                link = await _link_to(nursery, peer)
                opened = await link._open()
                send_all = opened.stream.send_all

                async def counted(data: bytes) -> None:
                    writes.append(len(data))
                    await send_all(data)

                opened.stream.send_all = counted  # type: ignore[method-assign]
                async with trio.open_nursery() as requests:
                    for n in range(8):
                        requests.start_soon(request, link, n)
                nursery.cancel_scope.cancel()
        assert answers == {n: [n] for n in range(8)}
        assert len(writes) == 1, f"{len(writes)} writes for 8 requests made together: {writes}"

    trio.run(main)


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def info(self, event: str, **fields: object) -> None:
        self.lines.append((event, fields))

    warning = info


class _Config(dict):
    max_frame_bytes = 1 << 20


async def answering_peer(replies: dict[PeerRequest, dict], stream: trio.SocketStream) -> None:
    """A peer that answers each request with the body `replies` gives its type."""
    await _greet(stream)
    decoder = FrameDecoder(1 << 20)
    while data := await stream.receive_some():
        decoder.feed(data)
        while (frame := decoder.next_frame()) is not None:
            await stream.send_all(encode_ok(sync=frame.sync, schema_version=1,
                                            body=replies[PeerRequest(frame.request_type)]))


def host_node(nursery: trio.Nursery, **fields: object) -> SimpleNamespace:
    """What of a Node the quorum host's requests use."""
    return SimpleNamespace(config=_Config({"replication.synchro_timeout_s": WAIT_S, "cluster.dial": {}}), spawn=nursery.start_soon,
                           identity=SimpleNamespace(instance_id=1, replicaset_uuid=str(uuid.uuid4()),
                                                    instance_uuid=str(uuid.uuid4())),
                           log=_Log(), peer_credentials=None, env=MACHINE, **fields)


def test_malformed_answers_to_prepare_commit_and_query_are_dropped_and_the_member_keeps_running() -> None:
    """A peer that answers a PREPARE, a COMMIT or a question with a body that does not
    decode loses its answer: before, the decode raised in the host's task and stopped the
    member."""
    replies = {PeerRequest.TXN_PREPARE: {PeerKey.VOTE: "yes please"},
               PeerRequest.TXN_COMMIT: {Key.VCLOCK: "not a vclock"},
               PeerRequest.TXN_QUERY: {PeerKey.DECISION: 7}}

    async def main() -> None:
        answered: list[object] = []
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(trio.serve_tcp, partial(answering_peer, replies), 0)
                port = listeners[0].socket.getsockname()[1]
                driver = SimpleNamespace(txn_answered=lambda *a: answered.append(a) or [],
                                         txn_durable=lambda *a: answered.append(a) or [],
                                         txn_decision=lambda *a: answered.append(a),
                                         txn_undelivered=lambda *a: [])
                node = host_node(nursery, driver=driver)
                log = node.log
                host = QuorumHost.__new__(QuorumHost)
                host._node, host._last_answer_s = node, {}  # type: ignore[assignment]
                host._links = {2: _Link(node, 2, f"127.0.0.1:{port}")}  # type: ignore[arg-type]
                await host._prepare(2, 0x10, {})
                await host._commit_one(2, {PeerKey.TXN_ID: 0x10})
                await host._query(2, 0x10, 2)
                nursery.cancel_scope.cancel()
        assert answered == [], "no malformed answer reaches the cores"
        malformed = [fields["request"] for event, fields in log.lines if event == "txn_peer_reply_malformed"]
        assert malformed == ["TXN_PREPARE", "TXN_COMMIT", "TXN_QUERY"], log.lines

    trio.run(main)


def test_an_answer_that_contradicts_a_known_decision_is_dropped_and_the_member_keeps_running() -> None:
    """A peer that answers a question about a transaction this member knows committed with
    ABORT (to QUERY or to QUERY_ROW): the participant core refuses it, and the host logs
    it and goes on, rather than letting the refusal end its nursery."""
    replies = {PeerRequest.TXN_QUERY: {PeerKey.DECISION: "abort"},
               PeerRequest.TXN_QUERY_ROW: {PeerKey.DECISION: "abort"}}

    def contradicted(now_s: float, txn_id: int, decision: q.Decision) -> None:
        raise q.RemoteProtocolError(f"transaction {txn_id:#x} is known commit, told {decision.value}")

    async def main() -> None:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(trio.serve_tcp, partial(answering_peer, replies), 0)
                port = listeners[0].socket.getsockname()[1]
                node = host_node(nursery, driver=SimpleNamespace(txn_decision=contradicted))
                log = node.log
                host = QuorumHost.__new__(QuorumHost)
                host._node, host._last_answer_s = node, {}  # type: ignore[assignment]
                host._links = {2: _Link(node, 2, f"127.0.0.1:{port}")}  # type: ignore[arg-type]
                await host._query(2, 0x10, 2)
                await host._query_row(2, 0x10, 2)
                nursery.cancel_scope.cancel()
        dropped = [fields["member"] for event, fields in log.lines if event == "txn_decision_contradicted"]
        assert dropped == [2, 2], log.lines

    trio.run(main)


def test_a_member_that_moved_is_reached_at_its_new_address_after_one_lost_request() -> None:
    """The link to a member was opened at the address `_cluster` had then; once the member
    restarted elsewhere (its row updated), a request that fails makes the next one go to
    the new address, instead of the old one for ever."""

    async def main() -> None:
        with trio.fail_after(WAIT_S):
            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(trio.serve_tcp, partial(answering_peer, {PeerRequest.TXN_QUERY: {}}), 0)
                new = f"127.0.0.1:{listeners[0].socket.getsockname()[1]}"
                gone = trio.socket.socket()
                await gone.bind(("127.0.0.1", 0))
                old = f"127.0.0.1:{gone.getsockname()[1]}"  # bound, never listening: refused
                cluster = [(2, str(uuid.uuid4()), old)]
                node = host_node(nursery, members=lambda: cluster)
                host = QuorumHost.__new__(QuorumHost)
                host._node, host._links = node, {}  # type: ignore[assignment]
                assert await host._request(2, PeerRequest.TXN_QUERY, {}) is None
                assert host._links[2].address == old, "still there: the member did not move"
                assert await host._request(2, PeerRequest.TXN_QUERY, {}) is None
                cluster[0] = (2, cluster[0][1], new)  # it restarted on another port
                assert await host._request(2, PeerRequest.TXN_QUERY, {}) is None, "the old address refuses once more"
                reply = await host._request(2, PeerRequest.TXN_QUERY, {})
                assert reply is not None and host._links[2].address == new
                gone.close()
                nursery.cancel_scope.cancel()

    trio.run(main)
