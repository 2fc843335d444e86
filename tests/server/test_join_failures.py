"""A join that fails says on the terminal what failed and what to do: it removes what it
made when nothing can have been registered and nothing was kept, and otherwise says how
to go on, which then works. Its log lines name the joiner, never `"instance_id": null`.
(A transfer broken by the member's death: tests/server/test_join_resume.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from replicaset.testing.processes import free_port, start_instance
from tests.server.conftest import REPLICASET_UUID, ReplicaSet, Server, quorum_set_of

JOIN_TIMEOUT_S = 60
OTHER_SET = "8c5e4a52-0000-4000-8000-00000000ffff"


def run_join(rs: ReplicaSet, data_dir: Path, *peers: str, uuid: str = REPLICASET_UUID,
             listen: str | None = None) -> tuple[subprocess.CompletedProcess[str], str, list[dict]]:
    """`replicaset join` that must fail (exit 1): the process, its one human line, its log lines."""
    out = subprocess.run(
        [sys.executable, "-m", "replicaset.cli", "join", "--uuid", uuid, "--data-dir", str(data_dir),
         "--config", str(rs.config), "--listen", listen or f"127.0.0.1:{free_port()}",
         *(arg for peer in peers for arg in ("--peer", peer))],
        capture_output=True, text=True, timeout=JOIN_TIMEOUT_S)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    (human,) = [line for line in lines if line.startswith("replicaset join: ")]
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert logged and all(e["instance_id"] is not None for e in logged), logged
    return out, human, logged


def test_a_join_into_another_set_or_through_nobody_leaves_nothing_and_says_what_to_check(replicaset):
    first = replicaset.bootstrap()
    wrong = replicaset.root / "wrong"
    _, human, logged = run_join(replicaset, wrong, f"127.0.0.1:{first.port}", uuid=OTHER_SET)
    assert f"127.0.0.1:{first.port}: Replica set UUID mismatch: expected {REPLICASET_UUID}, got {OTHER_SET}" in human
    assert "check --uuid" in human and f"Nothing was registered or kept, and {wrong} was removed" in human, human
    assert not wrong.exists(), "the directory the join made is gone: the same command can run again"
    (failed,) = [e for e in logged if e["event"] == "join_failed"]
    assert failed["instance_id"] == failed["instance_uuid"], "before the member names the id, the UUID names the joiner"
    (gave_up,) = [e for e in logged if e["event"] == "join_gave_up"]
    assert gave_up["resumable"] is False and gave_up["removed"] is True, gave_up

    given = replicaset.root / "given"
    given.mkdir()
    nobody = f"127.0.0.1:{free_port()}"
    _, human, _ = run_join(replicaset, given, nobody)
    assert f"check that a member runs at {nobody} (--peer)" in human and "Nothing was registered or kept:" in human
    assert sorted(p.name for p in given.iterdir()) == ["config.toml"], "the operator's directory stays, emptied"
    with first.client() as client:
        assert client.execute("SELECT id FROM _cluster").rows == [[1]]


def test_a_join_without_a_majority_says_how_to_go_on_and_going_on_joins(replicaset_factory):
    """The member cannot register the joiner (members 2 and 3 hung: no majority of three).
    The line says so, and that `replicaset serve` on the data directory goes on; once the
    members are back, that finishes the join under the same UUID."""
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3)
    joiner = Server(rs.root / "m4", rs.root / "m4.log")
    rs.members.append(joiner)
    joiner.port = free_port()
    with second.paused(), third.paused():
        _, human, logged = run_join(rs, joiner.data_dir, f"127.0.0.1:{first.port}",
                                    listen=f"127.0.0.1:{joiner.port}")
    assert "1 of 3 members prepared, 2 needed" in human, human
    uuid = next(e["instance_uuid"] for e in logged if e["event"] == "join_failed")
    assert (f"{joiner.data_dir} keeps the instance UUID {uuid}; run `replicaset serve --data-dir {joiner.data_dir}` "
            "to resume it") in human, human

    joiner.proc, _ = start_instance(["serve", "--data-dir", str(joiner.data_dir)], joiner.log_path, port=joiner.port)
    rs.wait_status(joiner, "running")
    info = rs.info(joiner)
    assert info["id"] == 4 and info["uuid"] == uuid
    with first.client() as client:
        assert client.execute("SELECT id FROM _cluster ORDER BY id").rows == [[1], [2], [3], [4]]
