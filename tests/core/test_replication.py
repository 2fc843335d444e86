"""The relay and applier cores driven bare: events in, actions out, no I/O."""

from __future__ import annotations

import pytest

from replicaset.core import replication as repl
from wal import Record, RecordType, VClock


def row(origin: int, lsn: int, txn: int | None = None) -> Record:
    return Record(type=RecordType.DML, origin=origin, lsn=lsn, txn_id=txn or lsn, payload=b"\x80")


# ---------------------------------------------------------------- relay


def relay_for(subscriber: int = 2, **subscribe) -> repl.Relay:
    relay = repl.Relay(subscriber=subscriber, timeout_s=1.0)
    args = {"vclock": VClock(), "last_txn": {}, "local_txn_at": {}, "log_start": VClock()} | subscribe
    assert relay.subscribe(0.0, **args) is None
    return relay


def test_relay_refuses_a_reused_lsn_naming_origin_lsn_and_both_txns():
    relay = repl.Relay(subscriber=2, timeout_s=1.0)
    refusal = relay.subscribe(0.0, vclock=VClock({1: 7}), last_txn={1: (7, 0xAAA)}, local_txn_at={1: 0xBBB}, log_start=VClock())
    assert refusal is not None and refusal.code == "split_brain"
    assert "origin 1 lsn 7" in refusal.message and "0xaaa" in refusal.message and "0xbbb" in refusal.message
    assert relay.state is repl.RelayState.STOPPED


def test_relay_refuses_rows_it_no_longer_has_instead_of_a_hole():
    relay = repl.Relay(subscriber=2, timeout_s=1.0)
    refusal = relay.subscribe(0.0, vclock=VClock({1: 3}), last_txn={}, local_txn_at={}, log_start=VClock({1: 10}))
    assert refusal is not None and refusal.code == "rows_unavailable" and "join again" in refusal.message


def test_relay_ignores_the_subscribers_own_rows_and_local_rows_unless_asked():
    relay = relay_for(log_start=VClock({2: 4}))
    (send,) = relay.rows(1.0, [row(1, 1), row(2, 5), row(0, 1), row(1, 2)])
    assert [(r.origin, r.lsn) for r in send.records] == [(1, 1), (1, 2)]
    own = relay_for(include_own=True)
    (send,) = own.rows(1.0, [row(2, 1), row(0, 1)])
    assert [(r.origin, r.lsn) for r in send.records] == [(2, 1)]


def test_relay_sends_each_row_once_and_refuses_to_stream_a_hole():
    relay = relay_for(vclock=VClock({1: 2}))
    assert relay.rows(1.0, [row(1, 1), row(1, 2)]) == []
    (send,) = relay.rows(1.0, [row(1, 2), row(1, 3)])
    assert [r.lsn for r in send.records] == [3]
    with pytest.raises(repl.LocalProtocolError, match="hole"):
        relay.rows(1.0, [row(1, 5)])


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
    (ack,) = applier.rows_applied(0.2, VClock({1: 3, 0: 7}))
    assert isinstance(ack, repl.SendAck) and ack.vclock == {1: 3}, "local rows never travel"
    assert applier.state is repl.ApplierState.FOLLOW


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
