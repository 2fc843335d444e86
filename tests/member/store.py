"""A member's store reduced to what the driver reads (a `MemberStore`): a log in order, a
durable cut, and where the log starts. Rows are taken by apply-once admission, as the
engine takes them."""

from __future__ import annotations

from dataclasses import dataclass, field

from replicaset.core.admission import Admission, admit
from replicaset.member import Membership
from replicaset.storage.rows import DmlPayload
from wal import Record, RecordType, VClock

PAYLOAD = DmlPayload(hlc=1, schema_id=(1, 1), rows=[]).pack()


def row(origin: int, lsn: int, txn: int | None = None) -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn or lsn, payload=PAYLOAD)


@dataclass
class Store:
    log: list[Record] = field(default_factory=list)
    durable: VClock = field(default_factory=VClock)
    start: VClock = field(default_factory=VClock)

    @property
    def vclock(self) -> VClock:
        clock = self.start.copy()
        for record in self.log:
            clock.reset(record.origin, record.lsn)
        return clock

    @property
    def pending_vclock(self) -> VClock:
        return self.vclock

    @property
    def durable_vclock(self) -> VClock:
        return self.durable.copy()

    def last_txn(self) -> dict[int, tuple[int, int]]:
        return {r.origin: (r.lsn, r.txn_id) for r in self.log}

    def txn_at(self, origin: int, lsn: int) -> int | None:
        return next((r.txn_id for r in self.log if (r.origin, r.lsn) == (origin, lsn)), None)

    def log_start(self) -> VClock:
        return self.start.copy()

    def write(self, *records: Record) -> list[Record]:
        self.log.extend(records)
        return list(records)

    def take(self, records: tuple[Record, ...], *, own: int, own_allowed: bool) -> list[Record]:
        """Apply-once, as the engine does: copies dropped, our own rows only when allowed."""
        taken = []
        for record in records:
            if record.origin == own and not own_allowed:
                continue
            admission = admit(self.vclock.get(record.origin), record.lsn)
            assert admission is not Admission.GAP, f"a gap reached the store at {record.origin}:{record.lsn}"
            if admission is Admission.NEXT:
                self.log.append(record)
                taken.append(record)
        return taken

    def sync(self) -> None:
        self.durable = self.vclock


def membership(own: int, members: int) -> Membership:
    """A full mesh of `members`, each peer's upstream key its id as a string."""
    return Membership(members=members, upstreams=frozenset(str(p) for p in range(1, members + 1) if p != own),
                      ids={str(p): p for p in range(1, members + 1)})
