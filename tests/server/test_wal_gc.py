"""WAL GC on real processes: the log stays bounded, a stopped member's rows are kept for it
until the maximum retention, and past it the member repairs from a checkpoint."""

from __future__ import annotations

import itertools
import time

from tests.server.conftest import ReplicaSet, Server, kv_count, quorum_set_of, wait_for, write_kv

# Small segments, a checkpoint every half second, a GC pass every 0.2 s, no minimum.
GC_CONFIG = ("wal_max_size = 65536\ncheckpoint_interval = 0.5\ngc.interval_s = 0.2\ngc.min_retention_s = 0\n"
             "replication.delta_sync_threshold_seconds = 0\n")
ROW = "x" * 400
ROWS = 600  # about 270 KB of rows: four or five segments


def segments(member: Server) -> int:
    return len(list((member.data_dir / "wal").glob("*.wal")))


def replicated(vclock: dict) -> dict[int, int]:
    """A vclock from `box.info` (JSON keys) without the local origin."""
    return {int(o): lsn for o, lsn in vclock.items() if int(o) != 0 and lsn}


def starts_past(rs: ReplicaSet, member: Server, held: dict[int, int]) -> bool:
    """Member's log starts past `held`: every segment that ended at or below it is gone."""
    start = replicated(rs.info(member)["gc"]["log_start"])
    return start != held and all(start.get(o, 0) >= lsn for o, lsn in held.items())


def test_the_log_stays_bounded_while_every_member_keeps_up(replicaset_factory):
    """The rule (docs/design/wal-gc.md), here with no minimum retention and the maximum an
    hour away: a segment goes once the oldest of the `checkpoint_count` (2) kept
    checkpoints, the database and every peer's acknowledgement are past it. So once every
    member holds a batch and has taken two checkpoints since, a pass leaves the segment the
    batch ended in and the later ones only: a batch fills four or five segments, so the log
    starts past where it stood before the batch. How many segments pile up while a batch is
    written depends on the machine's speed against the checkpoint interval; where the log
    starts once the checkpoints are past it does not."""
    rs, members = quorum_set_of(replicaset_factory, 3, GC_CONFIG + "gc.max_retention_s = 3600\n")
    # A checkpoint is named by its vclock: an idle member's checkpoints stay where they were,
    # and a trickle of writes brings newer ones.
    trickle = itertools.count(6 * ROWS)

    def collected(held: dict[Server, dict[int, int]]) -> bool:
        write_kv(members[0], next(trickle), 1, ROW)
        return all(starts_past(rs, m, held[m]) for m in members)

    for batch in range(6):
        held = {m: replicated(rs.info(m)["vclock"]) for m in members}
        write_kv(members[batch % 3], batch * ROWS, ROWS, ROW)
        rs.wait_converged()
        try:
            wait_for(lambda: collected(held), f"batch {batch}: every member's log collected past the rows before it")
        except AssertionError as exc:
            kept = [(segments(m), rs.info(m)["gc"]["kept_because"]) for m in members]
            raise AssertionError(f"{exc}; segments and keeper per member: {kept}") from None
    gc = rs.info(members[0])["gc"]
    assert gc["removed_segments"] >= 6 * 3, "each batch's segments but the last went"
    names = [c["name"] for c in gc["consumers"]]
    assert "replica 2" in names and "replica 3" in names and "database" in names, names
    assert any(n.startswith("checkpoint ") for n in names), names
    rs.wait_converged()
    trickled = next(trickle) - 6 * ROWS  # the first key not written
    assert [kv_count(m) for m in members] == [6 * ROWS + trickled] * 3


def test_a_stopped_member_keeps_its_rows_until_it_is_back(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, GC_CONFIG + "gc.max_retention_s = 3600\n")
    assert third.stop() == 0
    write_kv(first, 0, 3 * ROWS, ROW)
    time.sleep(1.0)  # checkpoints and GC passes come and go
    gc = rs.info(first)["gc"]
    assert gc["kept_because"] == "peer 3", gc
    held = segments(first)
    assert held > 3, "the rows member 3 lacks stay"
    third.start()
    rs.wait_converged()
    assert kv_count(third) == 3 * ROWS
    assert '"event": "rejoin"' not in third.log_path.read_text(), "caught up from the log, no checkpoint"
    wait_for(lambda: rs.info(first)["gc"]["kept_because"] in ("oldest checkpoint", "live segment"),
             "member 1's log held by its checkpoints only, once member 3 caught up")
    assert segments(first) < held, "collected once member 3 caught up (a pass may come before we look)"


def test_past_the_maximum_retention_a_stopped_member_repairs_from_a_checkpoint(replicaset_factory):
    """Issue 32: with the default config the member stayed `loading` for good. It repairs
    by itself (a gap repair: a re-join from a checkpoint), keeps its local table's rows,
    and counts the repair, also after another restart."""
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3,
                                               GC_CONFIG + 'gc.max_retention_s = 1\nlocal_tables = ["scratch"]\n')
    with third.client() as client:
        client.execute("CREATE TABLE scratch(k INTEGER PRIMARY KEY, v TEXT)")
        for k in range(5):
            client.execute("INSERT INTO scratch(k, v) VALUES (?, 'this member only')", [k])
    held = {int(o): lsn for o, lsn in rs.info(third)["vclock"].items() if int(o) != 0}
    assert third.stop() == 0
    write_kv(first, 0, 3 * ROWS, ROW)
    more = iter(range(10_000, 20_000))

    def gone_past_member_3() -> bool:
        write_kv(first, next(more), 1, ROW)  # a pass after the maximum retention needs a new segment written since
        starts = [rs.info(m)["gc"]["log_start"] for m in (first, second)]
        return all(any(lsn > held.get(int(o), 0) for o, lsn in start.items() if int(o) != 0) for start in starts)

    wait_for(gone_past_member_3, "members 1 and 2 collected rows member 3 lacks")
    third.start()
    rs.wait_converged()
    rs.wait_status(third, "running")
    assert kv_count(third) == kv_count(first)
    assert '"event": "rejoin"' in third.log_path.read_text(), "the rows were gone: a checkpoint transfer"

    def local_rows() -> list:
        with third.client() as client:
            return client.execute("SELECT k, v FROM scratch ORDER BY k").rows

    assert local_rows() == [[k, "this member only"] for k in range(5)]
    assert rs.info(third)["anti_entropy"]["runs"]["gap"] == 1
    assert third.stop() == 0
    third.start()
    rs.wait_status(third, "running")
    assert rs.info(third)["anti_entropy"]["runs"]["gap"] == 1, "counted for good, not since the start"
    assert local_rows() == [[k, "this member only"] for k in range(5)]
