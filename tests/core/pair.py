"""Two cores joined by a fake link (h11's ConnectionPair): a relay on an upstream member
and the applier that follows it, with the members reduced to what the cores see.

The upstream holds a log (records in log order) and a durable cut; the downstream holds
the rows it took, admitted by `core.admission` as the engine does. Actions of each core are
carried out at once, in order, and the frames they send are kept (`wire`), so a scenario
can replay, drop or duplicate them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replicaset.core import replication as repl
from replicaset.core.admission import Admission, admit
from wal import Record, RecordType, VClock

UPSTREAM = 1
DOWNSTREAM = 2
TIMEOUT_S = 1.0


def row(origin: int, lsn: int, txn: int | None = None) -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn or lsn, payload=b"\x80")


@dataclass
class Upstream:
    log: list[Record] = field(default_factory=list)
    durable: VClock = field(default_factory=VClock)
    syncs: int = 0

    def write(self, *records: Record) -> None:
        self.log.extend(records)

    def txn_at(self, origin: int, lsn: int) -> int | None:
        return next((r.txn_id for r in self.log if (r.origin, r.lsn) == (origin, lsn)), None)

    def vclock(self) -> VClock:
        clock = VClock()
        for record in self.log:
            clock.reset(record.origin, record.lsn)
        return clock


@dataclass
class Downstream:
    held: list[Record] = field(default_factory=list)

    def vclock(self) -> VClock:
        clock = VClock()
        for record in self.held:
            clock.reset(record.origin, record.lsn)
        return clock

    def take(self, records: tuple[Record, ...]) -> None:
        for record in records:
            admission = admit(self.vclock().get(record.origin), record.lsn)
            assert admission is not Admission.GAP, f"a gap reached the applier at {record.origin}:{record.lsn}"
            if admission is Admission.NEXT:
                self.held.append(record)


@dataclass
class Pair:
    upstream: Upstream = field(default_factory=Upstream)
    downstream: Downstream = field(default_factory=Downstream)
    now_s: float = 0.0
    applier: repl.Applier = field(default_factory=lambda: repl.Applier(peer="up", timeout_s=TIMEOUT_S, backoff_max_s=4.0))
    relay: repl.Relay | None = None
    wire: list[tuple[str, Any]] = field(default_factory=list)
    refusal: repl.Refuse | None = None

    def start(self) -> None:
        self.applier_acts(self.applier.start(self.now_s))

    def at(self, now_s: float) -> Pair:
        self.now_s = now_s
        return self

    # ------------------------------------------------------------ the applier's side

    def applier_acts(self, actions: list[repl.Action]) -> None:
        for action in actions:
            if isinstance(action, repl.Connect):
                last = self.downstream.held[-1] if self.downstream.held else None
                last_txn = {last.origin: (last.lsn, last.txn_id)} if last is not None else {}
                self.applier_acts(self.applier.connected(self.now_s, self.downstream.vclock(), last_txn))
            elif isinstance(action, repl.SendSubscribe):
                self.wire.append(("subscribe", action))
                self._subscribe(action)
            elif isinstance(action, repl.ApplyRows):
                self.downstream.take(action.records)
                self.applier_acts(self.applier.rows_applied(self.now_s, self.downstream.vclock()))
            elif isinstance(action, repl.SendAck):
                self.wire.append(("ack", action))
                if self.relay is not None:
                    self.relay.ack(self.now_s, VClock(action.vclock))
            elif isinstance(action, repl.Disconnect):
                self.wire.append(("disconnect", action))
                self.relay = None

    def _subscribe(self, request: repl.SendSubscribe) -> None:
        relay = repl.Relay(subscriber=DOWNSTREAM, own=UPSTREAM, timeout_s=TIMEOUT_S)
        accepted = relay.subscribe(
            self.now_s,
            vclock=VClock(request.vclock),
            last_txn=request.last_txn,
            local_txn_at={o: self.upstream.txn_at(o, lsn) for o, (lsn, _) in request.last_txn.items()},
            log_start=VClock(),
            include_own=request.include_own,
        )
        if isinstance(accepted, repl.Refuse):
            self.refusal = accepted
            self.applier_acts(self.applier.refused(self.now_s, accepted.refusal, accepted.message))
            return
        self.relay = relay
        self.applier.subscribed(self.now_s, self.upstream.vclock(), self.downstream.vclock())
        self.relay_acts(accepted)

    # ------------------------------------------------------------ the relay's side

    def relay_acts(self, actions: list[repl.Action]) -> None:
        for action in actions:
            relay = self.relay
            assert relay is not None
            if isinstance(action, repl.ReadLog):
                after = VClock(action.after)
                rows = [r for r in self.upstream.log if r.lsn > after.get(r.origin)]
                self.relay_acts(relay.rows(self.now_s, rows, self.upstream.durable))
            elif isinstance(action, repl.SendRows):
                self.wire.append(("rows", action))
                self.deliver(action)
            elif isinstance(action, repl.SendHeartbeat):
                self.wire.append(("heartbeat", action))
                self.applier_acts(self.applier.heartbeat(self.now_s, VClock(action.vclock), self.downstream.vclock()))
            elif isinstance(action, repl.SyncWal):
                self.wire.append(("sync", action))
            elif isinstance(action, repl.Disconnect):
                self.wire.append(("disconnect", action))
                self.relay = None
            relay.check_invariants()

    def deliver(self, send: repl.SendRows) -> None:
        self.applier_acts(self.applier.rows_received(self.now_s, send.records))
        self.applier.check_invariants()

    def flush(self, *records: Record) -> None:
        """The upstream wrote rows: its relay hears of them with the durable cut of now."""
        self.upstream.write(*records)
        if self.relay is not None:
            self.relay_acts(self.relay.rows(self.now_s, records, self.upstream.durable))

    def sync(self) -> None:
        """The upstream's WAL is fsynced: everything written is durable."""
        self.upstream.durable = self.upstream.vclock()
        self.upstream.syncs += 1
        if self.relay is not None:
            self.relay_acts(self.relay.synced(self.now_s, self.upstream.durable))

    def tick(self) -> None:
        self.applier_acts(self.applier.tick(self.now_s))
        if self.relay is not None:
            self.relay_acts(self.relay.tick(self.now_s, self.upstream.vclock()))

    def sent(self, kind: str) -> list[Any]:
        return [payload for what, payload in self.wire if what == kind]

    def held(self) -> list[tuple[int, int]]:
        return [(r.origin, r.lsn) for r in self.downstream.held]
