"""A member's participant, rebuilt from its metastore at start (docs/design/README.md §4.5: pending
transactions are recovered and resolved by asking their members).

The host writes in this order: at PREPARE the intents, then the PENDING record (synced,
which makes the intents durable too), then the answer; at a decision the decision, then
the release (neither synced). A crash keeps a prefix of these writes (RocksDB recovers
its one log to a point in time), so it can leave intents whose transaction has no record
(PREPARED was never sent, so no coordinator counted the vote), a decided record whose
intents were not released yet, or a PENDING record whose decision was lost (resolved by
asking, as any pending one): recovery releases the first two kinds, which is the Marmot
rule that a finished transaction's intent may be overwritten, applied once at start.
"""

from __future__ import annotations

from replicaset.core.quorum import Decision, Participant, PendingTxn
from replicaset.meta import txns
from replicaset.meta.intents import StoredIntents
from replicaset.meta.store import MetaStore
from replicaset.meta.txns import TxnStatus

_OUTCOMES = {TxnStatus.COMMITTED: Decision.COMMIT, TxnStatus.ABORTED: Decision.ABORT}


def recover_participant(store: MetaStore, member: int, timeout_s: float, now_s: float) -> Participant:
    """The participant of `member` as its metastore left it. Every pending transaction gets
    a full `timeout_s` from `now_s` before the participant asks about it."""
    pending = {record.txn_id: PendingTxn(coordinator=record.coordinator, members=record.members, heard_s=now_s)
               for record in txns.pending(store)}
    outcomes = {record.txn_id: _OUTCOMES[record.status] for record in txns.records(store)
                if record.status is not TxnStatus.PENDING}
    intents = StoredIntents(store)
    for txn_id in [txn_id for txn_id in intents.keys if txn_id not in pending]:
        intents.release(txn_id)
    return Participant(member=member, timeout_s=timeout_s, intents=intents, pending=pending, outcomes=outcomes)
