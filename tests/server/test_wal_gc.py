"""WAL GC on real processes: the log stays bounded, a stopped member's rows are kept for it
until the maximum retention, and past it the member repairs from a checkpoint."""

from __future__ import annotations

import time

from tests.server.conftest import Server, kv_count, quorum_set_of, wait_for, write_kv

# Small segments, a checkpoint every half second, a GC pass every 0.2 s, no minimum.
GC_CONFIG = ("wal_max_size = 65536\ncheckpoint_interval = 0.5\ngc.interval_s = 0.2\ngc.min_retention_s = 0\n"
             "replication.delta_sync_threshold_seconds = 0\n")
ROW = "x" * 400
ROWS = 600  # about 270 KB of rows: four or five segments


def segments(member: Server) -> int:
    return len(list((member.data_dir / "wal").glob("*.wal")))





def test_the_log_stays_bounded_while_every_member_keeps_up(replicaset_factory):
    rs, members = quorum_set_of(replicaset_factory, 3, GC_CONFIG + "gc.max_retention_s = 3600\n")
    most = 0
    for batch in range(6):
        write_kv(members[batch % 3], batch * ROWS, ROWS, ROW)
        most = max(most, *(segments(m) for m in members))
    rs.wait_converged()
    # An idle member keeps its log back to its older checkpoint, which a slow machine may
    # have taken a few segments before the end: a trickle of writes brings newer ones.
    trickle = iter(range(6 * ROWS, 7 * ROWS))

    def collected() -> bool:
        write_kv(members[0], next(trickle), 1, ROW)
        return all(segments(m) <= 3 for m in members)

    try:
        wait_for(collected, "every member's log collected down to three segments")
    except AssertionError as exc:
        held = [(segments(m), rs.info(m)["gc"]["kept_because"]) for m in members]
        raise AssertionError(f"{exc}; segments and keeper per member: {held}") from None
    assert most <= 8, f"a member's log reached {most} segments while 1.6 MB were written in 64 KiB segments"
    gc = rs.info(members[0])["gc"]
    assert gc["removed_segments"] > 0
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
