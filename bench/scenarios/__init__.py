"""One module per benchmark scenario. Each measures one thing and prints its own section of
the report; the entry scripts (`bench/bench_*.py`) choose the order, the header, the targets
and the notes.

Single instance (`bench_single.py`): `wal_append`, `single_writes` (with `noop_server`, the
ceiling of our stack). Replica set (`bench_replicaset.py`): `set_writes`, `lag`, `join_ours`,
`join_tarantool`. Quorum writes (`bench_quorum.py`): `quorum_writes`, `dqlite_peer`,
`noop_quorum` (the floor), `quorum_timeline`. Spark
audit (`bench_audit.py`): `audit`. Membership and repair (`bench_repair.py`): `repair_transfer`
(over `join_ours`), `delta_sync`, `swim_dead`, `wal_growth`.
"""
