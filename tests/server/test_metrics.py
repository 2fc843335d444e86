"""The Prometheus endpoint (`metrics_listen`, docs/metrics.md): what a scrape of a running
three-member set shows, and the HTTP handler's bounds (driven in memory, virtual time)."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from replicaset.config import ConfigError, load
from replicaset.core import quorum as q
from replicaset.runtime import metrics
from tests.server.conftest import QUORUM, ReplicaSet, Server, quorum_set_of, wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


# ---------------------------------------------------------------- a running set


def metrics_port(server: Server) -> int:
    """The port the member logged it serves its metrics on (`metrics_listen` port 0)."""
    listen = wait_for(lambda: [e["listen"] for e in server.log_events() if e.get("event") == "metrics_listening"],
                      "metrics_listening in the log")[-1]
    return int(listen.rpartition(":")[2])


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain; version=")
        text = reply.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def pick(samples: Samples, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples called `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return {found: value for (sample, found), value in samples.items() if sample == name and wanted <= found}


def one(samples: Samples, name: str, **labels: str) -> float:
    found = pick(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return next(iter(found.values()))


def quorum_commits(samples: Samples) -> float:
    return sum(pick(samples, "replicaset_commit_latency_seconds_count", level="quorum").values())


def raw_request(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    return reply


def test_a_scrape_shows_each_member_its_vclock_peers_commits_and_wal(
        replicaset_factory: Callable[..., ReplicaSet]) -> None:
    rs, members = quorum_set_of(replicaset_factory, 3, 'metrics_listen = "127.0.0.1:0"\n')
    rs.wait_full_mesh()
    ports = [metrics_port(m) for m in members]
    before = [quorum_commits(scrape(p)) for p in ports]  # member 1 registered the joiners at QUORUM

    for i, member in enumerate(members):
        with member.client() as client:
            for n in range(2):
                client.execute("INSERT INTO kv(k, v) VALUES (?, 'one')", [100 * i + n])
            for n in range(i + 1):
                client.execute("INSERT INTO kv(k, v) VALUES (?, 'quorum')", [100 * i + 50 + n], options=QUORUM)
    rs.wait_converged()

    for i, (member, port) in enumerate(zip(members, ports)):
        info = rs.info(member)
        me = str(info["id"])

        def vclocks_agree() -> Samples | None:
            # a scrape and a box.info are two moments: asked again until nothing moved between them
            samples = scrape(port)
            shown = {int(dict(labels)["origin"]): lsn for labels, lsn in pick(samples, "replicaset_vclock").items()}
            return samples if shown == rs.info(member)["vclock"] else None

        samples = wait_for(vclocks_agree, f"member {me}'s replicaset_vclock equal to its box.info.vclock")
        assert set(pick(samples, "replicaset_info")) == {frozenset({
            ("instance_id", me), ("instance_uuid", info["uuid"]), ("replicaset_uuid", info["cluster"]["uuid"]),
            ("version", info["version"])})}
        assert one(samples, "replicaset_status", status="running") == 1
        assert all(dict(labels)["instance_id"] == me for _, labels in samples)

        peers = {str(m) for m in info["replication"]} - {me}
        assert len(peers) == 2
        for direction in ("upstream", "downstream"):
            following = pick(samples, "replicaset_peer_status", direction=direction, status="follow")
            assert {dict(labels)["peer"]: value for labels, value in following.items()} == dict.fromkeys(peers, 1)
            assert sum(pick(samples, "replicaset_peer_status", direction=direction).values()) == 2, "one state each"
            assert set(pick(samples, "replicaset_peer_lag_seconds", direction=direction)) == {
                frozenset({("instance_id", me), ("peer", p), ("direction", direction)}) for p in peers}

        count = one(samples, "replicaset_commit_latency_seconds_count", level="quorum")
        assert count - before[i] == i + 1, "one observation per QUORUM write coordinated here"
        assert count == one(samples, "replicaset_commits_total", level="quorum", outcome="committed")
        assert one(samples, "replicaset_commit_latency_seconds_bucket", level="quorum", le="+Inf") == count
        assert one(samples, "replicaset_commit_latency_seconds_sum", level="quorum") > 0
        assert one(samples, "replicaset_commit_latency_seconds_count", level="all") == 0
        assert not pick(samples, "replicaset_commit_failures_total")

        assert one(samples, "replicaset_wal_segments") > 0
        assert one(samples, "replicaset_wal_bytes") > 0
        database = pick(samples, "replicaset_gc_consumer_lsn", consumer="database")
        assert {int(dict(labels)["origin"]): lsn for labels, lsn in database.items()} == info["gc"]["consumers"][-1][
            "vclock"]
        assert one(samples, "replicaset_gc_removed_segments_total") == info["gc"]["removed_segments"]
        assert one(samples, "replicaset_gc_tombstones_purged_total") == info["gc"]["tombstones"]["purged"]

        def all_alive() -> bool:
            # SWIM reads `_cluster` once a second: a member that joined last may not be in the view yet
            states = pick(scrape(port), "replicaset_member_state", state="alive")
            return {dict(labels)["member"] for labels, v in states.items() if v} == {"1", "2", "3"}

        wait_for(all_alive, f"member {me}'s replicaset_member_state: three members alive")

    port = ports[0]
    assert raw_request(port, b"\x00\xffgarbage\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw_request(port, b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n").startswith(
        b"HTTP/1.1 400 ")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing", timeout=5)
    assert refused.value.code == 404
    assert one(scrape(port), "replicaset_status", status="running") == 1, "still serving"


def test_metrics_listen_is_off_by_default_and_checked() -> None:
    assert load().metrics_listen == ""
    assert load(overrides={"metrics_listen": "127.0.0.1:0"}).metrics_listen == "127.0.0.1:0"
    with pytest.raises(ConfigError, match="metrics_listen"):
        load(overrides={"metrics_listen": "9100"})


# ---------------------------------------------------------------- the handler, in memory


def render(accept: str) -> tuple[bytes, str]:
    return b"replicaset_up 1\n", "text/plain; version=0.0.4; charset=utf-8"


def exchange(request: bytes, *, send_eof: bool = True, render: Callable[[str], tuple[bytes, str]] = render,
             log: object = None) -> tuple[bytes, float]:
    """The handler's whole answer to `request`, and the virtual seconds it took."""
    reply = bytearray()

    async def main() -> float:
        client, server = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_one, server, render, log)
            await client.send_all(request)
            if send_eof:
                await client.send_eof()
            while data := await client.receive_some(4096):
                reply.extend(data)
            await client.aclose()
        return trio.current_time()

    elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return bytes(reply), elapsed


async def serve_one(stream: trio.abc.Stream, render: Callable[[str], tuple[bytes, str]], log: object) -> None:
    await metrics.serve_http_connection(stream, render, log=log)


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def test_get_metrics_is_answered_and_head_gets_no_body() -> None:
    reply, _ = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert status_of(reply) == 200 and body == b"replicaset_up 1\n"
    assert b"Content-Type: text/plain; version=0.0.4" in head and b"Content-Length: 16" in head
    reply, _ = exchange(b"HEAD /metrics?x=1 HTTP/1.0\n\n")
    assert status_of(reply) == 200 and reply.endswith(b"\r\n\r\n") and b"Content-Length: 16" in reply


@pytest.mark.parametrize("request_bytes, status", [
    (b"garbage\r\n\r\n", HTTPStatus.BAD_REQUEST),
    (b"GET /metrics HTTP/2\r\n\r\n", HTTPStatus.BAD_REQUEST),
    (b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n", HTTPStatus.BAD_REQUEST),
    (b"GET /m\xe9trics HTTP/1.1\r\n\r\n", HTTPStatus.BAD_REQUEST),
    (b"GET /metrics HTTP/1.1\r\n", HTTPStatus.BAD_REQUEST),  # the connection closed mid-head
    (b"GET / HTTP/1.1\r\n\r\n", HTTPStatus.NOT_FOUND),
    (b"POST /metrics HTTP/1.1\r\n\r\n", HTTPStatus.METHOD_NOT_ALLOWED),
])
def test_a_bad_request_is_refused(request_bytes: bytes, status: HTTPStatus) -> None:
    reply, _ = exchange(request_bytes)
    assert status_of(reply) == status


def test_a_request_head_over_the_bound_is_refused_before_it_is_all_read() -> None:
    reply, _ = exchange(b"GET /metrics HTTP/1.1\r\nX: " + b"y" * (10 * metrics.REQUEST_HEAD_BYTES_MAX), send_eof=False)
    assert status_of(reply) == HTTPStatus.BAD_REQUEST and b"over 8192 bytes" in reply


def test_a_silent_scraper_gets_408_at_the_read_timeout() -> None:
    reply, elapsed = exchange(b"GET /metr", send_eof=False)
    assert status_of(reply) == HTTPStatus.REQUEST_TIMEOUT
    assert metrics.READ_TIMEOUT_S <= elapsed < metrics.READ_TIMEOUT_S + metrics.LINGER_S + 0.1


def test_a_failing_collection_answers_500_and_is_logged() -> None:
    logged: list[tuple[str, dict]] = []

    class Log:
        def error(self, event: str, **fields: object) -> None:
            logged.append((event, fields))

    def broken(accept: str) -> tuple[bytes, str]:
        raise KeyError("replication")

    reply, _ = exchange(b"GET /metrics HTTP/1.1\r\n\r\n", render=broken, log=Log())
    assert status_of(reply) == HTTPStatus.INTERNAL_SERVER_ERROR
    assert [event for event, _ in logged] == ["metrics_failed"]


def test_each_failure_has_its_reason() -> None:
    assert metrics.failure_reason(None, True) is None
    assert metrics.failure_reason(None, False) == "unconfirmed"
    assert metrics.failure_reason(q.Conflict(key=("kv", "kv:1"), holder=None), True) == "conflict"
    assert metrics.failure_reason(q.QuorumNotReached(answered=1, needed=2, total=3), True) == "quorum_not_reached"
    assert metrics.failure_reason(q.Timeout(answered=1, needed=2, total=3), True) == "timeout"


def test_a_connection_over_the_bound_is_closed_and_the_others_are_served() -> None:
    """CONNECTIONS_MAX silent scrapers hold every slot: one more is closed unanswered; once
    they go, a scrape is answered again."""
    events: list[tuple[str, dict]] = []

    class Log:
        def info(self, event: str, **fields: object) -> None:
            events.append((event, fields))

    node = SimpleNamespace(identity=SimpleNamespace(instance_id=1), quorum=SimpleNamespace(on_outcome=None),
                           config=SimpleNamespace(metrics_listen="127.0.0.1:0"), log=Log())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            port = await nursery.start(metrics.serve_metrics, node)
            assert node.quorum.on_outcome is not None
            assert events == [("metrics_listening", {"listen": f"127.0.0.1:{port}", "path": "/metrics"})]
            silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(metrics.CONNECTIONS_MAX)]
            await trio.testing.wait_all_tasks_blocked()  # every one accepted and waiting for its head
            extra = await trio.open_tcp_stream("127.0.0.1", port)
            with trio.fail_after(2):
                try:
                    assert await extra.receive_some(4096) == b"", "closed unanswered"
                except trio.BrokenResourceError:
                    pass  # closed by a reset
            for stream in silent:
                await stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
            retried = await trio.open_tcp_stream("127.0.0.1", port)
            await retried.send_all(b"GET /nothing HTTP/1.1\r\n\r\n")
            with trio.fail_after(2):
                assert (await retried.receive_some(4096)).startswith(b"HTTP/1.1 404 ")
            await retried.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)
