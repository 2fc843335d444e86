"""Found by the fault harness (seed 101, `tools/chaos.py --seed 101 --seconds 60` with
torn-tail among the faults at the time): a member that joined from a checkpoint, killed -9
and restarted with the last bytes of its WAL cut (a torn tail, as an OS crash under
`wal_mode = write` can leave it), did not start again. Its SQLite holds rows the cut WAL
no longer does ("SQLite ahead": docs/design/README.md §4.4 says rebuild from the newest checkpoint and the
WAL), but a joiner kept no checkpoint in `snap/`: the one it joined from became its
`db.sqlite`, so recovery found nothing between its WAL start and end and stopped with
EngineFatal ("restore or re-join"). A joiner now keeps that checkpoint (`checkpoint.adopt`)."""

from __future__ import annotations

from pathlib import Path

from replicaset.testing.chaos.faults import cut_wal_tail
from tests.server.conftest import ReplicaSet


def test_a_joined_member_starts_again_after_its_wal_tail_is_torn(tmp_path: Path) -> None:
    rs = ReplicaSet(tmp_path)
    try:
        first = rs.bootstrap()
        with first.client() as client:
            client.execute("CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT)")
        second = rs.join(first)
        rs.wait_status(second, "running")  # a joiner takes writes once it follows its peer again
        with second.client() as client:
            for k in range(20):
                client.execute("INSERT INTO kv(k, v) VALUES (?, 'x')", [k])
        rs.wait_converged()
        second.kill()
        assert cut_wal_tail(second.data_dir / "wal", 40).startswith("cut 40 of")
        second.start()
        rs.wait_converged()
        with second.client() as client:
            assert client.execute("SELECT count(*) FROM kv").rows == [[20]]
    finally:
        rs.stop_all()
