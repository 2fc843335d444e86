"""Anti-entropy on real processes: a member a little behind catches up by delta sync; one
further behind than `delta_sync_threshold_transactions` takes a checkpoint from a peer that
holds its rows, unless the operator turned that off, and then says it needs one."""

from __future__ import annotations

from tests.server.conftest import Server, kv_count, quorum_set_of, wait_for, write_kv

AE = ("replication.anti_entropy_interval_seconds = 0.05\nreplication.delta_sync_threshold_transactions = 200\n"
      "replication.delta_sync_threshold_seconds = 0\ngc.min_retention_s = 0\n")
ROW = "x" * 200




def events(member: Server, name: str) -> list[dict]:
    return [e for e in member.log_events() if e.get("event") == name]



def test_a_little_behind_catches_up_by_delta_sync(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, AE + "replication.auto_rejoin = true\n")
    assert third.stop() == 0
    write_kv(first, 0, 50, ROW)
    third.start()
    rs.wait_converged()
    assert kv_count(third) == 50
    assert not events(third, "snapshot_transfer") and not events(third, "rejoin")


def test_far_behind_takes_a_checkpoint_by_default(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, AE)
    assert third.stop() == 0
    write_kv(first, 0, 3000, ROW)
    third.start()
    wait_for(lambda: events(third, "snapshot_transfer"), "member 3 decides on a checkpoint transfer")
    [transfer] = events(third, "snapshot_transfer")[:1]
    assert "more than delta_sync_threshold_transactions = 200" in transfer["reason"], transfer
    rs.wait_converged()
    assert kv_count(third) == 3000
    assert rs.info(third)["id"] == 3, "the same member, its data from the checkpoint"
    assert rs.info(third)["anti_entropy"]["runs"]["snapshot"] >= 1, "counted before the re-join, kept across it"


def test_far_behind_with_auto_rejoin_off_says_what_it_needs_and_streams(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, AE + "replication.auto_rejoin = false\n")
    assert third.stop() == 0
    write_kv(first, 0, 3000, ROW)
    third.start()
    rs.wait_converged()
    assert kv_count(third) == 3000, "delta sync brought everything anyway"
    needed = events(third, "snapshot_transfer_needed")
    assert needed and "auto_rejoin" in needed[0]["hint"], needed
    assert not events(third, "snapshot_transfer")
