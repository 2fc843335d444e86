"""The remove-rejoin fault takes a removal as done once the member's `_cluster` row is gone,
whatever the request was answered: a removal committed but confirmed by a quorum only after
`synchro_timeout_s` is answered with ER_TIMEOUT, and every retry with "not registered".
Taking those for refusals, the harness restarted the removed member instead of joining a
new one, and the run failed on a member no longer in the set (`--members 5 --seed 1010`)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from replicaset.identity import Joining
from replicaset.iproto.constants import ErrorCode
from replicaset.iproto.errors import ServerError
from replicaset.testing.chaos import faults
from replicaset.testing.chaos.schedule import Fault, Injected


@dataclass
class _Member:
    n: int
    data_dir: Path
    answers: list[Exception] = field(default_factory=list)
    running: bool = True
    paused: bool = False
    on_tmpfs: bool = False

    @contextlib.contextmanager
    def client(self) -> Iterator[_Member]:
        yield self

    def eval(self, expr: str) -> list[object]:
        raise self.answers.pop(0)


@dataclass
class _Cluster:
    members: list[_Member]
    cluster_rows: set[int]
    calls: list[str] = field(default_factory=list)
    join_refusals: list[str] = field(default_factory=list)
    loading: list[int] = field(default_factory=list)
    registered_refusals: int = 0  # the first refusals that come after the joiner was registered

    def member(self, n: int) -> _Member:
        return next(m for m in self.members if m.n == n)

    def kill(self, member: _Member) -> None:
        member.running = False
        self.calls.append(f"kill {member.n}")

    def registered(self, member: _Member, instance_id: int) -> bool:
        return instance_id in self.cluster_rows

    def running_member(self, besides: _Member, timeout_s: float) -> _Member | None:
        return next((m for m in self.members if m is not besides and m.running), None)

    def not_running(self, besides: _Member, timeout_s: float) -> list[int]:
        self.calls.append("wait until the others run")
        return list(self.loading)

    def join(self, member: _Member, through: _Member) -> int:
        self.calls.append(f"join {member.n} through {through.n}")
        if self.join_refusals:
            if self.registered_refusals:  # what `replicaset join` keeps when it may be registered
                self.registered_refusals -= 1
                member.data_dir.mkdir(parents=True, exist_ok=True)
                Joining(replicaset_uuid=str(uuid.uuid4()), instance_uuid=str(uuid.uuid4()),
                        peers=[f"member {through.n}"]).save(member.data_dir)
            raise RuntimeError(self.join_refusals.pop(0))
        return 6

    def restart(self, member: _Member) -> None:
        self.calls.append(f"restart {member.n}")
        Joining.clear(member.data_dir)

    def info(self, member: _Member) -> dict[str, int]:
        return {"id": 6}


def test_a_removal_answered_with_a_timeout_is_taken_once_the_row_is_gone(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(faults, "REMOVE_WAIT_S", 0.5)
    monkeypatch.setattr(faults, "REMOVE_POLL_S", 0.01)
    (tmp_path / "m3").mkdir()
    first = _Member(1, tmp_path / "m1", answers=[
        ServerError(ErrorCode.TIMEOUT, "transaction 0x1 committed as row 1:40, but fewer than 3 of 5 members "
                                       "confirmed it durable within 2.0 s")])
    cluster = _Cluster([first, _Member(3, tmp_path / "m3")], cluster_rows={1, 2, 4, 5})
    fault = Fault(at_s=0.0, kind="remove-rejoin", duration_s=1.0, members=(3,))
    record = Injected(fault, 0.0)
    heal = faults.remove_rejoin(cluster, fault, record)  # type: ignore[arg-type]
    assert len(record.notes) == 1 and record.notes[0].startswith("removed through member 1, answered: "), record.notes
    assert "committed as row 1:40" in record.notes[0], record.notes
    heal()
    assert cluster.calls == ["wait until the others run", "kill 3", "join 3 through 1"], cluster.calls
    assert not (tmp_path / "m3").exists(), "the removed member's data went before it joined as a new instance"


def test_a_removal_refused_while_the_row_stays_is_retried_then_given_up(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(faults, "REMOVE_WAIT_S", 0.1)
    monkeypatch.setattr(faults, "REMOVE_POLL_S", 0.01)
    alive = ServerError(ErrorCode.ILLEGAL_PARAMS, "instance 3 is suspect: stop it first, or box.remove(ID, {force = true})")
    first = _Member(1, tmp_path / "m1", answers=[alive] * 1000)
    cluster = _Cluster([first, _Member(3, tmp_path / "m3")], cluster_rows={1, 2, 3})
    fault = Fault(at_s=0.0, kind="remove-rejoin", duration_s=1.0, members=(3,))
    record = Injected(fault, 0.0)
    heal = faults.remove_rejoin(cluster, fault, record)  # type: ignore[arg-type]
    assert record.notes and record.notes[-1].startswith("box.remove(3) refused until the deadline"), record.notes
    heal()
    assert cluster.calls == ["wait until the others run", "kill 3", "restart 3"], cluster.calls


def test_a_refused_re_join_is_tried_again_on_a_fresh_directory(tmp_path: Path, monkeypatch) -> None:
    """A registration is refused while SWIM on the registrar holds a voter dead, falsely too
    on a loaded machine (seed 4's third re-join); an operator joins again, so does the harness."""
    monkeypatch.setattr(faults, "REMOVE_POLL_S", 0.01)
    first = _Member(1, tmp_path / "m1", answers=[ServerError(ErrorCode.TIMEOUT, "committed, but fewer than 2")])
    cluster = _Cluster([first, _Member(3, tmp_path / "m3")], cluster_rows={1, 2},
                       join_refusals=["members [5] are dead (SWIM); the transaction was aborted (error 222)"])
    fault = Fault(at_s=0.0, kind="remove-rejoin", duration_s=1.0, members=(3,))
    record = Injected(fault, 0.0)
    heal = faults.remove_rejoin(cluster, fault, record)  # type: ignore[arg-type]
    (tmp_path / "m3").mkdir()
    heal()
    assert cluster.calls == ["wait until the others run", "kill 3", "join 3 through 1", "join 3 through 1"], \
        cluster.calls
    assert "failed, joining again" in record.notes[1] and "dead (SWIM)" in record.notes[1], record.notes
    assert record.notes[2] == "re-joined through member 1 as instance 6", record.notes


def test_a_re_join_that_may_have_registered_is_resumed_not_joined_again(tmp_path: Path, monkeypatch) -> None:
    """Seed 4 on a loaded machine: the registration committed, but a voter confirmed it only
    after `replication_connect_timeout`, so the join failed keeping its instance UUID. Joined
    again on a wiped directory, each attempt registered one more instance that never came,
    and with two live members of four no quorum was left: the run never converged."""
    monkeypatch.setattr(faults, "REMOVE_POLL_S", 0.01)
    first = _Member(1, tmp_path / "m1", answers=[ServerError(ErrorCode.TIMEOUT, "committed, but fewer than 2")])
    cluster = _Cluster([first, _Member(3, tmp_path / "m3")], cluster_rows={1, 2}, registered_refusals=1,
                       join_refusals=["transaction 0x1 committed as row 5:240, but fewer than 2 of 2 members confirmed "
                                      "it durable within 10 s (not confirmed by members [4])"])
    fault = Fault(at_s=0.0, kind="remove-rejoin", duration_s=1.0, members=(3,))
    record = Injected(fault, 0.0)
    heal = faults.remove_rejoin(cluster, fault, record)  # type: ignore[arg-type]
    heal()
    assert cluster.calls == ["wait until the others run", "kill 3", "join 3 through 1", "restart 3"], cluster.calls
    assert "failed, resuming it" in record.notes[1], record.notes
    assert record.notes[2] == "re-joined by resuming its join as instance 6", record.notes


def test_a_member_still_catching_up_is_waited_for_and_named_before_the_next_removal(tmp_path: Path) -> None:
    """Seed 4 under load: member 2 was killed while instance 4, re-joined a moment before,
    still caught up to what its registration's voters held, rows only member 2 had; it
    could not vote, `box.remove(2)` found no quorum, and member 2 came back unremoved."""
    first = _Member(1, tmp_path / "m1", answers=[ServerError(ErrorCode.TIMEOUT, "committed, but fewer than 2")])
    cluster = _Cluster([first, _Member(2, tmp_path / "m2"), _Member(3, tmp_path / "m3")], cluster_rows={1, 3},
                       loading=[3])
    fault = Fault(at_s=0.0, kind="remove-rejoin", duration_s=1.0, members=(2,))
    record = Injected(fault, 0.0)
    faults.remove_rejoin(cluster, fault, record)  # type: ignore[arg-type]
    assert cluster.calls == ["wait until the others run", "kill 2"], cluster.calls
    assert record.notes[0] == "members [3] were not running after 15 s; removing anyway", record.notes
