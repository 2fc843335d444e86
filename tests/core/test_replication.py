"""The relay and applier cores driven bare: events in, actions out, no I/O."""

from __future__ import annotations

import pytest

from replicaset.core import replication as repl
from replicaset.core.replicaset import Refusal
from wal import Record, RecordType, VClock


def row(origin: int, lsn: int, txn: int | None = None) -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn or lsn, payload=b"\x80")


# ---------------------------------------------------------------- relay


OWN = 1  # the relaying member; its rows go out only once durable
EVERYTHING = VClock({OWN: 10**9})


def relay_for(subscriber: int = 2, **subscribe) -> repl.Relay:
    relay = repl.Relay(subscriber=subscriber, own=OWN, timeout_s=1.0)
    args = {"vclock": VClock(), "last_txn": {}, "local_txn_at": {}, "log_start": VClock()} | subscribe
    (read,) = relay.subscribe(0.0, **args)
    assert read == repl.ReadLog(subscriber=subscriber, after=relay.sent.to_dict())
    return relay


def sent(actions: list[repl.Action]) -> list[tuple[int, int]]:
    return [(r.origin, r.lsn) for a in actions if isinstance(a, repl.SendRows) for r in a.records]


def test_relay_refuses_a_reused_lsn_naming_origin_lsn_and_both_txns():
    relay = repl.Relay(subscriber=2, own=OWN, timeout_s=1.0)
    refusal = relay.subscribe(0.0, vclock=VClock({1: 7}), last_txn={1: (7, 0xAAA)}, local_txn_at={1: 0xBBB}, log_start=VClock())
    assert isinstance(refusal, repl.Refuse) and refusal.refusal is Refusal.SPLIT_BRAIN and refusal.refusal.final
    assert "origin 1 lsn 7" in refusal.message and "0xaaa" in refusal.message and "0xbbb" in refusal.message
    assert relay.state is repl.RelayState.STOPPED


def test_relay_refuses_rows_it_no_longer_has_instead_of_a_hole():
    relay = repl.Relay(subscriber=2, own=OWN, timeout_s=1.0)
    refusal = relay.subscribe(0.0, vclock=VClock({1: 3}), last_txn={}, local_txn_at={}, log_start=VClock({1: 10}))
    assert isinstance(refusal, repl.Refuse) and refusal.refusal is Refusal.ROWS_UNAVAILABLE
    assert "join again" in refusal.message


def test_relay_ignores_the_subscribers_own_rows_and_local_rows_unless_asked():
    relay = relay_for(log_start=VClock({2: 4}))
    (send,) = relay.rows(1.0, [row(1, 1), row(2, 5), row(0, 1), row(1, 2)], EVERYTHING)
    assert [(r.origin, r.lsn) for r in send.records] == [(1, 1), (1, 2)]
    own = relay_for(include_own=True)
    (send,) = own.rows(1.0, [row(2, 1), row(0, 1)], EVERYTHING)
    assert [(r.origin, r.lsn) for r in send.records] == [(2, 1)]


def test_relay_sends_each_row_once_and_refuses_to_stream_a_hole():
    relay = relay_for(vclock=VClock({1: 2}))
    assert relay.rows(1.0, [row(1, 1), row(1, 2)], EVERYTHING) == []
    (send,) = relay.rows(1.0, [row(1, 2), row(1, 3)], EVERYTHING)
    assert [(r.origin, r.lsn) for r in send.records] == [(1, 3)]
    with pytest.raises(repl.LocalProtocolError, match="hole"):
        relay.rows(1.0, [row(1, 5)], EVERYTHING)


def test_relay_withholds_own_rows_past_the_durable_cut_and_every_row_after_them():
    """FINDINGS F1: a peer must never hold a row of ours an OS crash can take from us."""
    relay = relay_for()
    actions = relay.rows(1.0, [row(3, 1), row(OWN, 1), row(OWN, 2), row(3, 2)], VClock({OWN: 1}))
    assert sent(actions) == [(3, 1), (OWN, 1)]
    assert repl.SyncWal() in actions, "the relay asks for the sync it waits for"
    assert sent(relay.rows(1.0, [row(3, 3)], VClock({OWN: 1}))) == [], "log order: nothing overtakes a withheld row"
    assert repl.SyncWal() not in relay.rows(1.0, [row(3, 4)], VClock({OWN: 1})), "asked once per wait"
    assert sent(relay.synced(2.0, VClock({OWN: 2}))) == [(OWN, 2), (3, 2), (3, 3), (3, 4)]
    assert relay.withheld == []
    relay.check_invariants()


def test_a_relay_that_would_keep_too_many_rows_keeps_none_and_reads_the_log_once_synced():
    relay = relay_for()
    many = [row(OWN, lsn) for lsn in range(1, repl.WITHHELD_ROWS_MAX + 2)]
    assert relay.rows(1.0, many, VClock()) == [repl.SyncWal()]
    assert relay.withheld == [] and relay.behind
    assert relay.rows(1.0, [row(3, 1)], VClock()) == [], "rows are dropped while the log must be re-read"
    assert relay.synced(2.0, VClock({OWN: 5})) == [repl.ReadLog(subscriber=2, after={})]
    assert sent(relay.rows(2.0, many[:6], relay.durable)) == [(OWN, lsn) for lsn in range(1, 6)]
    relay.check_invariants()


def test_a_relay_that_lost_feed_items_reads_the_log_from_what_it_sent():
    relay = relay_for()
    relay.rows(1.0, [row(OWN, 1), row(OWN, 2)], VClock({OWN: 1}))
    assert relay.lost_rows(2.0) == [repl.ReadLog(subscriber=2, after={OWN: 1})]
    assert relay.withheld == []


def test_relay_heartbeats_when_idle_and_drops_a_silent_subscriber():
    relay = relay_for()
    assert relay.tick(0.5, VClock({1: 1})) == []
    (beat,) = relay.tick(1.0, VClock({1: 1}))
    assert isinstance(beat, repl.SendHeartbeat) and beat.vclock == {1: 1}
    relay.ack(1.0, VClock({1: 1}))
    (drop,) = relay.tick(5.5, VClock({1: 1}))
    assert isinstance(drop, repl.Disconnect) and relay.state is repl.RelayState.STOPPED


# ---------------------------------------------------------------- applier


def subscribed_applier(local: VClock, relay: VClock) -> repl.Applier:
    applier = repl.Applier(peer="p", timeout_s=1.0, backoff_max_s=4.0)
    (connect,) = applier.start(0.0)
    assert isinstance(connect, repl.Connect)
    (subscribe,) = applier.connected(0.0, local, {1: (local.get(1), 9)})
    assert isinstance(subscribe, repl.SendSubscribe) and subscribe.last_txn == {1: (local.get(1), 9)}
    applier.subscribed(0.0, relay, local)
    return applier


def test_applier_syncs_then_follows_and_acknowledges_durable_rows():
    applier = subscribed_applier(VClock({1: 1}), VClock({1: 3}))
    assert applier.state is repl.ApplierState.SYNC
    (apply,) = applier.rows_received(0.1, [row(1, 2), row(1, 3)])
    assert isinstance(apply, repl.ApplyRows) and len(apply.records) == 2
    assert not apply.own_allowed and not apply.skip_conflicts
    (ack,) = applier.rows_applied(0.2, VClock({1: 3, 0: 7}))
    assert isinstance(ack, repl.SendAck) and ack.vclock == {1: 3}, "local rows never travel"
    assert applier.state is repl.ApplierState.FOLLOW


def test_an_upstream_removed_from_the_set_is_followed_no_more():
    applier = subscribed_applier(VClock({1: 1}), VClock({1: 3}))
    (disconnect,) = applier.removed(0.1)
    assert isinstance(disconnect, repl.Disconnect) and "removed" in disconnect.reason
    assert applier.state is repl.ApplierState.STOPPED and applier.message == "removed from the replica set"
    assert applier.tick(60.0) == [], "no reconnect, ever"
    applier.check_invariants()
    idle = repl.Applier(peer="p", timeout_s=1.0)
    assert idle.removed(0.0) == [] and idle.state is repl.ApplierState.STOPPED, "no link to close"


def test_the_apply_says_whether_own_rows_are_taken_and_conflicts_skipped():
    applier = repl.Applier(peer="p", timeout_s=1.0, skip_conflict=True)
    applier.start(0.0)
    applier.connected(0.0, VClock(), {}, include_own=True)
    applier.subscribed(0.0, VClock({1: 1}), VClock())
    (apply,) = applier.rows_received(0.1, [row(1, 1)], own_allowed=True)
    assert isinstance(apply, repl.ApplyRows) and apply.own_allowed and apply.skip_conflicts


def test_applier_follows_on_a_heartbeat_once_other_peers_brought_what_it_waited_for():
    """Found by the seed sweep of trace validation (seed 12): a recovering member got its
    rows through another peer and this relay had nothing left to send, so without the
    heartbeat's check it stayed in SYNC and the member never took writes again."""
    applier = subscribed_applier(VClock({1: 1}), VClock({1: 3, 2: 5}))
    (ack,) = applier.heartbeat(0.5, VClock({1: 3, 2: 5}), VClock({1: 2, 2: 5}))
    assert isinstance(ack, repl.SendAck) and applier.state is repl.ApplierState.SYNC
    applier.heartbeat(0.6, VClock({1: 3, 2: 5}), VClock({1: 3, 2: 5}))
    assert applier.state is repl.ApplierState.FOLLOW


def test_applier_backs_off_capped_and_reconnects():
    applier = subscribed_applier(VClock(), VClock())
    delays = []
    now = 0.0
    for _ in range(6):
        applier.disconnected(now, "cut")
        delays.append(applier.retry_at_s - now)
        assert applier.tick(applier.retry_at_s - 0.01) == []
        now = applier.retry_at_s
        (connect,) = applier.tick(now)
        assert isinstance(connect, repl.Connect)
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


def test_applier_disconnects_a_silent_peer_and_stops_on_a_conflict():
    applier = subscribed_applier(VClock(), VClock())
    (drop,) = applier.tick(4.5)
    assert isinstance(drop, repl.Disconnect) and applier.state is repl.ApplierState.DISCONNECTED
    applier = subscribed_applier(VClock(), VClock())
    (stop,) = applier.apply_failed(1.0, "UNIQUE constraint failed")
    assert applier.state is repl.ApplierState.STOPPED and applier.message == "UNIQUE constraint failed"
    applier.check_invariants()
    with pytest.raises(repl.LocalProtocolError):
        applier.rows_received(1.0, [row(1, 1)])


def test_rows_wait_for_their_schema_then_go_with_every_row_received_meanwhile():
    """docs/design/README.md §4.6: a data row waits for the DDL row it was written under, which another
    upstream brings; nothing is lost, nothing reconnects, and no silence timeout runs
    while the applier reads nothing."""
    applier = subscribed_applier(VClock(), VClock({3: 3}))
    (apply,) = applier.rows_received(0.1, [row(3, 1), row(3, 2)])
    assert applier.schema_pending(0.2, (2, 7), apply.records, VClock({3: 1})) == []
    assert applier.rows_received(0.3, [row(3, 3)]) == [], "rows received meanwhile queue behind"
    assert applier.tick(3.0) == [], "waiting is not silence"
    assert applier.schema_check(3.1, VClock({3: 1, 2: 6})) == []
    (again,) = applier.schema_check(3.2, VClock({3: 1, 2: 7}))
    assert isinstance(again, repl.ApplyRows) and [(r.origin, r.lsn) for r in again.records] == [(3, 2), (3, 3)]
    assert applier.waiting is None and applier.state is repl.ApplierState.SYNC
    applier.check_invariants()


def test_rows_whose_schema_never_comes_break_the_link_and_then_stop_the_applier():
    applier = subscribed_applier(VClock(), VClock({3: 1}))
    (apply,) = applier.rows_received(0.0, [row(3, 1)])
    applier.schema_pending(0.0, (2, 7), apply.records, VClock())
    assert applier.schema_check(3.9, VClock()) == []
    (drop,) = applier.tick(4.0)
    assert isinstance(drop, repl.Disconnect) and "3:1 waited too long for its schema 2:7" in drop.reason
    assert applier.state is repl.ApplierState.DISCONNECTED and applier.waiting is None
    assert applier.failed_row == (3, 1)
    for _ in range(repl.APPLY_FAILURES_MAX - 1):
        now = applier.retry_at_s
        applier.tick(now)
        applier.connected(now, VClock(), {})
        applier.subscribed(now, VClock({3: 1}), VClock())
        (apply,) = applier.rows_received(now, [row(3, 1)])
        applier.schema_pending(now, (2, 7), apply.records, VClock())
        (drop,) = applier.schema_check(now + 4.0, VClock())
        assert isinstance(drop, repl.Disconnect)
    assert applier.state is repl.ApplierState.STOPPED
    assert applier.message.startswith(f"row 3:1 failed {repl.APPLY_FAILURES_MAX} times in a row")


def test_rows_that_came_another_way_while_they_waited_are_not_applied_again():
    applier = subscribed_applier(VClock(), VClock({3: 2}))
    (apply,) = applier.rows_received(0.0, [row(3, 1), row(3, 2)])
    applier.schema_pending(0.0, (2, 7), apply.records, VClock())
    assert applier.schema_check(0.5, VClock({2: 7, 3: 2})) == [] and applier.waiting is None


def test_a_lost_link_drops_the_rows_that_waited():
    """The next subscribe asks for them again: the rows kept belong to that link."""
    applier = subscribed_applier(VClock(), VClock({3: 1}))
    (apply,) = applier.rows_received(0.0, [row(3, 1)])
    applier.schema_pending(0.0, (2, 7), apply.records, VClock())
    applier.disconnected(0.6, "cut")
    assert applier.waiting is None and applier.failed_row is None
    applier.check_invariants()


def _reconnect_and_fail(applier: repl.Applier, *, failed_row: tuple[int, int] | None) -> float:
    """Reconnect when the backoff allows, subscribe, and break again; returns that time."""
    now = applier.retry_at_s
    applier.tick(now)
    applier.connected(now, VClock(), {})
    applier.subscribed(now, VClock({1: 9}), VClock())
    applier.disconnected(now, "gap", failed_row=failed_row)
    return now


def test_a_subscribe_that_fails_again_does_not_reset_the_backoff():
    applier = subscribed_applier(VClock(), VClock())
    applier.disconnected(0.0, "broken")
    delays = [applier.retry_at_s]
    for _ in range(3):
        now = _reconnect_and_fail(applier, failed_row=None)
        delays.append(applier.retry_at_s - now)
    assert delays == [1.0, 2.0, 4.0, 4.0]
    now = applier.retry_at_s
    applier.tick(now)
    applier.connected(now, VClock(), {})
    applier.subscribed(now, VClock({1: 1}), VClock())
    applier.rows_applied(now, VClock({1: 1}))
    applier.disconnected(now, "cut")
    assert applier.retry_at_s - now == 1.0, "progress resets the backoff"


def test_a_row_that_breaks_the_link_again_and_again_stops_the_applier_naming_it():
    applier = subscribed_applier(VClock(), VClock())
    applier.disconnected(0.0, "row 1:5 arrived but 1:4 is the next expected", failed_row=(1, 4))
    for _ in range(repl.APPLY_FAILURES_MAX - 2):
        _reconnect_and_fail(applier, failed_row=(1, 4))
        assert applier.state is repl.ApplierState.DISCONNECTED
    _reconnect_and_fail(applier, failed_row=(1, 4))
    assert applier.state is repl.ApplierState.STOPPED
    assert applier.message.startswith(f"row 1:4 failed {repl.APPLY_FAILURES_MAX} times in a row"), applier.message
    applier.check_invariants()


def test_failures_on_different_rows_or_with_progress_between_do_not_add_up():
    applier = subscribed_applier(VClock(), VClock())
    applier.disconnected(0.0, "gap", failed_row=(1, 1))
    for lsn in range(2, 3 * repl.APPLY_FAILURES_MAX):
        _reconnect_and_fail(applier, failed_row=(1, lsn))
    assert applier.state is repl.ApplierState.DISCONNECTED
    now = _reconnect_and_fail(applier, failed_row=(1, 20))
    applier.tick(applier.retry_at_s)
    applier.connected(applier.retry_at_s, VClock(), {})
    applier.subscribed(applier.retry_at_s, VClock({1: 99}), VClock())
    applier.rows_applied(now, VClock({1: 20}))
    assert applier.failed_row is None and applier.failures == 0


def test_a_sync_that_leaves_rows_withheld_asks_for_another():
    relay = relay_for()
    relay.rows(1.0, [row(OWN, 1), row(OWN, 2)], VClock())
    actions = relay.synced(2.0, VClock({OWN: 1}))
    assert sent(actions) == [(OWN, 1)] and repl.SyncWal() in actions


@pytest.mark.parametrize("refusal", list(Refusal))
def test_an_applier_stops_on_a_final_refusal_and_retries_one_a_retry_can_fix(refusal):
    applier = repl.Applier(peer="p", timeout_s=1.0)
    applier.start(0.0)
    applier.connected(0.0, VClock(), {})
    actions = applier.refused(0.5, refusal, "why")
    assert repl.Disconnect(peer="p", reason="why") in actions
    if refusal.final:
        assert applier.state is repl.ApplierState.STOPPED and applier.message == "why"
        assert applier.tick(100.0) == []
    else:
        assert applier.state is repl.ApplierState.DISCONNECTED
        assert applier.tick(100.0) == [repl.Connect(peer="p")]


def test_the_applier_alone_decides_that_a_quiet_peer_is_gone():
    applier = subscribed_applier(VClock({1: 1}), VClock({1: 1}))
    assert applier.tick(3.9) == []
    (gone,) = applier.tick(4.1)
    assert isinstance(gone, repl.Disconnect) and "no message" in gone.reason
    assert applier.state is repl.ApplierState.DISCONNECTED


def test_rows_of_ours_the_subscriber_held_already_are_not_counted_as_sent_past_the_cut():
    """After a restart the WAL's durable cut starts low (nothing is known to be synced), and
    a subscriber that got our rows from a checkpoint holds more than it: that is no breach."""
    relay = relay_for(vclock=VClock({OWN: 405}))
    relay.rows(1.0, [], VClock({OWN: 271}))
    relay.check_invariants()
    assert relay.sent_past(VClock({OWN: 271})) == 0
    assert relay.rows(1.0, [row(OWN, 406)], VClock({OWN: 271})) == [repl.SyncWal()]
    assert sent(relay.synced(2.0, VClock({OWN: 406}))) == [(OWN, 406)]
    assert relay.sent_past(VClock({OWN: 405})) == 1


# ---------------------------------------------------------------- transition tables


@pytest.mark.parametrize(("core", "table"), [(repl.Applier, repl.APPLIER_TRANSITIONS), (repl.Relay, repl.RELAY_TRANSITIONS)])
def test_every_state_has_a_row_and_every_event_in_a_row_is_a_method(core, table):
    assert set(table) == set(type(next(iter(table))))
    events = {event for row in table.values() for event in row}
    assert all(callable(getattr(core, event, None)) for event in events), events


def test_an_event_outside_the_state_s_row_is_refused_and_a_move_outside_it_fails(monkeypatch):
    relay = repl.Relay(subscriber=2, own=OWN, timeout_s=1.0)
    with pytest.raises(repl.LocalProtocolError, match="relay for 2: rows in state subscribe"):
        relay.rows(0.0, [row(1, 1)], EVERYTHING)
    applier = subscribed_applier(VClock(), VClock({1: 1}))
    monkeypatch.setitem(repl.APPLIER_TRANSITIONS[repl.ApplierState.SYNC], "heartbeat",
                        frozenset({repl.ApplierState.SYNC}))
    with pytest.raises(AssertionError, match="heartbeat took state sync to follow"):
        applier.heartbeat(0.1, VClock({1: 1}), VClock({1: 1}))
