"""Quorum transactions on the server (docs/design/README.md §4.5): the host of the member driver's
coordinator and participant.

Theory of operation. The cores decide; this module does what their actions say and
reports what followed. A client's QUORUM or ALL transaction is captured by the writer
(its rows and the versions read, rolled back) and begun in the driver; its PENDING
record is synced in the metastore while PREPARE goes out, and its row waits for it.
PREPARE, COMMIT (the exact WAL row), ABORT, the question for a decision and the
heartbeat travel on one request/response link per peer, opened on first use. The decision to commit is the coordinator's own WAL row,
written through the apply path with the txn id inside it (`_rs_quorum` keeps it with the
row, atomically); flushed rows of quorum transactions, ours or a peer's, release the
intents they held. The client hears once the level's members hold the row durably: the
COMMIT answers and the relays' acknowledgements both say so.

Metastore writes follow `replicaset.meta.recovery`'s order: intents (inside the
participant's `place`), the PENDING record (both synced by one group fsync with the
records written meanwhile, `group_sync.py`), then the answer; the decision, then the
release.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import trio

from replicaset.config import Config, dial_address
from replicaset.core import quorum as q
from replicaset.core.admission import Admission, admit
from replicaset.iproto import peer_messages
from replicaset.iproto.codec import Frame, FrameDecoder, encode_request
from replicaset.iproto.constants import ErrorCode, Key
from replicaset.iproto.errors import RemoteProtocolError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.identity import Identity
from replicaset.member import Action, MemberDriver, QuorumAction
from replicaset.member.txn_records import TxnRecords
from replicaset.meta.recovery import recover_participant
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnStatus
from replicaset.runtime.clock import WallClock, now_ms
from replicaset.runtime.environment import Environment
from replicaset.runtime.errors import RequestError
from replicaset.runtime.group_sync import GroupSync
from replicaset.runtime.links import RECEIVE_BYTES, PeerError, PeerLink
from replicaset.runtime.relay import record_bytes
from replicaset.runtime.peer_access import PeerCredentials
from replicaset.storage import ApplyError, Captured, Engine, SqlError
from replicaset.storage.keys import SCHEMA_KEY
from replicaset.runtime.disk import DiskFull, DiskGuard
from replicaset.runtime.writer import WriteFailed, Writer
from wal import Record, WalError

META_DIR = "meta"
TICK_S = 0.05
SHOWN_TXNS = 10  # the console lists this many undecided transactions


@dataclass
class _Outcomes:
    """How clients' transactions of one level ended, for the console."""

    committed: int = 0
    failed: int = 0
    last_ms: float | None = None
    max_ms: float = 0.0

    def add(self, committed: bool, elapsed_s: float) -> None:
        if committed:
            self.committed += 1
        else:
            self.failed += 1
        self.last_ms = round(elapsed_s * 1000, 3)
        self.max_ms = max(self.max_ms, self.last_ms)

    def info(self) -> dict[str, Any]:
        return {"committed": self.committed, "failed": self.failed, "last_ms": self.last_ms, "max_ms": self.max_ms}


_Answer = TypeVar("_Answer")
# A reply's body, or how to wait for it beside the connection's other requests.
Reply = dict[int, Any] | Callable[[], Awaitable[dict[int, Any]]]


@dataclass
class _Client:
    """A client waiting for its transaction."""

    done: trio.Event = field(default_factory=trio.Event)
    row: tuple[int, int] | None = None
    barrier: dict[int, int] = field(default_factory=dict)
    error: q.TxnError | RequestError | None = None


class QuorumNode(Protocol):
    """What quorum transactions need of their member: its store, its registered members
    (the peers' requests are checked against them) and a nursery for their tasks."""

    config: Config
    identity: Identity
    data_dir: Path
    driver: MemberDriver
    engine: Engine
    writer: Writer
    disk: DiskGuard
    clock: WallClock
    env: Environment
    peer_credentials: PeerCredentials
    log: Any

    def clock_ms(self) -> int: ...

    def members(self) -> list[tuple[int, str, str]]: ...

    def member_id(self, uuid: str) -> int | None: ...

    def check_replicaset(self, replicaset_uuid: str) -> None: ...

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...


class QuorumHost:
    def __init__(self, node: QuorumNode) -> None:
        self._node = node
        self._id = node.identity.instance_id
        self.meta = MetaStore.open(node.data_dir / META_DIR)
        self.records = TxnRecords(self.meta, self._id)  # kept as the simulator keeps them
        self._clients: dict[int, _Client] = {}
        self._captured: dict[int, Captured] = {}  # our undecided transactions' rows
        self._records: dict[int, Record] = {}  # our decided rows, until COMMIT carries them
        self._links: dict[int, _Link] = {}
        self._outcomes: dict[q.Level, _Outcomes] = {}  # for the console
        # Each client's outcome as it ends (level, error, confirmed durable, seconds): the metrics' histogram.
        self.on_outcome: Callable[[q.Level, q.TxnError | RequestError | None, bool, float], None] | None = None
        self._last_answer_s: dict[int, float] = {}  # each peer's last answer to a PREPARE of ours
        self._meta_sync = GroupSync(self.meta.sync, node.env.workers)  # one fsync for the records written meanwhile
        self._begun: dict[int, trio.Event] = {}  # our PENDING records on their way to disk, for the row
        self._collected = 0  # decided records deleted by the collection since start, for the console
        self._synced = trio.Event()  # set at each sync of our WAL, then replaced
        self._committing: Counter[int] = Counter()  # COMMITs whose row is on its way to our writer, by sender
        self._commit_applied = trio.Event()  # set when one of those is done, then replaced

    def participant(self) -> q.Participant:
        """This member's participant as its metastore left it; it asks about a silent
        coordinator's transaction after four replication timeouts with no heartbeat,
        counted from `run`."""
        return recover_participant(self.meta, self._id, self.participant_timeout_s(), 0.0)

    def participant_timeout_s(self) -> float:
        """Four replication timeouts: how long the participant waits for a silent coordinator."""
        return 4 * self._node.config.replication_timeout

    def close(self) -> None:
        self.meta.close()

    # ---------------------------------------------------------------- start

    def restart(self) -> None:
        """Settle what the last stop left, before this member serves anyone: a request
        served earlier would meet a coordinator that has not rebuilt its transactions yet
        (a client's new transaction, which the rebuild then refuses as known already and
        stops the member; a question answered as if the transaction never began)."""
        self.carry_out(self.records.restart(self._node.driver, self._node.engine, trio.current_time(), self.view()))
        self._node.writer.request_sync()  # rows and decisions the restart found count once durable

    async def run(self) -> None:
        """Tick the cores and send heartbeats."""
        driver = self._node.driver
        gc_interval = float(self._node.config["gc.interval_s"])
        next_heartbeat = trio.current_time() + self._node.config.replication_timeout
        next_gc = trio.current_time() + gc_interval
        while True:
            await trio.sleep(TICK_S)
            if self.meta.failed is not None:  # met where an error costs one request only: the member stops all the same
                raise self.meta.failed
            now = trio.current_time()
            self.carry_out(driver.txn_tick(now))
            if now >= next_heartbeat:
                next_heartbeat = now + self._node.config.replication_timeout  # box.cfg may change it
                self._heartbeats(driver.txn_unfinished())
            if now >= next_gc:
                next_gc = now + gc_interval
                self.collect()

    def collect(self) -> int:
        """Delete the decided transaction records every member has applied, once older than
        `[gc] min_retention_s`, or older than `max_retention_s` whatever the members say."""
        config = self._node.config
        if self._node.disk.poll():  # deletions take room in RocksDB's log too; the next pass makes them
            return 0
        gone = self.records.collect(self._node.driver, trio.current_time(), now_ms=now_ms(self._node.clock),
                                    members=self.view(),
                                    min_retention_ms=int(float(config["gc.min_retention_s"]) * 1000),
                                    max_retention_ms=int(float(config["gc.max_retention_s"]) * 1000))
        if gone:
            self._collected += gone
            self._node.log.info("txn_records_collected", count=gone)
        return gone

    def _heartbeats(self, unfinished: dict[int, frozenset[int]]) -> None:
        by_member: dict[int, list[int]] = {}
        for txn_id, members in unfinished.items():
            for member in members:
                by_member.setdefault(member, []).append(txn_id)
        for member, ids in by_member.items():
            self._spawn(self._send, member, PeerRequest.TXN_HEARTBEAT, {PeerKey.TXN_IDS: ids[:peer_messages.TXN_IDS_MAX]})

    # ---------------------------------------------------------------- the coordinator's client

    async def commit(self, captured: Captured, level: q.Level, timeout_s: float) -> tuple[int, int]:
        """Decide `captured` at `level` and return its row `(origin, lsn)` once the level's
        members hold it durably; a RequestError a client can act on otherwise."""
        client = await self._decide(captured, level, timeout_s)
        assert client.row is not None
        return client.row

    async def commit_change(self, captured: Captured, timeout_s: float) -> tuple[tuple[int, int], dict[int, int]]:
        """A membership change (`_cluster` rows) at QUORUM: its row and the barrier its
        joiner catches up to before it votes (MembershipQuorum R3)."""
        client = await self._decide(captured, q.Level.QUORUM, timeout_s)
        assert client.row is not None
        return client.row, client.barrier

    def decides_alone(self, level: q.Level) -> bool:
        """Whether a transaction at `level` begun now is our own row, durable before the
        answer, with no two-phase commit: a set of one with nothing in flight."""
        return self._node.driver.txn_decides_alone(level, self.view())

    def decided_alone(self, level: q.Level, error: RequestError | None, elapsed_s: float) -> None:
        """How a transaction this member decided by itself ended, counted as the others."""
        self._outcomes.setdefault(level, _Outcomes()).add(error is None, elapsed_s)
        if self.on_outcome is not None:
            self.on_outcome(level, error, error is None, elapsed_s)

    async def _decide(self, captured: Captured, level: q.Level, timeout_s: float) -> _Client:
        node, driver = self._node, self._node.driver
        self._refuse_if_disk_full("quorum transaction")
        start = trio.current_time()
        txn_id = node.engine.hlc.now(node.clock_ms())
        members = self.view()
        reads = {key: q.Version(hlc=v[0], origin=v[1]) if v else q.NO_VERSION for key, v in captured.reads.items()}
        client = self._clients[txn_id] = _Client()
        self._captured[txn_id] = captured
        recorded = self._begun[txn_id] = trio.Event()
        self.records.begun(txn_id, members=members, level=level, keys=reads, sync=False)
        self._spawn(self._record_begun, recorded)
        try:
            self.carry_out(driver.txn_begin(start, txn_id, reads=reads, members=members, level=level,
                                            deadline_s=start + timeout_s))
            with trio.move_on_after(timeout_s + TICK_S * 2):
                await client.done.wait()
            if not client.done.is_set():
                # Past the deadline: a tick now aborts the transaction if it is undecided. A
                # hung process or a slow loop can wake this wait before the ticking task,
                # and the client would hear "committed" of a transaction the tick aborts.
                self.carry_out(driver.txn_tick(trio.current_time()))
        finally:
            del self._clients[txn_id]
            elapsed_s = trio.current_time() - start
            self._outcomes.setdefault(level, _Outcomes()).add(client.error is None and client.done.is_set(), elapsed_s)
            if self.on_outcome is not None:
                self.on_outcome(level, client.error, client.done.is_set(), elapsed_s)
        if isinstance(client.error, RequestError):
            raise client.error
        if client.error is not None:
            raise _client_error(client.error, timeout_s)
        if not client.done.is_set():
            where = f" as row {client.row[0]}:{client.row[1]}" if client.row else ""
            missing = driver.coordinator.not_holding(txn_id)
            naming = f" (not confirmed by members {list(missing)})" if missing else ""
            raise RequestError(ErrorCode.TIMEOUT, f"transaction {txn_id:#x} committed{where}, but fewer than "
                                                  f"{q.needed(level, len(members))} of {len(members)} members "
                                                  f"confirmed it durable within {timeout_s} s{naming}")
        return client

    # ---------------------------------------------------------------- the console

    def synchro_info(self) -> dict[str, Any]:
        """`box.info.synchro`: the quorum on the total membership, the transactions this
        member coordinates and has not decided, those prepared here, the intents held (the
        DDL lock among them), how clients' transactions ended, per level, and the
        metastore's fsyncs since start (each covers the records written meanwhile)."""
        driver, total = self._node.driver, len(self.view())
        participant = driver.participant
        now = trio.current_time()
        undecided = driver.coordinator.undecided()
        coordinators: dict[int, int] = {}
        for pending in participant.pending.values():
            coordinators[pending.coordinator] = coordinators.get(pending.coordinator, 0) + 1
        lock = participant.intents.holder(SCHEMA_KEY)
        lock_holder = participant.pending.get(lock) if lock is not None else None
        return {
            "quorum": q.needed(q.Level.QUORUM, total),
            "total": total,
            "default_consistency": self._node.config["replication.default_write_consistency"].lower(),
            "queue": {
                "len": len(undecided),
                "txns": [{"txn_id": f"{t.txn_id:#x}", "level": t.level.value, "state": t.state.value,
                          "prepared": sorted(t.votes), "conflicts": sorted(t.conflicts),
                          "deadline_in": round(t.deadline_s - now, 3)}
                         for t in undecided[:SHOWN_TXNS]],
            },
            "prepared": {"len": len(participant.pending), "by_coordinator": coordinators},
            "intents": sum(len(keys) for keys in participant.intents.keys.values()),
            "ddl_lock": None if lock is None else {
                "txn_id": f"{lock:#x}", "holder": lock_holder.coordinator if lock_holder is not None else None},
            "outcomes": {level.value: outcomes.info() for level, outcomes in self._outcomes.items()},
            "collected": self._collected,
            "meta_syncs": self._meta_sync.syncs,
        }

    def prepare_info(self, member: int) -> dict[str, Any]:
        """A peer's part in this member's undecided transactions, for
        `box.info.replication`: how many await its answer, how many it prepared or refused,
        and how long ago it last answered a PREPARE."""
        counts = {"awaiting": 0, "prepared": 0, "conflicts": 0}
        for txn in self._node.driver.coordinator.undecided():
            if member not in txn.members:
                continue
            kind = "prepared" if member in txn.votes else "conflicts" if member in txn.conflicts else "awaiting"
            counts[kind] += 1
        heard = self._last_answer_s.get(member)
        return {**counts, "idle": None if heard is None else round(trio.current_time() - heard, 3)}

    def view(self) -> frozenset[int]:
        """The registered members as this member knows them now, itself included."""
        return frozenset(i for i, _, _ in self._node.members()) | {self._id}

    # ---------------------------------------------------------------- actions

    def carry_out(self, actions: Sequence[Action]) -> None:
        for tagged in actions:
            if isinstance(tagged, QuorumAction):
                self._carry_out(tagged.action)

    def _carry_out(self, action: Any) -> None:
        now = trio.current_time()
        if isinstance(action, q.SendPrepare):
            body = {PeerKey.COORDINATOR: self._id, PeerKey.MEMBERS: sorted(action.members),
                    PeerKey.READS: [[t, k, v.hlc, v.origin] for (t, k), v in action.reads.items()]}
            for member in action.to:
                self._spawn(self._prepare, member, action.txn_id, body)
        elif isinstance(action, q.DecideCommit):
            self._spawn(self._write_row, action)
        elif isinstance(action, q.SendCommit):
            self._spawn(self._send_commits, action)
        elif isinstance(action, q.DecideAbort):
            self._node.log.info("txn_aborted", txn_id=action.txn_id, reason=action.reason)
            self._captured.pop(action.txn_id, None)
            recorded = self._begun.pop(action.txn_id, None)
            if recorded is not None and not recorded.is_set():  # decided once its PENDING record is there
                self._spawn(self._decide_when_recorded, recorded, action.txn_id)
            else:
                self.records.decided(action.txn_id, TxnStatus.ABORTED)
        elif isinstance(action, q.SendAbort):
            for member in action.to:
                self._spawn(self._send, member, PeerRequest.TXN_ABORT, {PeerKey.TXN_ID: action.txn_id})
        elif isinstance(action, q.ReleaseIntents):
            self._node.driver.txn_abort(now, action.txn_id)
        elif isinstance(action, q.QueryDecision):
            coordinator = self._node.driver.txn_coordinator(action.txn_id)
            for member in action.ask:
                self._spawn(self._query, member, action.txn_id, coordinator)
        elif isinstance(action, q.QueryRow):
            for member in action.ask:
                self._spawn(self._query_row, member, action.txn_id, action.coordinator)
        elif isinstance(action, q.ResolveRemoved):
            self.records.decided(action.txn_id, TxnStatus.ABORTED)
            self._node.log.warning("txn_resolved_removed", txn_id=action.txn_id, coordinator=action.coordinator,
                                   decision="abort", why="no member of the set holds its row")
        elif isinstance(action, q.AckClient):
            client = self._clients.get(action.txn_id)
            if client is not None:
                client.row = (action.origin, action.lsn)
                client.barrier = dict(action.barrier or {})
                client.done.set()
        elif isinstance(action, q.FailClient):
            client = self._clients.get(action.txn_id)
            if client is not None:
                client.error = action.error
                client.done.set()

    async def commits_settled(self, member: int) -> None:
        """Until no COMMIT of `member` is on its way to our writer: a removed member's
        COMMITs are refused from its removal on, and those taken before are applied."""
        while self._committing[member]:
            await self._commit_applied.wait()

    def rows_flushed(self) -> None:
        """The writer flushed rows: those of quorum transactions are applied here now, and
        count once durable."""
        engine = self._node.engine
        if engine.flushed_quorum_rows and self.records.rows_flushed(
                self._node.driver, trio.current_time(), engine.flushed_quorum_rows, engine.durable_vclock.to_dict()):
            self._node.writer.request_sync()

    async def _until_synced(self, txn_id: int) -> None:
        """Until `txn_id`'s row, applied here, is durable and its intents gone (a sync is
        asked for), or `synchro_timeout_s` passes."""
        self._node.writer.request_sync()
        with trio.move_on_after(self._node.config["replication.synchro_timeout_s"]):
            while self.records.awaits_sync(txn_id):
                await self._synced.wait()

    def synced(self) -> None:
        """Our WAL is durable further: rows applied here count, and our own acknowledgement
        goes to our transactions."""
        now, durable = trio.current_time(), self._node.engine.durable_vclock.to_dict()
        self.records.synced(self._node.driver, now, durable)
        self._synced.set()
        self._synced = trio.Event()
        self.carry_out(self._node.driver.txn_durable(now, self._id, durable))

    # ---------------------------------------------------------------- the coordinator's tasks

    async def _record_begun(self, recorded: trio.Event) -> None:
        """The PENDING record, written, synced while PREPARE goes out. It need not be
        durable before PREPARE leaves, only before the row: a restart that finds neither
        knows nothing of the transaction and answers ABORT when asked, which is what it
        decides for a record without a row too. A metastore that cannot write stops the
        member, as a WAL that cannot sync does."""
        await self._meta_sync.covering()
        recorded.set()

    async def _decide_when_recorded(self, recorded: trio.Event, txn_id: int) -> None:
        await recorded.wait()
        self.records.decided(txn_id, TxnStatus.ABORTED)

    async def _write_row(self, action: q.DecideCommit) -> None:
        driver = self._node.driver
        captured = self._captured.pop(action.txn_id)
        await self._begun.pop(action.txn_id).wait()
        try:
            record = await self._node.writer.commit_captured(captured, txn_id=action.txn_id, min_stamp=action.min_stamp)
        except (ApplyError, SqlError, WriteFailed) as exc:
            self._node.log.error("txn_row_failed", txn_id=action.txn_id, error=str(exc))
            client = self._clients.get(action.txn_id)
            if client is not None:
                client.error = RequestError(ErrorCode.WAL_IO, f"the transaction's row could not be written: {exc}")
                client.done.set()
            self.carry_out(driver.txn_write_failed(trio.current_time(), action.txn_id))
            return
        client = self._clients.get(action.txn_id)
        if client is not None:
            client.row = (record.origin, record.lsn)
        self._records[action.txn_id] = record
        self.carry_out(driver.txn_committed(trio.current_time(), action.txn_id, record.origin, record.lsn))
        if self._node.engine.durable_vclock.get(record.origin) >= record.lsn:  # wal_mode = fsync
            self.synced()
        else:  # COMMIT carries the row once the sync makes it durable, and our own word comes with it
            self._node.writer.request_sync()

    async def _prepare(self, member: int, txn_id: int, body: dict[int, Any]) -> None:
        vote = await self._answer(member, PeerRequest.TXN_PREPARE, {PeerKey.TXN_ID: txn_id, **body},
                                  peer_messages.txn_vote)
        if vote is None:  # the coordinator core sends it again at its next tick while undecided
            self.carry_out(self._node.driver.txn_undelivered(trio.current_time(), member, txn_id))
            return
        self._last_answer_s[member] = trio.current_time()
        if vote.prepared:
            answer: q.Prepared | q.Conflicted = q.Prepared(
                txn_id=txn_id, held=vote.held.to_dict() if vote.held is not None else None)
        elif vote.conflict is not None:
            table, key, holder, holder_member = vote.conflict
            answer = q.Conflicted(txn_id=txn_id, key=(table, key), holder=holder, holder_member=holder_member)
        else:
            return
        self.carry_out(self._node.driver.txn_answered(trio.current_time(), member, answer))

    async def _send_commits(self, action: q.SendCommit) -> None:
        record = self._records.pop(action.txn_id, None)
        if record is None:
            return
        body = {PeerKey.TXN_ID: action.txn_id, PeerKey.RECORDS: [record_bytes(record)]}
        async with trio.open_nursery() as nursery:
            for member in action.to:
                nursery.start_soon(self._commit_one, member, body)

    async def _commit_one(self, member: int, body: dict[int, Any]) -> None:
        vclock = await self._answer(member, PeerRequest.TXN_COMMIT, body, peer_messages.ack)
        if vclock is not None:
            self.carry_out(self._node.driver.txn_durable(trio.current_time(), member, vclock.to_dict()))

    async def _query(self, member: int, txn_id: int, coordinator: int) -> None:
        decision = await self._answer(member, PeerRequest.TXN_QUERY,
                                      {PeerKey.TXN_ID: txn_id, PeerKey.COORDINATOR: coordinator},
                                      peer_messages.txn_decision)
        if decision is not None:
            self._learned(member, txn_id, coordinator, decision)

    async def _query_row(self, member: int, txn_id: int, coordinator: int) -> None:
        answer = await self._answer(member, PeerRequest.TXN_QUERY_ROW,
                                    {PeerKey.TXN_ID: txn_id, PeerKey.COORDINATOR: coordinator},
                                    peer_messages.txn_row_answer)
        if answer == "no_row":
            self.carry_out(self._node.driver.txn_no_row(trio.current_time(), txn_id, member=member, view=self.view()))
        elif answer is not None:
            self._learned(member, txn_id, coordinator, answer)

    def _learned(self, member: int, txn_id: int, coordinator: int, decision: str) -> None:
        """`member` told us `txn_id`'s decision. One that contradicts what we know costs
        the answer, never the member."""
        try:
            self._node.driver.txn_decision(trio.current_time(), txn_id, q.Decision(decision))
        except q.RemoteProtocolError as exc:
            self._node.log.warning("txn_decision_contradicted", txn_id=txn_id, member=member, error=str(exc))
            return
        if decision == "abort":
            self.records.decided(txn_id, TxnStatus.ABORTED)
        self._node.log.info("txn_decision_learned", txn_id=txn_id, coordinator=coordinator, decision=decision,
                            member=member)

    async def _answer(self, member: int, request_type: int, body: dict[int, Any],
                      decode: Callable[[Frame], _Answer]) -> _Answer | None:
        """The decoded reply of `member`; None when there is none in time, or when it is
        malformed: a peer speaking nonsense loses its answer, never stops this member."""
        reply = await self._request(member, request_type, body)
        if reply is None:
            return None
        try:
            return decode(reply)
        except RemoteProtocolError as exc:
            self._node.log.warning("txn_peer_reply_malformed", member=member, request=PeerRequest(request_type).name,
                                   error=str(exc))
            return None

    async def _send(self, member: int, request_type: int, body: dict[int, Any]) -> None:
        await self._request(member, request_type, body)

    async def _request(self, member: int, request_type: int, body: dict[int, Any]) -> Frame | None:
        """One request to `member` and its reply; None when it cannot be had in time (the
        cores treat a lost message as one that never came)."""
        link = self._links.get(member)
        if link is None:
            address = next((a for i, _, a in self._node.members() if i == member), None)
            if address is None:
                return None
            link = self._links[member] = _Link(self._node, member, address)
        identity = self._node.identity
        body = {Key.REPLICASET_UUID: identity.replicaset_uuid, Key.INSTANCE_UUID: identity.instance_uuid, **body}
        with trio.move_on_after(self._node.config["replication.synchro_timeout_s"]):
            try:
                return await link.request(request_type, body)
            except (PeerError, RemoteProtocolError, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
                self._node.log.info("txn_peer_unreachable", member=member, error=str(exc) or type(exc).__name__)
        address = next((a for i, _, a in self._node.members() if i == member), None)
        if address != link.address and self._links.get(member) is link:
            del self._links[member]  # it restarted elsewhere: the next request goes to its new address
        return None

    def _spawn(self, fn: Any, *args: Any) -> None:
        self._node.spawn(fn, *args)

    # ---------------------------------------------------------------- requests a member serves

    def _refuse_if_disk_full(self, what: str) -> None:
        """New quorum work writes a PENDING record (and intents) to the metastore, which
        stops taking writes at its first failed one: refused while the disk is full, so
        that the room left goes to the decisions and releases already under way."""
        try:
            self._node.disk.check(what)
        except DiskFull as exc:
            raise RequestError(exc.code, str(exc)) from exc

    def _check_sender(self, request: peer_messages.TxnRequest) -> None:
        node = self._node
        node.check_replicaset(request.replicaset_uuid)
        if node.member_id(request.instance_uuid) != request.sender:
            raise RequestError(ErrorCode.UNKNOWN_REPLICA, f"instance {request.instance_uuid} is not registered as id "
                                                          f"{request.sender} in this replica set")

    async def _once_covered(self, body: dict[int, Any]) -> dict[int, Any]:
        """`body`, once a group sync covers the records written before this call."""
        await self._meta_sync.covering()
        return body

    async def serve(self, frame: Frame) -> Reply:
        """A quorum transaction request from a peer, and the body of its reply, or how to
        wait for it. The cores see a link's requests in the order sent; only the wait for
        a PREPARED answer's sync runs beside the link, so that the PREPAREs a coordinator
        sends meanwhile share one fsync instead of queueing one fsync each."""
        node, now = self._node, trio.current_time()
        driver = node.driver
        kind = frame.request_type
        if kind == PeerRequest.TXN_PREPARE:
            prepare = peer_messages.txn_prepare(frame)
            self._check_sender(prepare.request)
            # Before the core places intents: a refusal is no vote, and the coordinator
            # counts its quorum without this member.
            self._refuse_if_disk_full("PREPARE")
            reads = {key: q.Version(hlc=hlc, origin=origin) for key, (hlc, origin) in prepare.reads.items()}
            answer = driver.txn_prepare(now, prepare.request.txn_id, coordinator=prepare.coordinator,
                                        members=prepare.members, reads=reads, view=self.view())
            if isinstance(answer, q.Conflicted) and answer.holder is not None and self.records.awaits_sync(answer.holder):
                # The holder's row is applied here and its intent goes at our next sync: a
                # client that saw the holder committed must not be refused for it.
                await self._until_synced(answer.holder)
                answer = driver.txn_prepare(trio.current_time(), prepare.request.txn_id,
                                            coordinator=prepare.coordinator, members=prepare.members, reads=reads,
                                            view=self.view())
            if isinstance(answer, q.Prepared):
                # The PENDING record, beside the intents the core just placed; the answer
                # counts once durable. A PREPARE sent again finds the record and waits for
                # a sync that covers it.
                self.records.prepared(answer.txn_id, sync=False, coordinator=prepare.coordinator,
                                      members=prepare.members, keys=reads)
                vote: dict[int, Any] = {PeerKey.VOTE: "prepared"}
                if answer.held is not None:
                    vote[PeerKey.HELD] = answer.held
                return partial(self._once_covered, vote)
            if isinstance(answer, q.Conflicted):
                table, key = answer.key
                return {PeerKey.VOTE: "conflict", PeerKey.CONFLICT: [table, key, answer.holder, answer.holder_member]}
            return {PeerKey.VOTE: None}
        if kind == PeerRequest.TXN_COMMIT:
            request, record = peer_messages.txn_commit(frame)
            self._check_sender(request)
            if record.origin != request.sender:
                raise RequestError(ErrorCode.PROTOCOL, f"COMMIT from {request.sender} carries a row of {record.origin}")
            driver.txn_heartbeat(now, request.txn_id)
            if admit(node.engine.pending_vclock.get(record.origin), record.lsn) is Admission.NEXT:
                self._committing[request.sender] += 1
                try:
                    await node.writer.apply([record], took=partial(driver.txn_commit_took, now) if driver.tracing
                                            else None)
                except (ApplyError, WriteFailed, WalError) as exc:  # the relay brings the row again
                    node.log.info("txn_commit_row_deferred", txn_id=request.txn_id, error=str(exc))
                finally:
                    self._committing[request.sender] -= 1
                    self._commit_applied.set()
                    self._commit_applied = trio.Event()
            return {Key.VCLOCK: node.engine.vclock.to_dict()}
        request = peer_messages.txn_request(frame, PeerRequest(kind).name)
        self._check_sender(request)
        if kind == PeerRequest.TXN_ABORT:
            driver.txn_abort(now, request.txn_id)
            self.records.decided(request.txn_id, TxnStatus.ABORTED)
            return {}
        if kind == PeerRequest.TXN_HEARTBEAT:
            for txn_id in request.txn_ids:
                driver.txn_heartbeat(now, txn_id)
            return {}
        if kind == PeerRequest.TXN_QUERY_ROW:
            _, coordinator = peer_messages.txn_query(frame, "QUERY_ROW")
            actions = driver.txn_row_query(now, request.txn_id, coordinator=coordinator, asker=request.sender,
                                           view=self.view())
            answer = next((a.action for a in actions if isinstance(a, QuorumAction)), None)
            if isinstance(answer, q.NoRow):
                return {PeerKey.DECISION: "no_row"}
            return {PeerKey.DECISION: answer.decision.value if isinstance(answer, q.SendDecision) else None}
        assert kind == PeerRequest.TXN_QUERY
        _, coordinator = peer_messages.txn_query(frame)
        actions = driver.txn_query(now, request.txn_id, coordinator=coordinator, asker=request.sender)
        answer = next((a.action for a in actions if isinstance(a, QuorumAction) and isinstance(a.action, q.SendDecision)),
                      None)
        self.carry_out([a for a in actions if not (isinstance(a, QuorumAction) and isinstance(a.action, q.SendDecision))])
        return {PeerKey.DECISION: answer.decision.value if answer is not None else None}


def _client_error(error: q.TxnError, timeout_s: float) -> RequestError:
    if isinstance(error, q.Conflict) and error.key == q.MEMBERSHIP_KEY:
        why = (f"a member still holds transaction {error.holder:#x} of an older membership"
               if error.holder is not None else
               "members see different memberships (a join is under way or not applied everywhere yet) or the "
               "refusing member has not caught up since it joined")
        return RequestError(ErrorCode.TRANSACTION_CONFLICT, f"Transaction has been aborted: {why}; retry it")
    if isinstance(error, q.Conflict) and error.key == SCHEMA_KEY:
        if error.holder is None:
            return RequestError(ErrorCode.TRANSACTION_CONFLICT,
                                "the schema changed since this member read it: a DDL statement of another member "
                                "is not applied here yet; retry it")
        holder = f"instance {error.holder_member}" if error.holder_member is not None else "another member"
        return RequestError(ErrorCode.TRANSACTION_CONFLICT,
                            f"DDL lock held by {holder} (transaction {error.holder:#x}); retry once it finishes")
    if isinstance(error, q.Conflict):
        table, key = error.key
        why = (f"it is held by transaction {error.holder:#x}" if error.holder is not None
               else "it changed since it was read")
        return RequestError(ErrorCode.TRANSACTION_CONFLICT,
                            f"Transaction has been aborted by conflict on row {key} of table {table}: {why}; retry it")
    if isinstance(error, q.QuorumNotReached):
        dead = f", members {sorted(error.dead)} are dead (SWIM)" if error.dead else ""
        return RequestError(ErrorCode.QUORUM_WAIT, f"Couldn't wait for quorum {error.needed}: {error.answered} of "
                                                   f"{error.total} members prepared{dead}{_naming(error.unconfirmed)}; "
                                                   "the transaction was aborted")
    return RequestError(ErrorCode.SYNC_QUORUM_TIMEOUT,
                        f"Quorum collection for a synchronous transaction is timed out: {error.answered} of "
                        f"{error.total} members prepared, {error.needed} needed, within {timeout_s} s"
                        f"{_naming(error.unconfirmed)}; the transaction was aborted")


def _naming(unconfirmed: q.Unconfirmed) -> str:
    """Every member the coordinator core found silent, with why: "; not prepared by member
    2 (dead), member 3 (no answer)"."""
    if not unconfirmed:
        return ""
    return "; not prepared by " + ", ".join(f"member {member} ({why.value})" for member, why in unconfirmed)


@dataclass(eq=False)
class _Waiter:
    """One request's reply, or why none comes."""

    done: trio.Event = field(default_factory=trio.Event)
    reply: Frame | Exception | None = None


class _Link:
    """Requests to one peer on one connection, answered by sync, opened on first use and
    again after a loss. The requests made while the link's sending task waits for its turn
    leave in one write: under concurrent transactions, one system call carries many
    PREPAREs or COMMITs instead of one each."""

    def __init__(self, node: QuorumNode, member: int, address: str) -> None:
        self._node = node
        self._member = member
        self._address = address
        self._link: PeerLink | None = None
        self._open_lock = trio.Lock()
        self._outbox = bytearray()
        self._queued = trio.Event()  # set when the outbox holds requests the sending task has not taken
        self._waiting: dict[int, _Waiter] = {}
        self._sync = 0

    @property
    def address(self) -> str:
        return self._address

    async def request(self, request_type: int, body: dict[int, Any]) -> Frame:
        await self._open()
        waiter = _Waiter()
        self._sync += 1
        sync = self._sync
        self._waiting[sync] = waiter  # before sending: the reply may come before the write returns
        try:
            self._outbox += encode_request(request_type, sync, body, replica_id=self._node.identity.instance_id)
            self._queued.set()
            await waiter.done.wait()
        finally:
            self._waiting.pop(sync, None)
        reply = waiter.reply
        if isinstance(reply, Exception):
            raise reply
        assert reply is not None
        if reply.is_error:
            raise PeerError(reply.request_type & 0x7FFF, str(reply.body.get(Key.ERROR_24, "")))
        return reply

    def _deliver(self, sync: int, reply: Frame | Exception) -> None:
        """To the request waiting for `sync`, if any still does; a second reply to one
        request (a confused peer) is dropped."""
        waiter = self._waiting.get(sync)
        if waiter is not None and not waiter.done.is_set():
            waiter.reply = reply
            waiter.done.set()

    async def _open(self) -> PeerLink:
        if self._link is not None:  # no turn at the lock: requests made together leave together
            return self._link
        async with self._open_lock:
            if self._link is None:
                self._link = await PeerLink.open(dial_address(self._node.config, self._address),
                                                 self._node.config.max_frame_bytes, self._node.peer_credentials,
                                                 network=self._node.env.network)
                self._outbox = bytearray()  # a lost link's unsent requests failed with it
                self._node.spawn(self._read, self._link)
                self._node.spawn(self._send, self._link)
            return self._link

    async def _send(self, link: PeerLink) -> None:
        """Writes what the outbox holds, while `link` is the link; a failed write closes
        it, and the reader fails the requests waiting on it."""
        try:
            while True:
                await self._queued.wait()
                self._queued = trio.Event()
                if self._link is not link:
                    return
                if self._outbox:
                    data, self._outbox = bytes(self._outbox), bytearray()
                    await link.stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            await link.aclose()

    async def _read(self, link: PeerLink) -> None:
        decoder: FrameDecoder = link.decoder
        error: Exception = PeerError(ErrorCode.NO_CONNECTION, f"member {self._member} closed the connection")
        try:
            while True:
                frame = decoder.next_frame()
                if frame is None:
                    data = await link.stream.receive_some(RECEIVE_BYTES)
                    if not data:
                        break
                    decoder.feed(data)
                    continue
                self._deliver(frame.sync, frame)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            # ClosedResourceError too: the sending task closes the link when a write fails,
            # and the waiting requests must fail as lost messages, as for any other loss.
            error = PeerError(ErrorCode.NO_CONNECTION, f"the connection to member {self._member} was lost: "
                                                      f"{exc or type(exc).__name__}")
        except RemoteProtocolError as exc:
            error = exc
        finally:
            self._link = None
            self._queued.set()  # the sending task of this link ends
            for sync in list(self._waiting):
                self._deliver(sync, error)
            self._waiting.clear()
            await link.aclose()


