"""SWIM in the simulator: every member's driver runs the SWIM core the server runs, over
simulated datagrams, on members that crash, pause and are partitioned.

The bounds come from the timers (`SwimConfig.dead_within_s`, `heard_within_s`,
`refuted_within_s`, derived in their docstrings and docs/design/swim.md): with no datagram
lost, a crashed member is DEAD on every other member within `dead_within_s` of the crash;
a member whose messages flow again is ALIVE everywhere within `refuted_within_s`, and only
at an incarnation above the one it was accused at.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from replicaset.core.swim import MemberState
from replicaset.sim import NO_FAULTS, Faults, Simulation, SwimChange, SwimConfig
from tests.sim.simkit import simulate

S = MemberState
ACCUSED = (S.SUSPECT, S.DEAD)
SWIM = SwimConfig()


def seen_by_others(sim: Simulation, member: int) -> list[SwimChange]:
    return [c for c in sim.swim_changes if c.member == member and c.observer != member]


def first(sim: Simulation, observer: int, member: int, state: MemberState, *, after_s: float) -> float | None:
    """When `observer`'s view first held `member` in `state` after `after_s`."""
    return next((c.t_s for c in sim.swim_changes
                 if c.observer == observer and c.member == member and c.state is state and c.t_s >= after_s), None)


def assert_revived_only_above_the_accusation(changes: list[SwimChange]) -> None:
    """Within one life of a view, no entry went back in incarnation, and none held SUSPECT
    or DEAD at i became ALIVE again at i (only the member's refutation revives it)."""
    held: dict[tuple[int, int, int], tuple[MemberState, int]] = {}
    for change in changes:
        key = (change.observer, change.life, change.member)
        before = held.get(key)
        if before is not None:
            state, incarnation = before
            assert change.incarnation >= incarnation, f"{change} went back from {before}"
            if state in ACCUSED and change.state is S.ALIVE:
                assert change.incarnation > incarnation, f"{change} revived at {incarnation}"
        held[key] = (change.state, change.incarnation)


def assert_agreed(sim: Simulation) -> dict[int, tuple[str, int]]:
    views = [sim.swim_view(i) for i in sim.members]
    assert all(view == views[0] for view in views), f"seed {sim.seed}: views differ: {views}"
    assert all(state == "alive" for state, _ in views[0].values()), f"seed {sim.seed}: {views[0]}"
    return views[0]


@pytest.mark.parametrize(("seed", "members"), [(1, 3), (2, 4), (3, 5), (4, 5)])
def test_a_crashed_member_is_dead_on_every_other_member_within_the_bound(
        tmp_path: Path, seed: int, members: int) -> None:
    crash_s, heal_s = 1.0, 4.0
    faults = replace(NO_FAULTS, restart_after_s=60.0)  # down until the heal restarts it
    sim = simulate(tmp_path, seed, members=members, writes=5, faults=faults, swim=SWIM, fault_phase_s=heal_s,
                   script=[(crash_s, lambda s: s.crash(members))])
    bound_s = SWIM.dead_within_s(members, faults.delay_max_s)
    assert bound_s < heal_s - crash_s
    for observer in range(1, members):
        dead_s = first(sim, observer, members, S.DEAD, after_s=crash_s)
        assert dead_s is not None and dead_s - crash_s <= bound_s, (
            f"seed {seed}: member {observer} held {members} DEAD {dead_s} s, crash at {crash_s}, bound {bound_s:.2f}")
        revived = [c for c in seen_by_others(sim, members) if c.observer == observer and dead_s < c.t_s < heal_s]
        assert not revived, f"seed {seed}: the crashed member was revived before it restarted: {revived}"
    # Nobody else was ever suspected: no datagram was lost.
    assert all(c.state not in ACCUSED for c in sim.swim_changes if c.member != members), sim.swim_changes
    # Restarted at incarnation 0, it heard it was DEAD there and refuted above it.
    assert assert_agreed(sim)[members][1] >= 1
    assert_revived_only_above_the_accusation(sim.swim_changes)


@pytest.mark.parametrize(("seed", "members"), [(1, 3), (5, 4), (6, 5)])
def test_a_paused_member_is_suspected_and_once_resumed_refutes_and_is_alive_everywhere(
        tmp_path: Path, seed: int, members: int) -> None:
    """A pause longer than a round but well within the suspicion timeout: suspected, never
    DEAD (a suspicion lasts `suspect_timeout` at least, and the refutation comes within
    `refuted_within_s` of the resume), then ALIVE everywhere at a higher incarnation."""
    config = SwimConfig(suspect_timeout_ms=4000, dead_timeout_ms=5000)
    pause_s, paused_s = 1.0, (2 * members - 2) * config.period_max_s()
    resume_s = pause_s + paused_s
    bound_s = config.refuted_within_s(members, NO_FAULTS.delay_max_s)
    assert paused_s + bound_s < config.settings().suspect_timeout_s
    sim = simulate(tmp_path, seed, members=members, writes=5, faults=NO_FAULTS, swim=config, fault_phase_s=2.0,
                   script=[(pause_s, lambda s: s.pause(members, paused_s))])
    accusations = seen_by_others(sim, members)
    assert any(c.state is S.SUSPECT and pause_s < c.t_s <= resume_s for c in accusations), (
        f"seed {seed}: the paused member was never suspected: {accusations}")
    assert all(c.state is not S.DEAD for c in accusations), f"seed {seed}: {accusations}"
    refuted = assert_agreed(sim)[members][1]
    assert refuted >= 1, f"seed {seed}: the paused member never refuted"
    for observer in range(1, members):
        alive_s = next(c.t_s for c in accusations if c.observer == observer and c.incarnation == refuted)
        assert alive_s - resume_s <= bound_s, f"seed {seed}: member {observer} took the refutation at {alive_s}"
    assert_revived_only_above_the_accusation(sim.swim_changes)


@pytest.mark.parametrize(("seed", "members"), [(1, 3), (7, 4), (8, 5)])
def test_a_member_paused_until_dead_is_revived_by_its_refutation_once_its_messages_flow(
        tmp_path: Path, seed: int, members: int) -> None:
    """Paused past the DEAD bound, the member is DEAD everywhere, as a crashed one; resumed,
    it hears the accusation, refutes above it, and is ALIVE in every view within
    `refuted_within_s`, for good. (Waking, it may suspect a member whose ack waited behind
    its tick; that member refutes too, and the run ends once all views agree.)"""
    pause_s, paused_s = 1.0, 2.5
    resume_s = pause_s + paused_s
    sim = simulate(tmp_path, seed, members=members, writes=5, faults=NO_FAULTS, swim=SWIM, fault_phase_s=2.0,
                   script=[(pause_s, lambda s: s.pause(members, paused_s))])
    dead_bound_s = SWIM.dead_within_s(members, NO_FAULTS.delay_max_s)
    alive_bound_s = SWIM.refuted_within_s(members, NO_FAULTS.delay_max_s)
    assert dead_bound_s < paused_s
    for observer in range(1, members):
        dead_s = first(sim, observer, members, S.DEAD, after_s=pause_s)
        assert dead_s is not None and dead_s - pause_s <= dead_bound_s, f"seed {seed}: {observer}: {dead_s}"
        later = [c for c in seen_by_others(sim, members) if c.observer == observer and c.t_s > resume_s]
        assert later and later[0].state is S.ALIVE and later[0].incarnation >= 1, f"seed {seed}: {later}"
        assert later[0].t_s - resume_s <= alive_bound_s, f"seed {seed}: {observer} took it ALIVE at {later[0]}"
        assert all(c.state is S.ALIVE for c in later), f"seed {seed}: accused again after it refuted: {later}"
    assert assert_agreed(sim)[members][1] >= 1
    assert_revived_only_above_the_accusation(sim.swim_changes)


@pytest.mark.parametrize(("seed", "members", "minority"), [(1, 3, (3,)), (2, 5, (4, 5)), (9, 5, (5,))])
def test_membership_converges_after_a_partition_heals(
        tmp_path: Path, seed: int, members: int, minority: tuple[int, ...]) -> None:
    """Each side holds the other DEAD within the bound; once healed, the DEAD members are
    still pinged, hear their accusation, refute, and every view agrees, everyone ALIVE,
    within `refuted_within_s` of the heal."""
    cut_s, heal_s = 0.5, 3.0
    majority = tuple(m for m in range(1, members + 1) if m not in minority)
    sim = simulate(tmp_path, seed, members=members, writes=10, faults=NO_FAULTS, swim=SWIM, fault_phase_s=heal_s,
                   script=[(cut_s, lambda s: s.partition(majority, minority))])
    dead_bound_s = SWIM.dead_within_s(members, NO_FAULTS.delay_max_s)
    for a, b in [(a, b) for a in majority for b in minority] + [(b, a) for a in majority for b in minority]:
        dead_s = first(sim, a, b, S.DEAD, after_s=cut_s)
        assert dead_s is not None and dead_s - cut_s <= dead_bound_s, f"seed {seed}: {a} held {b} DEAD at {dead_s}"
    view = assert_agreed(sim)
    assert all(view[m][1] >= 1 for m in range(1, members + 1)), f"seed {seed}: someone never refuted: {view}"
    last_change_s = max(c.t_s for c in sim.swim_changes)
    assert last_change_s - heal_s <= SWIM.refuted_within_s(members, NO_FAULTS.delay_max_s), (
        f"seed {seed}: views changed until {last_change_s}, healed at {heal_s}")
    assert_revived_only_above_the_accusation(sim.swim_changes)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_under_random_faults_and_loss_views_converge_and_never_revive_a_member_below_its_refutation(
        tmp_path: Path, seed: int) -> None:
    """Link cuts, pair partitions, crashes that restart, 10% of the datagrams lost, a
    pause: transient false suspicions, refuted; after the heal every view agrees."""
    sim = simulate(tmp_path, seed, members=4, writes=30, faults=Faults(), swim=SwimConfig(drop_p=0.1),
                   script=[(1.0, lambda s: s.pause(2, 1.5))])
    assert sim.swim_lost > 0 and any(c.state in ACCUSED for c in sim.swim_changes)
    assert_agreed(sim)
    assert_revived_only_above_the_accusation(sim.swim_changes)


def test_the_revival_check_can_fail() -> None:
    """A view that took a member back to ALIVE at the incarnation it accused it at fails
    the check; a new life of the view starts again from ALIVE at 0."""
    accused = [SwimChange(0.0, 1, 1, 2, S.ALIVE, 0), SwimChange(1.0, 1, 1, 2, S.DEAD, 0)]
    assert_revived_only_above_the_accusation([*accused, SwimChange(2.0, 1, 2, 2, S.ALIVE, 0)])
    with pytest.raises(AssertionError, match="revived at 0"):
        assert_revived_only_above_the_accusation([*accused, SwimChange(2.0, 1, 1, 2, S.ALIVE, 0)])


@pytest.mark.parametrize("seed", [1, 2])
def test_a_member_restarted_before_anyone_suspects_it_learns_its_previous_incarnation(
        tmp_path: Path, seed: int) -> None:
    """A pause raised member 3's incarnation; it then crashes and restarts at 0 within a
    tick, before any probe of it fails. Nobody accuses it, and its ALIVE at 0 loses to
    the ALIVE of its previous life everywhere: told that, it goes above it, and every
    view agrees on it again (the run converges only then)."""
    faults = replace(NO_FAULTS, restart_after_s=0.02)
    sim = simulate(tmp_path, seed, members=3, writes=5, faults=faults, swim=SWIM, fault_phase_s=3.5,
                   script=[(0.5, lambda s: s.pause(3, 0.6)), (3.0, lambda s: s.crash(3))])
    before = max(c.incarnation for c in seen_by_others(sim, 3) if c.t_s < 3.0)
    assert before >= 1, f"seed {seed}: the pause was meant to raise the incarnation"
    assert not [c for c in seen_by_others(sim, 3) if c.t_s >= 3.0 and c.state in ACCUSED], "nobody accused it"
    assert assert_agreed(sim)[3][1] == before + 1
    assert_revived_only_above_the_accusation(sim.swim_changes)
