"""The metastore records of quorum transactions, kept the same way by both hosts of the
member driver (the server's `QuorumHost` and the simulator).

The cores decide; a record only makes a decision, or a vote, outlive the process. The
order is `replicaset.meta.recovery`'s: the coordinator's PENDING record before any
PREPARE leaves; a participant's intents (inside its `place`), then its PENDING record,
then its answer; a decision, then the release. At start the records are what the cores
are rebuilt from (`restart`): this member's own transactions go back to its coordinator
(committed when the row is here, aborted otherwise), and a pending one whose row is
already here is decided COMMITTED, releasing its intents.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from replicaset.core import quorum as q
from replicaset.member.actions import Action
from replicaset.member.driver import MemberDriver
from replicaset.member.store import MemberStore
from replicaset.meta import txns
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnRecord, TxnStatus


class TxnRecords:
    """One member's transaction records in its metastore."""

    def __init__(self, meta: MetaStore, member: int) -> None:
        self.meta = meta
        self._member = member

    def begun(self, txn_id: int, *, members: frozenset[int], level: q.Level, keys: Iterable[q.Key]) -> None:
        """A transaction this member coordinates, before its PREPARE leaves: a restart finds
        it, and aborts it unless its row is here."""
        txns.put_txn(self.meta, TxnRecord(txn_id=txn_id, coordinator=self._member, members=members, level=level,
                                          status=TxnStatus.PENDING, keys=frozenset(keys)))

    def prepared(self, txn_id: int, *, coordinator: int, members: frozenset[int], keys: Iterable[q.Key]) -> None:
        """A PREPARED answer of ours, before it is sent (a PREPARE sent again finds the
        record there already)."""
        if txns.txn(self.meta, txn_id) is None:
            txns.put_txn(self.meta, TxnRecord(txn_id=txn_id, coordinator=coordinator, members=members,
                                              level=q.Level.QUORUM, status=TxnStatus.PENDING, keys=frozenset(keys)))

    def decided(self, txn_id: int, status: TxnStatus, row: tuple[int, int] | None = None) -> None:
        """A decision learned or taken; a record decided already stays as it is."""
        record = txns.txn(self.meta, txn_id)
        if record is not None and record.status is TxnStatus.PENDING:
            origin, lsn = row if row else (None, None)
            txns.decide(self.meta, txn_id, status, origin=origin, lsn=lsn)

    def rows_applied(self, driver: MemberDriver, now_s: float, rows: Sequence[tuple[int, int, int]]) -> None:
        """Rows `(txn_id, origin, lsn)` of quorum transactions, ours or a peer's, are applied
        here: their records are decided COMMITTED, then the participant releases them."""
        for txn_id, origin, lsn in rows:
            self.decided(txn_id, TxnStatus.COMMITTED, (origin, lsn))
        driver.txn_rows_applied(now_s, [txn_id for txn_id, _, _ in rows])

    def restart(self, driver: MemberDriver, store: MemberStore, now_s: float) -> list[Action]:
        """What a restart left, settled: the participant's pending transactions get a full
        timeout from now, this member's own transactions are rebuilt into its coordinator,
        and pending ones whose row is here are applied."""
        driver.txn_restart(now_s)
        actions: list[Action] = []
        for record in list(txns.records(self.meta)):
            if record.coordinator == self._member:
                actions += driver.txn_recover(now_s, record.txn_id, members=record.members, level=record.level,
                                              aborted=record.status is TxnStatus.ABORTED)
        rows = {record.txn_id: store.quorum_row(record.txn_id) for record in txns.pending(self.meta)}
        self.rows_applied(driver, now_s, [(txn_id, *row) for txn_id, row in rows.items() if row is not None])
        return actions
