"""One seed sets every fault: the schedule is a pure function of the seed and the options."""

from __future__ import annotations

import pytest

from replicaset.testing.chaos.schedule import DEFAULT_KINDS, KINDS, ScheduleOptions, make_schedule

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
