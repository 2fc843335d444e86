"""One seed sets every fault: the schedule is a pure function of the seed and the options."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from replicaset.testing.chaos.schedule import DEFAULT_KINDS, KINDS, Fault, Nemesis, ScheduleOptions, make_schedule

OPTIONS = ScheduleOptions(size=3, duration_s=120.0, kinds=KINDS)


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1])
def test_the_same_seed_gives_the_same_schedule(seed: int) -> None:
    first = make_schedule(seed, OPTIONS)
    second = make_schedule(seed, ScheduleOptions(size=3, duration_s=120.0, kinds=KINDS))
    assert first == second and len(first) >= 10
    assert [f.describe() for f in first] == [f.describe() for f in second]


def test_other_seeds_give_other_schedules() -> None:
    schedules = {tuple(make_schedule(seed, OPTIONS)) for seed in range(20)}
    assert len(schedules) == 20


def test_faults_come_one_at_a_time_inside_the_run() -> None:
    for seed in range(50):
        schedule = make_schedule(seed, ScheduleOptions(size=5, duration_s=60.0))
        for fault, after in zip(schedule, schedule[1:]):
            assert fault.at_s + fault.duration_s < after.at_s
        assert all(f.at_s + f.duration_s <= 60.0 for f in schedule)
        assert {f.kind for f in schedule} <= set(DEFAULT_KINDS)


def test_a_majority_partition_cuts_the_minority_off_both_ways() -> None:
    faults = [f for s in range(30) for f in make_schedule(s, ScheduleOptions(size=5, kinds=("partition-majority",)))]
    assert faults
    for fault in faults:
        minority = set(fault.members)
        assert len(minority) == 2
        majority = {1, 2, 3, 4, 5} - minority
        assert set(fault.flows) == {(a, b) for a in minority for b in majority} | {(b, a) for a in minority
                                                                                  for b in majority}


def test_a_ring_lets_each_member_hear_a_majority_no_two_the_same() -> None:
    for size in (3, 5):
        for fault in make_schedule(7, ScheduleOptions(size=size, kinds=("partition-ring",))):
            members = range(1, size + 1)
            heard = {dst: frozenset(src for src in members if (src, dst) not in fault.flows) for dst in members}
            assert all(len(h) == size // 2 + 1 for h in heard.values())
            assert len(set(heard.values())) == size


def test_an_unknown_fault_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="meteor"):
        make_schedule(1, ScheduleOptions(kinds=("kill", "meteor")))


def test_a_fault_begun_late_still_runs_before_the_run_heals() -> None:
    """The first fault takes longer to inject than its slot (a kill or a re-join on a loaded
    machine) and the faults phase ends meanwhile: the second fault still runs, since the
    run waits for the schedule (`finish`) before it stops the nemesis."""
    clock = {"now": 0.0}
    injecting = threading.Event()
    ran: list[str] = []

    def slow(cluster: object, fault: Fault, record: object) -> Callable[[], None]:
        ran.append(fault.kind)
        injecting.set()
        time.sleep(0.2)
        clock["now"] = 5.0  # past the second fault's end
        return lambda: None

    def quick(cluster: object, fault: Fault, record: object) -> Callable[[], None]:
        ran.append(fault.kind)
        return lambda: None

    schedule = [Fault(at_s=0.0, kind="kill", duration_s=0.5), Fault(at_s=1.0, kind="pause", duration_s=0.5)]
    nemesis = Nemesis(SimpleNamespace(network=None), schedule, lambda: clock["now"], {"kill": slow, "pause": quick})
    nemesis.start()
    assert injecting.wait(10.0)
    nemesis.finish(10.0)
    nemesis.stop(1.0)
    assert ran == ["kill", "pause"]
