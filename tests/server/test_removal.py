"""`box.remove(ID)`: a QUORUM transaction deletes the member's `_cluster` row, shrinking
total membership; refused for a live member without force; the removed member is refused at
SUBSCRIBE and PREPARE and its rows are taken no more; it learns it was removed, by whom and
when, and stops with exit code 77."""

from __future__ import annotations

import json
import re

import pytest

from replicaset.iproto.client import Client
from replicaset.iproto.constants import Key
from replicaset.iproto.errors import ServerError
from replicaset.iproto.peer import PeerKey, PeerRequest
from replicaset.cli import EXIT_REMOVED
from replicaset.identity import JOIN_UPSTREAM_FILE
from tests.server.conftest import QUORUM, REPLICASET_UUID, ReplicaSet, Server, quorum_set_of, wait_for
from tests.server.test_cli import cli
from tests.server.test_swim import SWIM_FAST


def console(member: Server, expr: str):
    with member.client() as client:
        return client.eval(expr)[0]


def swim_state(rs: ReplicaSet, member: Server, of: int) -> str | None:
    return next((m["state"] for m in rs.info(member)["members"] if m["id"] == of), None)


def test_a_dead_member_is_removed_and_the_set_goes_on_without_it(replicaset_factory):
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    wait_for(lambda: swim_state(rs, first, 3) == "alive", "member 3 alive on member 1")
    for expr, refusal in (("box.remove(3)", "instance 3 is alive"), ("box.remove(1)", "cannot remove itself"),
                          ("box.remove(9)", "instance 9 is not registered")):
        with pytest.raises(ServerError, match=refusal):
            console(first, expr)

    third.kill()
    wait_for(lambda: swim_state(rs, first, 3) == "dead", "member 3 DEAD on member 1")
    uuid = rs.info(first)["replication"][3]["uuid"]
    assert console(first, "box.remove(3)") == {"removed": 3, "uuid": uuid, "members": 2}
    wait_for(lambda: set(rs.info(second)["replication"]) == {1, 2}, "member 2 sees two members")
    with second.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'two of two')", options=QUORUM)
    assert all(m["state"] == "removed" for m in rs.info(first)["members"] if m["id"] == 3)

    removal = next(e for e in first.log_events() if e.get("event") == "member_removal_committed")

    # Its data still says it is a member; the others tell it it is not, and who removed it
    # (issue 32: it was refused as unknown for ever, `final: false`).
    out = cli("serve", "--data-dir", str(third.data_dir), "--listen", f"127.0.0.1:{third.port}", timeout_s=60)
    assert out.returncode == EXIT_REMOVED == 77, out.stderr[-3000:]
    [line] = [line for line in out.stderr.splitlines() if line.startswith("replicaset: ")]
    assert re.search(rf"instance {uuid} \(id 3\) was removed from the replica set by instance 1 at "
                     r"\d{4}-\d\d-\d\dT[\d:.]+Z", line), line
    [logged] = [json.loads(line) for line in out.stderr.splitlines() if '"removed_from_replicaset"' in line]
    assert logged["level"] == "error" and logged["instance_id"] == 3, logged
    assert logged["removed_by"] == 1 and logged["removal_row"] == removal["row"], (logged, removal)
    assert logged["removed_at"] in line
    with first.client() as client:
        assert client.execute("SELECT k FROM kv WHERE k = 3").rows == []


def test_a_live_member_removed_by_force_stops(replicaset_factory):
    """It applies the deletion of its own `_cluster` row, says who removed it, and exits
    with 77 rather than serve on, refusing every write."""
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    wait_for(lambda: swim_state(rs, first, 2) == "alive", "member 2 alive on member 1")
    assert console(first, "box.remove(2, {force = true})")["removed"] == 2
    assert second.proc.wait(30) == EXIT_REMOVED
    [logged] = [e for e in second.log_events() if e.get("event") == "removed_from_replicaset"]
    assert logged["removed_by"] == 1 and logged["learned_from"] is None, logged
    assert any(line.startswith("replicaset: instance ") and "was removed" in line
               for line in second.log_path.read_text().splitlines())
    with first.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'two of two')", options=QUORUM)
    rs.wait_converged([first, third])


def test_a_removed_coordinators_prepared_transaction_is_aborted_and_the_next_join_goes_through(replicaset_factory):
    """Finding 4 (docs/reliability.md, `specs/QuorumRemoval.tla`): members 1 and 3 hold a
    transaction of member 2's (a PREPARE made by hand in its name), member 2 dies and is
    removed before anyone hears its decision. Nobody holds its row, so both abort it once
    each stopped following member 2 and heard the other say so; until then the
    transaction held every later membership change back (R2), the replacement's join
    included."""
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    txn_id = 0x4242
    prepare = {Key.REPLICASET_UUID: REPLICASET_UUID, Key.INSTANCE_UUID: rs.info(second)["uuid"],
               PeerKey.TXN_ID: txn_id, PeerKey.COORDINATOR: 2, PeerKey.MEMBERS: [1, 2, 3],
               PeerKey.READS: [["kv", "kv:1", 0, 0]]}
    for member in (first, third):
        with Client.connect("127.0.0.1", member.port) as client:
            assert client.call(PeerRequest.TXN_PREPARE, prepare, replica_id=2).body[PeerKey.VOTE] == "prepared"
    second.kill()
    wait_for(lambda: swim_state(rs, first, 2) == "dead", "member 2 DEAD on member 1")
    assert console(first, "box.remove(2)")["removed"] == 2

    def resolved(member: Server) -> str | None:
        """How `member` settled it: on every "no row" answer, or told by a member that did."""
        return next((e["event"] for e in member.log_events() if e.get("txn_id") == txn_id
                     and e.get("event") in ("txn_resolved_removed", "txn_decision_learned")), None)

    wait_for(lambda: resolved(first) and resolved(third), "members 1 and 3 abort member 2's transaction")
    assert "txn_resolved_removed" in (resolved(first), resolved(third))
    for member in (first, third):
        assert rs.info(member)["synchro"]["prepared"]["len"] == 0
        assert any(e.get("event") == "member_unfollowed" and e.get("member") == 2 for e in member.log_events())
    with third.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'the intent is gone')", options=QUORUM)
    replacement = rs.join(first)
    rs.wait_status(replacement, "running")
    rs.wait_converged()
    with replacement.client() as client:
        assert client.execute("SELECT v FROM kv WHERE k = 1").rows == [["the intent is gone"]]


def test_members_a_join_named_are_followed_until_cluster_names_them_or_their_removal_is_here(replicaset_factory):
    """A join names every member registered where it was served (`join_upstream.toml`),
    and the joiner follows each until its own `_cluster` names it; one removed before the
    joiner caught up is never named: once the joiner holds its removal, it is followed no
    more and the file goes (here: a member that stopped while its file still named both)."""
    rs, (first, second, third) = quorum_set_of(replicaset_factory, 3, SWIM_FAST)
    uuids = {m: rs.info(m)["uuid"] for m in (first, third)}
    third.kill()
    wait_for(lambda: swim_state(rs, first, 3) == "dead", "member 3 DEAD on member 1")
    assert console(first, "box.remove(3)")["removed"] == 3
    rs.wait_converged([first, second])
    second.stop()
    (second.data_dir / JOIN_UPSTREAM_FILE).write_text(
        f'[[upstream]]\nuuid = "{uuids[first]}"\naddress = "127.0.0.1:{first.port}"\ninstance_id = 1\n\n'
        f'[[upstream]]\nuuid = "{uuids[third]}"\naddress = "127.0.0.1:{third.port}"\ninstance_id = 3\n')
    second.start()
    wait_for(lambda: not (second.data_dir / JOIN_UPSTREAM_FILE).exists(), "the file gone")
    events = second.log_events()
    events = events[max(i for i, e in enumerate(events) if e["event"] == "listening"):]  # since the restart
    assert [e["uuid"] for e in events if e["event"] == "join_upstream_registered"] == [uuids[first]]
    assert [(e["uuid"], e["member"]) for e in events if e["event"] == "join_upstream_removed"] == [(uuids[third], 3)]
    assert console(second, "box.cfg")["replication"] == [f"127.0.0.1:{first.port}"]


def test_a_joiner_whose_checkpoint_names_only_removed_members_follows_the_member_it_joined_through(
        replicaset_factory):
    """Found with finding 4's run: every member joined with member 1's first checkpoint,
    which names members 1 and 2, and keeps it as its newest. Members 1 and 2 are removed,
    and member 5 joins through member 3, whose checkpoint it gets: its `_cluster` names only
    removed members, so it followed nobody and stayed `loading` with none of the rows. It
    follows the member it joined through until its `_cluster` names that member."""
    rs, (first, second, third, fourth) = quorum_set_of(replicaset_factory, 4, SWIM_FAST)
    with third.client() as client:
        client.execute("INSERT INTO kv(k, v) VALUES (1, 'after the checkpoint')", options=QUORUM)
    rs.wait_converged()
    for gone, member in ((1, first), (2, second)):
        member.kill()
        wait_for(lambda: swim_state(rs, third, gone) == "dead", f"member {gone} DEAD on member 3")
        assert console(third, f"box.remove({gone})")["removed"] == gone
    fifth = rs.join(third)
    rs.wait_status(fifth, "running")
    with fifth.client() as client:
        assert client.execute("SELECT v FROM kv WHERE k = 1").rows == [["after the checkpoint"]]
        client.execute("INSERT INTO kv(k, v) VALUES (5, 'from the new member')", options=QUORUM)
    wait_for(lambda: any(e.get("event") == "join_upstream_registered" for e in fifth.log_events()),
             "member 5 finds member 3 in its own _cluster")
    with fourth.client() as client:
        wait_for(lambda: client.execute("SELECT v FROM kv WHERE k = 5").rows, "member 4 holds member 5's row")
