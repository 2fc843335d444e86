"""The floor of a QUORUM commit on our stack: three processes on trio with our codec that do
a QUORUM commit's messages and fsyncs and nothing else (no SQL, no capture, no metastore,
no WAL format, no cores). Its latency and CPU per operation are what the protocol's shape
costs on this machine before any of our logic runs; `bench_quorum` drives it with the same
client as our sets.

One commit, as ours makes it (docs/design/quorum.md):

1. the coordinator (member 1) writes its PENDING record and sends PREPARE to both
   participants; each writes the intent record, fsyncs, and answers;
2. once its own fsync and one vote are in (2 of 3), it writes the row and fsyncs;
3. then sends COMMIT to both; each writes the row, fsyncs, and answers;
4. once one participant answered (2 of 3 hold the row durably), the client hears "1 row".

fsyncs are group fsyncs on a thread of their own (`replicaset.runtime.group_sync`, the
metastore's), so concurrent commits share them as ours do. With `nosync` the records are
written and never synced: what the messages alone cost.

    python -m bench.scenarios.noop_quorum 0 participant DIR sync|nosync
    python -m bench.scenarios.noop_quorum 0 coordinator DIR sync|nosync PORT PORT

Each prints `{"event": "listening", "port": N}` and exits on SIGTERM or when its parent is
gone.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
from pathlib import Path
from typing import Any

import trio

from bench.kit.procs import HOST, Proc, start_helper
from bench.kit.report import MIB
from bench.scenarios.noop_server import Execute, run_until_stopped, serve_clients

PREPARE, COMMIT = 100, 101  # request types of this skeleton's own peer protocol
RECORD = b"p" * 64  # a PENDING or PREPARED record: txn id, keys, versions
ROW = b"r" * 160  # a decided row: header and one 100-byte value


class Log:
    """An append-only file whose fsyncs are shared by everyone waiting meanwhile."""

    def __init__(self, path: Path, sync: bool) -> None:
        from replicaset.runtime.group_sync import GroupSync

        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._group = GroupSync(functools.partial(os.fsync, self._fd)) if sync else None

    async def write_durably(self, *records: bytes) -> None:
        os.write(self._fd, b"".join(records))
        if self._group is None:
            await trio.lowlevel.checkpoint()
        else:
            await self._group.covering()


class Outbox:
    """Frames for one stream, sent by one task: every frame queued meanwhile leaves in one
    write (a trio stream refuses two concurrent `send_all`)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._queued: list[bytes] = []
        self._wake = trio.Event()

    def send(self, frame: bytes) -> None:
        self._queued.append(frame)
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            frames, self._queued = self._queued, []
            await self._stream.send_all(b"".join(frames))


def participant(port: int, directory: Path, sync: bool) -> int:
    """Every PREPARE and COMMIT: write the record, fsync, answer with the request's sync."""
    from replicaset.iproto.codec import FrameDecoder, encode_ok

    log = Log(directory / "participant.log", sync)

    async def answer_durably(outbox: Outbox, records: list[bytes], answers: list[bytes]) -> None:
        await log.write_durably(*records)
        outbox.send(b"".join(answers))

    async def serve(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder(16 * MIB)
        outbox = Outbox(stream)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outbox.run)
            while data := await stream.receive_some(64 * 1024):
                decoder.feed(data)
                records, answers = [], []  # what arrived together is synced and answered together
                while (frame := decoder.next_frame()) is not None:
                    records.append(RECORD if frame.request_type == PREPARE else ROW)
                    answers.append(encode_ok(sync=frame.sync, schema_version=1))
                nursery.start_soon(answer_durably, outbox, records, answers)
            nursery.cancel_scope.cancel()

    async def nothing_to_start(nursery: trio.Nursery) -> None:
        del nursery

    return run_until_stopped(port, serve, nothing_to_start)


def coordinator(port: int, directory: Path, sync: bool, peer_ports: list[int]) -> int:
    """Take each client EXECUTE through the two phases above before it is answered."""
    from replicaset.iproto.codec import FrameDecoder, encode_request

    log = Log(directory / "coordinator.log", sync)
    waiting: dict[int, trio.Event] = {}  # sync of a peer request -> set at the first answer
    syncs = itertools.count(1)
    outboxes: list[Outbox] = []

    async def read_answers(stream: trio.SocketStream) -> None:
        decoder = FrameDecoder(16 * MIB)
        while data := await stream.receive_some(64 * 1024):
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                answered = waiting.pop(frame.sync, None)  # the second participant's is late
                if answered is not None:
                    answered.set()

    def ask(request_type: int, body: dict[int, Any]) -> trio.Event:
        """Send a request to both participants: the event is set at the first answer, which
        with the coordinator itself makes 2 of 3, QUORUM."""
        sync = next(syncs)
        answered = waiting[sync] = trio.Event()
        frame = encode_request(request_type, sync, body)
        for outbox in outboxes:
            outbox.send(frame)
        return answered

    async def commit() -> None:
        voted = ask(PREPARE, {0: 1})
        await log.write_durably(RECORD)
        await voted.wait()
        await log.write_durably(ROW)
        await ask(COMMIT, {0: ROW}).wait()

    async def start(nursery: trio.Nursery) -> Execute:
        for peer in peer_ports:
            stream = await trio.open_tcp_stream(HOST, peer)
            outbox = Outbox(stream)
            outboxes.append(outbox)
            nursery.start_soon(outbox.run)
            nursery.start_soon(read_answers, stream)
        return commit

    return serve_clients(port, start)


def start_set(work: Path, name: str, sync: bool) -> list[Proc]:
    """Two participants, then the coordinator (first in the list: the clients' member), each
    in a new directory `work/<name>_<n>`."""
    mode = "sync" if sync else "nosync"
    procs: list[Proc] = []
    try:
        for n in (2, 3):
            directory = work / f"{name}_{n}"
            directory.mkdir()
            procs.append(start_helper(f"{name}_{n}", "bench.scenarios.noop_quorum", directory / "log",
                                      ("participant", str(directory), mode)))
        directory = work / f"{name}_1"
        directory.mkdir()
        procs.insert(0, start_helper(f"{name}_1", "bench.scenarios.noop_quorum", directory / "log",
                                     ("coordinator", str(directory), mode, *(str(p.port) for p in procs))))
    except Exception:
        for proc in procs:
            proc.stop()
        raise
    return procs


class Skeleton:
    """A started skeleton as a load sees a set (`bench.kit.sets.Members`)."""

    def __init__(self, work: Path, name: str, sync: bool) -> None:
        self.name = name
        self.procs = start_set(work, name, sync)
        self.ports = [proc.port for proc in self.procs if proc.port is not None]

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def stop(self) -> list[int | None]:
        return [proc.stop() for proc in self.procs]


def run(work: Path, name: str, sync: bool, seconds: float, warmup_s: float) -> dict[str, Any]:
    """Single-row commits at each connection count on a skeleton of its own, as
    `quorum_writes` loads our sets: `{"loads": {"single": {nconn: load}}, "notes": [...]}`."""
    from bench.kit.client import CONNECTION_COUNTS
    from bench.kit.report import fmt_int, fmt_ms, progress
    from bench.scenarios import quorum_writes

    entry: dict[str, Any] = {"loads": {"single": {}}, "notes": []}
    try:
        skeleton = Skeleton(work, name, sync)
    except Exception as exc:  # noqa: BLE001 - reported in place of the figures
        entry["failure"] = f"{type(exc).__name__}: {exc}"
        return entry
    try:
        for nconn in CONNECTION_COUNTS:
            progress(f"{name}: single {nconn} connection(s), {warmup_s:g} s warm-up + {seconds:g} s")
            load = quorum_writes.run_load(skeleton, "single", nconn, warmup_s, seconds, seed=nconn)
            entry["loads"]["single"][nconn] = load
            if load["errors"] or load["stuck_threads"]:
                entry["notes"].append(f"single {nconn} conn: {load['errors']} errors, {load['stuck_threads']} stuck: "
                                      f"{load['error_samples'][:3]}")
            progress(f"{name}: {fmt_int(load['ops_per_s'])} ops/s, p50 {fmt_ms(load['p50_ns'])} ms")
    finally:
        entry["exit_codes"] = skeleton.stop()
    return entry


if __name__ == "__main__":
    role, directory, synced = sys.argv[2], Path(sys.argv[3]), sys.argv[4] == "sync"
    if role == "participant":
        sys.exit(participant(int(sys.argv[1]), directory, synced))
    sys.exit(coordinator(int(sys.argv[1]), directory, synced, [int(p) for p in sys.argv[5:]]))
