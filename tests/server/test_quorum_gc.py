"""The collection of decided transaction records on a running set (Marmot's phase-2 GC,
`[gc]`): records go once every member applied their rows, and a question about a
collected transaction still gets its decision, from the row."""

from __future__ import annotations

from collections.abc import Callable

from replicaset.iproto.client import Client
from replicaset.iproto.constants import Key
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.storage.apply import HLC_SQL_OFFSET
from tests.server.conftest import QUORUM, REPLICASET_UUID, ReplicaSet, quorum_set_of, wait_for

WRITES = 12


def test_decided_records_are_collected_and_a_collected_transaction_is_still_answered(
        replicaset_factory: Callable[..., ReplicaSet]) -> None:
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, "gc.interval_s = 0.2\ngc.min_retention_s = 0\nreplication.delta_sync_threshold_seconds = 0\n")
    with first.client() as client:
        for k in range(WRITES):
            client.execute("INSERT INTO kv(k, v) VALUES (?, 'q')", [k], options=QUORUM)
    rs.wait_converged()
    seen: list[dict] = []

    def all_collected() -> bool:
        seen[:] = [rs.info(m)["synchro"] for m in (first, second, third)]
        return all(synchro["collected"] >= WRITES for synchro in seen)

    try:
        wait_for(all_collected, "every member's records collected")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; synchro: {seen}") from None
    with first.client() as client:
        txn_ids = [row[0] + HLC_SQL_OFFSET for row in client.execute("SELECT txn_id FROM _rs_quorum").rows]
    assert len(txn_ids) >= WRITES

    def ask(txn_id: int) -> object:
        body = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: rs.info(third)["uuid"],
                PeerKey.TXN_ID: txn_id, PeerKey.COORDINATOR: 1}
        with Client.connect("127.0.0.1", first.port) as client:
            return client.call(PeerRequest.TXN_QUERY, body, replica_id=3).body[PeerKey.DECISION]

    assert [ask(txn_id) for txn_id in txn_ids] == ["commit"] * len(txn_ids), "answered by the row"
    assert ask(0x77) == "abort", "a transaction never begun has no row"
    assert rs.info(first)["synchro"]["queue"]["len"] == 0
