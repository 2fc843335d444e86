"""The metastore records of quorum transactions, kept the same way by both hosts of the
member driver (the server's `QuorumHost` and the simulator).

The cores decide; a record only makes a decision, or a vote, outlive the process. The
order is `replicaset.meta.recovery`'s: the coordinator's PENDING record before its row
(the server syncs it while PREPARE goes out; the simulator writes it first); a
participant's intents (inside its `place`), then its PENDING record, then its answer; a
decision, then the release. Two writes per transaction are synced: the coordinator's
PENDING record and a participant's, each before something relies on it (the
participant's also makes its intents durable). A decision is not: lost in a crash, it
is found again, since the row it names is durable before it is recorded (a restart finds
it, `rows_flushed`) and an abort is what a coordinator's restart decides for a
transaction without a row, and what a participant asking about it hears. At start the
records are what the cores are rebuilt from (`restart`): this member's own transactions
go back to its coordinator (committed when the row is here, aborted otherwise), and a
pending one whose row is already here is decided COMMITTED, releasing its intents.
Decided records are collected (`collect`) as Marmot's phase-2 GC does.

A row of a quorum transaction counts as applied here only once an OS crash can no longer
take it from our WAL (under `wal_mode = write`, after the next sync). Released earlier,
an intent could be followed by a PREPARE read at the version the crash brings back, and
a transaction decided on that stale read would overwrite the lost one (a lost update).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from replicaset.core import quorum as q
from replicaset.core.hlc import unpack_stamp
from replicaset.member.actions import Action
from replicaset.member.driver import MemberDriver
from replicaset.member.store import MemberStore
from replicaset.meta import txns
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnRecord, TxnStatus


COLLECT_MAX = 10_000  # records looked at in one pass of the collection, to bound its pause


class TxnRecords:
    """One member's transaction records in its metastore."""

    def __init__(self, meta: MetaStore, member: int) -> None:
        self.meta = meta
        self._member = member
        self._undurable: list[tuple[int, int, int]] = []  # rows applied, not yet beyond an OS crash

    def begun(self, txn_id: int, *, members: frozenset[int], level: q.Level, keys: Iterable[q.Key],
              sync: bool) -> None:
        """A transaction this member coordinates, durable before its row: a restart finds
        it, and aborts it unless its row is here. Without it a restart knows nothing of the
        transaction and answers ABORT when asked, so it need not precede the PREPAREs.
        Without `sync` the caller syncs the metastore before the row (the server's group
        sync)."""
        txns.put_txn(self.meta, TxnRecord(txn_id=txn_id, coordinator=self._member, members=members, level=level,
                                          status=TxnStatus.PENDING, keys=frozenset(keys)), sync=sync)

    def prepared(self, txn_id: int, *, coordinator: int, members: frozenset[int], keys: Iterable[q.Key],
                 sync: bool) -> None:
        """A PREPARED answer of ours, before it is sent: the record, synced, which makes the
        intents just placed durable too (a PREPARE sent again finds the record and syncs).
        Without `sync` the caller syncs the metastore before the answer leaves."""
        try:
            txns.put_txn(self.meta, TxnRecord(txn_id=txn_id, coordinator=coordinator, members=members,
                                              level=q.Level.QUORUM, status=TxnStatus.PENDING, keys=frozenset(keys)),
                         sync=sync)
        except txns.RecordExists:
            if sync:
                self.meta.sync()

    def decided(self, txn_id: int, status: TxnStatus, row: tuple[int, int] | None = None) -> None:
        """A decision learned or taken; a record decided already stays as it is."""
        origin, lsn = row if row else (None, None)
        txns.decide_pending(self.meta, txn_id, status, origin=origin, lsn=lsn, sync=False)

    def collect(self, driver: MemberDriver, now_s: float, *, now_ms: int, members: frozenset[int],
                min_retention_ms: int, max_retention_ms: int) -> int:
        """One pass of Marmot's phase-2 GC: the decided records older than the minimum
        retention (txn ids are HLC stamps, so the scan is in age order and stops at the
        first younger one; at most `COLLECT_MAX` a pass) go to the cores' collection
        (`MemberDriver.txn_collect`), and those it lets go are deleted. How many went."""
        records = []
        for record in txns.records(self.meta):
            if unpack_stamp(record.txn_id)[0] > now_ms - min_retention_ms or len(records) >= COLLECT_MAX:
                break
            if record.status is not TxnStatus.PENDING:
                row = (record.origin, record.lsn) if record.origin is not None and record.lsn is not None else None
                records.append(q.DecidedRecord(record.txn_id, row))
        if not records:
            return 0
        collected = driver.txn_collect(now_s, records, now_ms=now_ms, members=members,
                                       min_retention_ms=min_retention_ms, max_retention_ms=max_retention_ms)
        return txns.forget(self.meta, collected)

    def rows_flushed(self, driver: MemberDriver, now_s: float, rows: Sequence[tuple[int, int, int]],
                     durable: Mapping[int, int]) -> bool:
        """Rows `(txn_id, origin, lsn)` of quorum transactions, ours or a peer's, are applied
        here; those our WAL holds `durable`ly count now, the others at a later `synced`.
        True when some wait for a sync, which the host then asks for."""
        self._undurable += rows
        return self.synced(driver, now_s, durable)

    def awaits_sync(self, txn_id: int) -> bool:
        """Whether `txn_id`'s row is applied here and counts only at the next sync."""
        return any(row[0] == txn_id for row in self._undurable)

    def synced(self, driver: MemberDriver, now_s: float, durable: Mapping[int, int]) -> bool:
        """Our WAL is durable up to `durable`: the rows it covers are decided COMMITTED in
        their records, then the participant releases their intents. True when some still wait."""
        ready = [row for row in self._undurable if row[2] <= durable.get(row[1], 0)]
        if ready:
            self._undurable = [row for row in self._undurable if row[2] > durable.get(row[1], 0)]
            for txn_id, origin, lsn in ready:
                self.decided(txn_id, TxnStatus.COMMITTED, (origin, lsn))
            driver.txn_rows_applied(now_s, [txn_id for txn_id, _, _ in ready])
        return bool(self._undurable)

    def restart(self, driver: MemberDriver, store: MemberStore, now_s: float, view: frozenset[int]) -> list[Action]:
        """What a restart left, settled: the participant's pending transactions get a full
        timeout from now, this member's own transactions are rebuilt into its coordinator,
        and pending ones whose row is here are applied (they count at the host's next sync:
        the WAL an unclean stop left may not be durable)."""
        driver.txn_restart(now_s, view=view)
        actions: list[Action] = []
        for record in list(txns.records(self.meta)):
            if record.coordinator == self._member:
                committed = record.status is TxnStatus.COMMITTED and record.origin is not None and record.lsn is not None
                actions += driver.txn_recover(now_s, record.txn_id, members=record.members, level=record.level,
                                              aborted=record.status is TxnStatus.ABORTED,
                                              committed_at=(record.origin, record.lsn) if committed else None)
        rows = {record.txn_id: store.quorum_row(record.txn_id) for record in txns.pending(self.meta)}
        self._undurable = [(txn_id, *row) for txn_id, row in rows.items() if row is not None]
        self.synced(driver, now_s, store.durable_vclock.to_dict())
        return actions
