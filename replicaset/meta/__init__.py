"""Layer 3, the metastore (docs/design/README.md §3): what a member must remember across a crash besides
its WAL and its SQLite copy. Transaction records and their indexes, write intents with an
in-memory filter in front, replication state per peer, on rocksdict
(`docs/design/metastore.md`). The DDL lock is an intent (`docs/decisions.md`).

It may import `wal` and `replicaset.core`, never the runtime, trio or the storage layer.
"""

from replicaset.meta.filter import IntentFilter
from replicaset.meta.intents import StoredIntents
from replicaset.meta.recovery import recover_participant
from replicaset.meta.repl import put_repl, repl
from replicaset.meta.store import MetaError, MetaStore
from replicaset.meta.txns import TxnRecord, TxnStatus, decide, pending, put_txn, records, txn

__all__ = [
    "IntentFilter", "MetaError", "MetaStore", "StoredIntents", "TxnRecord", "TxnStatus", "decide", "pending",
    "put_repl", "put_txn", "records", "recover_participant", "repl", "txn",
]
