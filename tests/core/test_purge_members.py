"""Tombstone purge passes with members leaving (`replicaset.core.purge.TombstonePurge`):
a removed member's origin is waited for until its end settles, an origin this member
cannot place blocks the purge, and a settled end that is overrun stops it for good."""

from __future__ import annotations

import pytest

from replicaset.core.purge import PurgeStopped, PurgeUnder, RemovalSettled, TombstonePurge
from replicaset.core.transitions import LocalProtocolError

SETTLE_S = 10.0


def bounds(actions: list[object]) -> list[dict[int, int]]:
    return [a.bound for a in actions if isinstance(a, PurgeUnder)]


def test_a_quiet_set_purges_after_two_passes() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    held = {1: 3, 2: 4}
    assert core.passed(0.0, 1, {1: held, 2: held}) == [], "the first pass starts an epoch"
    assert bounds(core.passed(1.0, 1, {1: held, 2: held})) == [held]


def test_a_removed_member_counts_at_its_last_acknowledgement_until_its_end_settles() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    # Member 3 acknowledged {3: 2}; it wrote 3:3 too, which only member 2 holds so far.
    core.passed(0.0, 1, {1: {1: 5, 3: 2}, 2: {1: 5, 3: 3}, 3: {1: 5, 3: 2}})
    # Member 3 is removed: this member's vclock {1: 6, 3: 2} holds the removal row 1:6.
    actions = core.passed(1.0, 1, {1: {1: 6, 3: 2}, 2: {1: 5, 3: 3}})
    assert sorted(core.leaving) == [3] and core.leaving[3].ack == {1: 5, 3: 2}
    assert not any(isinstance(a, RemovalSettled) for a in actions)
    # Member 2 applies the removal: the settle time starts.
    core.passed(2.0, 1, {1: {1: 6, 3: 2}, 2: {1: 6, 3: 3}})
    assert core.leaving[3].covered_s == 2.0
    early = core.passed(2.0 + SETTLE_S - 1, 1, {1: {1: 6, 3: 2}, 2: {1: 6, 3: 3}})
    assert not any(isinstance(a, RemovalSettled) for a in early), "not before the settle time"
    settled = core.passed(2.0 + SETTLE_S, 1, {1: {1: 6, 3: 2}, 2: {1: 6, 3: 3}})
    assert RemovalSettled(member=3, last_lsn=3) in settled, "the highest LSN of 3 any member holds"
    assert core.horizon.removed == {3: 3} and not core.leaving


def test_a_removed_members_end_counts_the_rows_it_acknowledged_holding_itself() -> None:
    """Member 3 acknowledged its own rows up to 3:4; the others hold 3:2 so far. Rows 3:3
    and 3:4 may still come through another member (one whose acknowledgement is stale),
    and may be older than the tombstone 1:5 (3's vclock is a prefix of its log): its end
    settles at 4, nothing goes before every member holds them, and their arrival does not
    stop the purge."""
    core = TombstonePurge(settle_s=SETTLE_S)
    others = {1: 6, 3: 2}
    core.passed(0.0, 1, {1: {1: 5, 3: 2}, 2: {1: 5, 3: 2}, 3: {1: 5, 3: 4}})
    core.passed(1.0, 1, {1: others, 2: {1: 5, 3: 2}})  # 1:6 removes member 3
    assert core.leaving[3].ack == {1: 5, 3: 4}
    core.passed(2.0, 1, {1: others, 2: others})
    settled = core.passed(2.0 + SETTLE_S, 1, {1: others, 2: others})
    assert RemovalSettled(member=3, last_lsn=4) in settled, "its own acknowledgement names 3:4"
    for t in (13.0, 14.0, 15.0):
        assert bounds(core.passed(t, 1, {1: others, 2: others})) == [], "3:3 and 3:4 are not here yet"
    arrived = {1: 6, 3: 4}
    found = [a for t in (16.0, 17.0, 18.0) for a in core.passed(t, 1, {1: arrived, 2: arrived})]
    assert not any(isinstance(a, PurgeStopped) for a in found), "the rows it acknowledged are within its end"
    assert bounds(found) and bounds(found)[-1] == arrived


def test_nothing_goes_until_this_member_holds_the_removed_origins_last_row() -> None:
    core = TombstonePurge(settle_s=0.0)
    # The tombstone is 2:2's; member 3 never acknowledged it, and wrote 3:1 and 3:2,
    # which may be older than it. Only member 2 holds 3:2.
    core.passed(0.0, 1, {1: {1: 1, 2: 2, 3: 1}, 2: {1: 1, 2: 2, 3: 1}, 3: {1: 1, 3: 1}})
    # 3 is removed by 1:2, which member 2 holds already: the settle time starts at once.
    here, there = {1: 2, 2: 2, 3: 1}, {1: 2, 2: 2, 3: 2}
    assert bounds(core.passed(1.0, 1, {1: here, 2: there})) == []
    out = core.passed(2.0, 1, {1: here, 2: there})
    assert RemovalSettled(member=3, last_lsn=2) in out
    for t in (3.0, 4.0, 5.0):
        found = bounds(core.passed(t, 1, {1: here, 2: there}))
        assert all(b.get(2, 0) < 2 for b in found), "3:2 may be older than 2:2's tombstone and is not here yet"
    found = [b for t in (6.0, 7.0, 8.0) for b in bounds(core.passed(t, 1, {1: there, 2: there}))]
    assert found and found[-1] == there


def test_after_a_restart_an_origin_held_but_not_registered_is_a_removed_member() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    held = {1: 4, 2: 4, 3: 2}
    assert core.passed(0.0, 1, {1: held, 2: held}) == []
    assert sorted(core.leaving) == [3] and core.leaving[3].ack == {}, "counted, at an empty acknowledgement"
    for t in (1.0, 2.0):
        assert bounds(core.passed(t, 1, {1: held, 2: held})) == [], "an empty acknowledgement holds nothing back"
    out = core.passed(1.0 + SETTLE_S, 1, {1: held, 2: held})
    assert RemovalSettled(member=3, last_lsn=2) in out


def test_an_origin_only_another_member_names_blocks_the_purge() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    held = {1: 4, 2: 4}
    core.passed(0.0, 1, {1: held, 2: held})
    # Member 2 holds rows of 4, a member whose registration has not reached this one.
    for t in (1.0, 2.0, 3.0):
        assert core.passed(t, 1, {1: held, 2: {**held, 4: 1}}) == []
    assert not core.leaving, "it is not taken for a removed member either"


def test_a_settled_origin_that_goes_on_stops_the_purge_for_good() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    core.restored({3: 5})
    core.passed(0.0, 1, {1: {1: 1, 3: 5}, 2: {1: 1, 3: 5}})
    out = core.passed(1.0, 1, {1: {1: 1, 3: 6}, 2: {1: 1, 3: 5}})
    assert len(out) == 1 and isinstance(out[0], PurgeStopped) and "removed member 3" in out[0].reason
    assert core.passed(2.0, 1, {1: {1: 1, 3: 6}, 2: {1: 1, 3: 6}}) == []


def test_restored_ends_are_waited_for() -> None:
    core = TombstonePurge(settle_s=SETTLE_S)
    core.restored({3: 5})
    core.passed(0.0, 1, {1: {1: 1, 3: 4}, 2: {1: 1, 3: 5}})
    assert core.horizon.epoch is not None and core.horizon.epoch.wait_for == {1: 1, 3: 5}


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        TombstonePurge(settle_s=-1.0)
    core = TombstonePurge(settle_s=SETTLE_S)
    with pytest.raises(LocalProtocolError, match="lack this member"):
        core.passed(0.0, 1, {2: {}})
    with pytest.raises(LocalProtocolError, match="vclock of member 2"):
        core.passed(0.0, 1, {1: {}, 2: {1: -3}})
