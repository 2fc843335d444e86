"""Golden scenarios of a relay and an applier joined by a fake link: what one member
sends, the other takes, scripted step by step."""

from __future__ import annotations

from replicaset.core import replication as repl
from replicaset.core.replicaset import Refusal
from tests.core.pair import DOWNSTREAM, TIMEOUT_S, UPSTREAM, Pair, row
from wal import VClock


def test_catch_up_stops_at_the_durable_cut_then_follows_once_synced() -> None:
    pair = Pair()
    pair.upstream.write(*(row(UPSTREAM, lsn) for lsn in range(1, 6)))
    pair.upstream.durable = VClock({UPSTREAM: 3})
    pair.start()
    assert pair.held() == [(UPSTREAM, 1), (UPSTREAM, 2), (UPSTREAM, 3)]
    assert pair.applier.state is repl.ApplierState.SYNC, "it lacks rows the relay had at subscribe"
    assert len(pair.sent("sync")) == 1, "the relay asked for the fsync it waits for"
    pair.sync()
    assert pair.held() == [(UPSTREAM, lsn) for lsn in range(1, 6)]
    assert pair.applier.state is repl.ApplierState.FOLLOW
    assert pair.relay is not None and pair.relay.acked.get(UPSTREAM) == 5


def test_rows_of_another_origin_wait_behind_a_withheld_row_of_ours() -> None:
    pair = Pair()
    pair.upstream.durable = VClock({UPSTREAM: 0})
    pair.start()
    pair.flush(row(UPSTREAM, 1), row(3, 1))
    assert pair.held() == [], "log order: the row of origin 3 does not overtake 1:1"
    pair.sync()
    assert pair.held() == [(UPSTREAM, 1), (3, 1)]


def test_a_duplicated_frame_is_taken_once() -> None:
    pair = Pair()
    pair.upstream.durable = VClock({UPSTREAM: 10})
    pair.start()
    pair.flush(row(UPSTREAM, 1), row(UPSTREAM, 2))
    (frame,) = pair.sent("rows")
    pair.deliver(frame)
    assert pair.held() == [(UPSTREAM, 1), (UPSTREAM, 2)]


def test_a_reused_lsn_is_refused_for_good_as_a_split_brain() -> None:
    pair = Pair()
    pair.downstream.held.append(row(UPSTREAM, 1, txn=0xAAA))
    pair.upstream.write(row(UPSTREAM, 1, txn=0xBBB))
    pair.start()
    assert pair.refusal is not None and pair.refusal.refusal is Refusal.SPLIT_BRAIN
    assert pair.applier.state is repl.ApplierState.STOPPED
    pair.at(100.0).tick()
    assert pair.applier.state is repl.ApplierState.STOPPED, "a final refusal is never retried"


def test_a_silent_relay_is_left_and_the_applier_resubscribes_from_what_it_holds() -> None:
    pair = Pair()
    pair.upstream.durable = VClock({UPSTREAM: 10})
    pair.upstream.write(row(UPSTREAM, 1))
    pair.start()
    assert pair.held() == [(UPSTREAM, 1)]
    pair.relay = None  # the upstream goes quiet: no heartbeat, no row
    pair.at(4 * TIMEOUT_S + 0.1).tick()
    assert pair.applier.state is repl.ApplierState.DISCONNECTED
    pair.upstream.write(row(UPSTREAM, 2))
    pair.at(pair.now_s + pair.applier.backoff_max_s).tick()
    (_, again) = pair.sent("subscribe")
    assert again.vclock == {UPSTREAM: 1}, "it asks for what it lacks, nothing more"
    assert pair.held() == [(UPSTREAM, 1), (UPSTREAM, 2)]


def test_an_idle_relay_heartbeats_and_the_acks_keep_it_alive() -> None:
    pair = Pair()
    pair.start()
    for step in range(1, 10):
        pair.at(step * TIMEOUT_S).tick()
    assert len(pair.sent("heartbeat")) >= 8
    assert pair.relay is not None and pair.relay.state is repl.RelayState.FOLLOW
    assert pair.applier.state is repl.ApplierState.FOLLOW
    assert pair.relay.subscriber == DOWNSTREAM
