"""The member driver bare: events in, tagged actions and trace lines out, over a store
reduced to a log (`tests/member/store.py`); no engine, no network, no clock."""

from __future__ import annotations

from typing import Any

import pytest

from replicaset.core import replication as repl
from replicaset.core.replicaset import (
    PendingRegistration,
    QuorumReached,
    RecoveryDone,
    RecoveryGaveUp,
    Refusal,
    RegistrationHeld,
    RejoinNeeded,
    ReplicaSet,
)
from replicaset.member import Accepted, Action, ApplierAction, MemberDriver, RelayAction, SetAction
from tests.member.store import Store, membership, row
from wal import VClock

OWN = 2
MEMBERS = 3
SUBSCRIBER = 3


def driver_for(store: Store, *, recovering: bool = False, trace: list[dict[str, Any]] | None = None,
               registration: PendingRegistration | None = None, check_invariants: bool = True) -> MemberDriver:
    return MemberDriver(
        instance_id=OWN,
        store=store,
        replicaset=ReplicaSet(instance_id=OWN, configured_quorum=None, connect_deadline_s=10.0, recovering=recovering,
                              registration=registration),
        membership=lambda: membership(OWN, MEMBERS),
        timeout_s=1.0,
        backoff_max_s=4.0,
        trace=None if trace is None else trace.append,
        check_invariants=check_invariants,
    )


def of_set(actions: list[Action]) -> list[Any]:
    return [a.action for a in actions if isinstance(a, SetAction)]


def of_applier(actions: list[Action], key: str) -> list[repl.Action]:
    assert all(isinstance(a, ApplierAction) and a.key == key for a in actions if not isinstance(a, SetAction))
    return [a.action for a in actions if isinstance(a, ApplierAction)]


def of_relay(actions: list[Action], conn: int) -> list[repl.Action]:
    assert all(isinstance(a, RelayAction) and a.conn == conn for a in actions)
    return [a.action for a in actions if isinstance(a, RelayAction)]


def follow(driver: MemberDriver, key: str, relay_vclock: VClock, now_s: float = 0.0) -> list[Action]:
    driver.applier_start(key, now_s, peer=f"peer-{key}")
    driver.applier_connected(key, now_s)
    return driver.applier_subscribed(key, now_s, relay_vclock)


def events(lines: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(v for k, v in line.items() if k not in ("member", "t", "ops")) for line in lines]


# ---------------------------------------------------------------- appliers


def test_a_recovering_member_asks_for_its_own_rows_takes_them_and_finishes_once_every_peer_answered() -> None:
    store = Store()
    store.write(row(OWN, 1))
    store.sync()
    lines: list[dict[str, Any]] = []
    driver = driver_for(store, recovering=True, trace=lines)
    for key in ("1", "3"):
        assert of_applier(driver.applier_start(key, 0.0, peer=f"peer-{key}"), key) == [repl.Connect(peer=f"peer-{key}")]
        (subscribe,) = of_applier(driver.applier_connected(key, 0.0), key)
        assert subscribe == repl.SendSubscribe(peer=f"peer-{key}", vclock={OWN: 1}, last_txn={OWN: (1, 1)}, include_own=True)
    assert driver.applier_subscribed("1", 0.1, VClock({1: 1, OWN: 3})) == []  # peer 1 holds 2 rows of ours we lost
    (apply,) = of_applier(driver.applier_rows("1", 0.2, [row(1, 1), row(OWN, 2), row(OWN, 3)]), "1")
    assert isinstance(apply, repl.ApplyRows) and apply.own_allowed, "own rows are taken while recovering"
    driver.applier_took("1", 0.2, store.take(apply.records, own=OWN, own_allowed=apply.own_allowed))
    store.sync()
    applied = driver.applier_applied("1", 0.3)
    assert of_applier(applied, "1") == [repl.SendAck(peer="peer-1", vclock={1: 1, OWN: 3})]
    assert of_set(applied) == [] and driver.recovering, "peer 3 has not answered yet"
    lost = driver.applier_link_lost("3", 0.4, "connection refused")
    assert of_set(lost) == [RecoveryGaveUp(upstream="3"), RecoveryDone(not_answered=("3",)), QuorumReached(quorum=1)]
    assert not driver.recovering and driver.write_refusal(0.4) is None
    assert events(lines) == [
        ("RelaySend", 1, 1, 1), ("ApplierReceive", 1, 1), ("RecoveryAnswer", 1),
        ("RecoveryGiveUp", 3), ("RecoveryFinish",),
    ]


def test_own_rows_are_taken_only_while_recovering_and_rows_only_while_subscribed() -> None:
    driver = driver_for(Store())
    driver.applier_start("1", 0.0, peer="p")
    assert driver.applier_rows("1", 0.0, [row(1, 1)]) == [], "not subscribed: nothing to apply"
    (subscribe,) = of_applier(driver.applier_connected("1", 0.0), "1")
    assert isinstance(subscribe, repl.SendSubscribe) and not subscribe.include_own
    driver.applier_subscribed("1", 0.0, VClock({1: 1}))
    (apply,) = of_applier(driver.applier_rows("1", 0.1, [row(OWN, 1)], wall_ms=5000), "1")
    assert isinstance(apply, repl.ApplyRows) and not apply.own_allowed and not apply.skip_conflicts
    assert driver.appliers["1"].lag_s == pytest.approx(5.0), "from the row's stamp (txn id) to its receipt"


def test_rows_taken_are_traced_before_the_flush_and_not_at_all_without_a_trace() -> None:
    lines: list[dict[str, Any]] = []
    driver = driver_for(Store(), trace=lines)
    follow(driver, "1", VClock({1: 2}))
    driver.applier_took("1", 1.5, [row(1, 1), row(3, 1)])
    assert lines == [
        {"event": "RelaySend", "peer": 1, "member": OWN, "origin": 1, "lsn": 1, "t": 1.5},
        {"event": "ApplierReceive", "member": OWN, "origin": 1, "lsn": 1, "ops": [], "t": 1.5},
        {"event": "RelaySend", "peer": 1, "member": OWN, "origin": 3, "lsn": 1, "t": 1.5},
        {"event": "ApplierReceive", "member": OWN, "origin": 3, "lsn": 1, "ops": [], "t": 1.5},
    ]
    quiet = driver_for(Store())
    assert not quiet.tracing
    quiet.applier_took("1", 1.5, [row(1, 1)])


def test_a_lost_link_is_reported_once_and_a_row_that_keeps_breaking_it_stops_the_applier() -> None:
    store = Store()
    driver = driver_for(store)
    follow(driver, "1", VClock({1: 9}))
    assert of_applier(driver.applier_tick("1", 4.5), "1") == [repl.Disconnect(peer="peer-1", reason="no message from peer-1 for 4.5 s")]
    driver.applier_link_lost("1", 4.5, "timed out")
    assert driver.appliers["1"].attempts == 1, "the applier's own Disconnect is not a second loss"
    for attempt in range(repl.APPLY_FAILURES_MAX):
        driver.applier_tick("1", 100.0 * (attempt + 1))
        driver.applier_connected("1", 100.0 * (attempt + 1))
        driver.applier_subscribed("1", 100.0 * (attempt + 1), VClock({1: 9}))
        (apply,) = of_applier(driver.applier_rows("1", 100.0 * (attempt + 1), [row(1, 1), row(1, 3)]), "1")
        assert isinstance(apply, repl.ApplyRows)
        store.log[:] = [row(1, 1)]  # 1:1 taken, 1:3 a gap: the link breaks at 1:3
        driver.applier_link_lost("1", 100.0 * (attempt + 1), "gap", unapplied=apply.records)
    applier = driver.appliers["1"]
    assert applier.state is repl.ApplierState.STOPPED
    assert applier.message is not None and applier.message.startswith(f"row 1:3 failed {repl.APPLY_FAILURES_MAX} times")


def test_rows_waiting_for_their_schema_go_once_the_store_holds_it() -> None:
    """The store took 3:1 and lacks the schema of 3:2; the driver hands the applier what the
    store holds, and the applier gives the rows back once the schema is there."""
    store = Store()
    driver = driver_for(store)
    follow(driver, "3", VClock({3: 2}))
    (apply,) = of_applier(driver.applier_rows("3", 0.1, [row(3, 1), row(3, 2)]), "3")
    store.log.append(row(3, 1))
    assert driver.applier_schema_pending("3", 0.2, (1, 4), apply.records, own_allowed=False) == []
    assert driver.applier_schema_check("3", 0.3) == []
    store.log.extend(row(1, lsn) for lsn in range(1, 5))  # the schema, through another upstream
    (again,) = of_applier(driver.applier_schema_check("3", 0.4), "3")
    assert isinstance(again, repl.ApplyRows) and [(r.origin, r.lsn) for r in again.records] == [(3, 2)]
    assert driver.applier_schema_check("3", 0.5) == [], "nothing waits any more"


def test_a_final_refusal_stops_the_applier_and_rows_unavailable_everywhere_ask_for_a_rejoin() -> None:
    store = Store()
    store.write(row(OWN, 4))
    driver = driver_for(store)
    for key in ("1", "3"):
        driver.applier_start(key, 0.0, peer=key)
        driver.applier_connected(key, 0.0)
        refused = driver.applier_refused(key, 0.1, Refusal.ROWS_UNAVAILABLE, "the log starts later")
        assert of_applier(refused, key) == [repl.Disconnect(peer=key, reason="the log starts later")]
        assert driver.appliers[key].state is repl.ApplierState.STOPPED
    (needed,) = of_set(driver.check_rejoin(1.0, rejoin_timeout_s=5.0))
    assert isinstance(needed, RejoinNeeded)


def test_the_registration_is_held_once_a_majority_with_us_holds_the_row_and_we_hold_the_barrier() -> None:
    """Our `_cluster` row is member 1's (origin 1) at LSN 5, and its voters held origin 1
    up to 6: peer 1 says it holds the row in a heartbeat, subscriber 3 acknowledges it; we
    must hold it too, and then the barrier (MembershipQuorum R3)."""
    store = Store()
    store.write(*(row(1, lsn) for lsn in range(1, 5)))
    driver = driver_for(store, registration=PendingRegistration(origin=1, lsn=5, barrier={1: 6}))
    assert of_set(follow(driver, "1", VClock({1: 4}))) == [QuorumReached(quorum=1)]
    assert of_set(driver.applier_heartbeat("1", 0.1, VClock({1: 5}))) == []
    driver.relay_subscribe(1, 0.1, subscriber=SUBSCRIBER, vclock=VClock({1: 4}), last_txn={}, include_own=False)
    driver.relay_ack(1, 0.2, VClock({1: 5}))
    assert of_set(driver.members_changed(0.2)) == [], "a majority holds it, but not us yet"
    assert "not caught up yet" in (driver.write_refusal(0.2) or "")
    store.write(row(1, 5))
    assert of_set(driver.members_changed(0.3)) == [], "the barrier is further"
    store.write(row(1, 6))
    assert of_set(driver.members_changed(0.4)) == [RegistrationHeld(holders=(1, OWN, SUBSCRIBER), members=MEMBERS)]
    assert driver.write_refusal(0.4) is None


# ---------------------------------------------------------------- relays


def test_a_subscribe_is_refused_from_the_store_facts_or_answered_with_the_replicated_vclock() -> None:
    store = Store(start=VClock({1: 3}))
    store.write(row(1, 4, txn=0xBBB), row(0, 1))
    driver = driver_for(store)
    split = driver.relay_subscribe(7, 0.0, subscriber=SUBSCRIBER, vclock=VClock({1: 4}), last_txn={1: (4, 0xAAA)},
                                   include_own=False)
    assert isinstance(split, repl.Refuse) and split.refusal is Refusal.SPLIT_BRAIN
    gone = driver.relay_subscribe(8, 0.0, subscriber=SUBSCRIBER, vclock=VClock({1: 1}), last_txn={}, include_own=False)
    assert isinstance(gone, repl.Refuse) and gone.refusal is Refusal.ROWS_UNAVAILABLE
    assert driver.relays == {}, "a refused subscriber gets no relay"
    accepted = driver.relay_subscribe(9, 0.0, subscriber=SUBSCRIBER, vclock=VClock({1: 3}), last_txn={}, include_own=False)
    assert accepted == Accepted(vclock={1: 4}, actions=[RelayAction(conn=9, action=repl.ReadLog(subscriber=SUBSCRIBER, after={1: 3}))])
    assert driver.downstream(SUBSCRIBER) is driver.relays[9]


def test_own_rows_wait_for_the_sync_the_relay_asks_for_and_a_sync_that_made_rows_durable_is_traced() -> None:
    store = Store()
    lines: list[dict[str, Any]] = []
    driver = driver_for(store, trace=lines)
    accepted = driver.relay_subscribe(1, 0.0, subscriber=SUBSCRIBER, vclock=VClock(), last_txn={}, include_own=False)
    assert isinstance(accepted, Accepted)
    flushed = driver.flushed(0.1, store.write(row(1, 1), row(OWN, 1), row(1, 2)))
    assert of_relay(flushed, 1) == [repl.SendRows(subscriber=SUBSCRIBER, records=(row(1, 1),)), repl.SyncWal()]
    store.sync()
    synced = driver.synced(0.2, advanced=True)
    assert of_relay(synced, 1) == [repl.SendRows(subscriber=SUBSCRIBER, records=(row(OWN, 1), row(1, 2)))]
    assert driver.synced(0.3, advanced=False) == []
    assert [line["event"] for line in lines] == ["WalFlush", "WalSync"], "a sync that made nothing durable is no step"
    assert lines[1] == {"event": "WalSync", "member": OWN, "t": 0.2}


def test_a_local_commit_and_a_flush_are_traced_with_the_table_the_host_gives() -> None:
    """LocalWrite and WalFlush are the driver's lines too, whichever host runs it; the
    table a WalFlush shows is the host's to compute (only a test kit reads it)."""
    store = Store()
    lines: list[dict[str, Any]] = []
    table = {"kv:1": ["v000001", 1, OWN]}
    driver = MemberDriver(
        instance_id=OWN, store=store,
        replicaset=ReplicaSet(instance_id=OWN, configured_quorum=None, connect_deadline_s=10.0),
        membership=lambda: membership(OWN, MEMBERS), timeout_s=1.0, backoff_max_s=4.0,
        trace=lines.append, traced_table=lambda: table,
    )
    written = store.write(row(OWN, 1))
    driver.committed(0.1, written)
    assert driver.flushed(0.2, written) == [], "no relay to tell"
    assert driver.flushed(0.3, []) == [] and len(lines) == 2, "an empty flush is no step"
    assert lines == [
        {"event": "LocalWrite", "member": OWN, "lsn": 1, "hlc": 1, "ops": [], "t": 0.1},
        {"event": "WalFlush", "member": OWN, "vclock": {1: 0, 2: 1, 3: 0}, "table": table, "t": 0.2},
    ]
    quiet = driver_for(Store())
    quiet.committed(0.1, written)
    quiet.flushed(0.2, written)


def test_time_passes_for_every_applier_and_relay() -> None:
    store = Store()
    store.write(row(1, 1))
    driver = driver_for(store)
    driver.applier_start("1", 0.0, peer="p")
    driver.applier_link_lost("1", 0.0, "refused")
    driver.relay_subscribe(5, 0.0, subscriber=SUBSCRIBER, vclock=VClock(), last_txn={}, include_own=False)
    driver.relay_ack(5, 0.5, VClock())
    ticked = driver.tick(1.0)
    assert ticked == [ApplierAction(key="1", action=repl.Connect(peer="p")),
                      RelayAction(conn=5, action=repl.SendHeartbeat(subscriber=SUBSCRIBER, vclock={1: 1}))]
    driver.relay_closed(5)
    assert driver.relays == {} and driver.relay_tick(5, 2.0) == []


def test_every_event_asserts_the_invariants_a_relay_ahead_of_the_durable_cut_among_them() -> None:
    store = Store()
    driver = driver_for(store)
    driver.relay_subscribe(1, 0.0, subscriber=SUBSCRIBER, vclock=VClock(), last_txn={}, include_own=False)
    store.write(row(OWN, 1))
    store.sync()
    assert of_relay(driver.flushed(0.1, [row(OWN, 1)]), 1) == [repl.SendRows(subscriber=SUBSCRIBER, records=(row(OWN, 1),))]
    store.durable = VClock()  # the store forgot a sync: an OS crash could take what a peer holds
    with pytest.raises(AssertionError, match="past the durable cut"):
        driver.relay_tick(1, 0.2)
    driver.checking = False
    driver.relay_tick(1, 0.3)
