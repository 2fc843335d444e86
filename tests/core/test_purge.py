"""Tombstone purge (`replicaset.core.purge`, `specs/TombstonePurge.tla`): when a member may
forget a tombstone without letting a late row bring the deleted row back."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicaset.core.purge import PurgeHorizon, horizon, under, under_stamps
from wal import covers
from replicaset.core.transitions import LocalProtocolError

# ------------------------------------------------------------------ the counter-example
#
# Member 2 inserts k (2:1) and deletes it (2:2, the tombstone T). Member 1, before it hears
# of either, upserts k (1:1, U): its stamp is below T's, so U loses to T everywhere. Member 1
# then applies 2:1 and 2:2 and acknowledges {1: 1, 2: 2}. Every member now holds T, but U is
# still on its way to member 2. Were member 2 to purge T now (the one-phase rule), U would
# find no version there and be applied: k comes back on member 2 only.


def test_the_counter_example_is_not_purged_when_every_member_holds_the_tombstone() -> None:
    core = PurgeHorizon()
    acked_by_1 = {1: 1, 2: 2}
    assert core.observed(2, {2: {2: 2}, 1: acked_by_1}) is None, "an epoch starts: nothing goes yet"
    assert core.epoch is not None and core.epoch.bound == {2: 2}, "T is under the horizon"
    assert core.epoch.wait_for == {1: 1, 2: 2}, "it waits for member 1's rows up to its acknowledgement"
    assert core.observed(2, {2: {2: 2}, 1: acked_by_1}) is None, "member 2 lacks U (1:1)"


def test_after_the_second_phase_the_tombstone_goes() -> None:
    core = PurgeHorizon()
    core.observed(2, {2: {2: 2}, 1: {1: 1, 2: 2}})
    # Member 2 applies U: it loses to T, and apply-once drops any later copy of 1:1.
    assert core.observed(2, {2: {1: 1, 2: 2}, 1: {1: 1, 2: 2}}) == {2: 2}
    assert under({2: 2}, 2, 2), "T, written by 2:2, goes"
    both = {2: {1: 1, 2: 2}, 1: {1: 1, 2: 2}}
    assert core.observed(2, both) == {1: 1, 2: 2}, "the epoch that started at the last pass"
    assert core.observed(2, both) is None, "nothing new"


def test_every_member_must_hold_the_rows_waited_for_not_only_this_one() -> None:
    core = PurgeHorizon()
    core.observed(3, {3: {2: 2}, 1: {1: 1, 2: 2}, 2: {2: 2}})
    # Member 3 holds U now; member 2 does not yet (its acknowledgement lacks 1:1).
    assert core.observed(3, {3: {1: 1, 2: 2}, 1: {1: 1, 2: 2}, 2: {2: 2}}) is None
    assert core.observed(3, {3: {1: 1, 2: 2}, 1: {1: 1, 2: 2}, 2: {1: 1, 2: 2}}) == {2: 2}


def test_the_wait_is_for_each_members_own_lsn_not_for_what_everyone_holds_of_it() -> None:
    core = PurgeHorizon()
    # Member 1 wrote up to 1:5; the others hold its rows only up to 1:3, so the horizon
    # says 1:3 -- rows 1:4 and 1:5 may be older than the tombstone and still on their way.
    core.observed(3, {3: {1: 3, 2: 2}, 1: {1: 5, 2: 2}, 2: {1: 3, 2: 2}})
    assert core.epoch is not None and core.epoch.wait_for == {1: 5, 2: 2}
    assert core.observed(3, {3: {1: 4, 2: 2}, 1: {1: 5, 2: 2}, 2: {1: 5, 2: 2}}) is None
    assert core.observed(3, {3: {1: 5, 2: 2}, 1: {1: 5, 2: 2}, 2: {1: 5, 2: 2}}) == {1: 3, 2: 2}


def test_a_tombstone_that_reaches_everyone_during_an_epoch_waits_for_the_next_one() -> None:
    core = PurgeHorizon()
    core.observed(1, {1: {1: 1, 2: 1}, 2: {1: 1, 2: 1}})
    # 2:2 (a delete) reaches everyone while the epoch bound at {1: 1, 2: 1} is pending.
    released = core.observed(1, {1: {1: 1, 2: 2}, 2: {1: 1, 2: 2}})
    assert released == {1: 1, 2: 1}, "the epoch's bound, not this pass's horizon"
    assert not under(released, 2, 2)
    assert core.observed(1, {1: {1: 1, 2: 2}, 2: {1: 1, 2: 2}}) == {1: 1, 2: 2}


def test_a_stale_acknowledgement_only_makes_the_purge_later() -> None:
    core = PurgeHorizon()
    core.observed(1, {1: {1: 1, 2: 2}, 2: {2: 1}})  # 2's word predates its delete 2:2
    assert core.epoch is not None and core.epoch.bound == {2: 1}
    assert core.observed(1, {1: {1: 1, 2: 2}, 2: {2: 1}}) is None, "nothing a delete wrote is under {2: 1} yet"
    core.observed(1, {1: {1: 1, 2: 2}, 2: {1: 1, 2: 2}})
    assert core.observed(1, {1: {1: 1, 2: 2}, 2: {1: 1, 2: 2}}) == {1: 1, 2: 2}


def test_a_member_that_never_acknowledges_blocks_the_purge() -> None:
    core = PurgeHorizon()
    everything = {1: 7, 2: 9}
    for _ in range(5):
        assert core.observed(1, {1: everything, 2: everything, 3: {}}) is None
    assert core.epoch is not None and core.epoch.bound == {}


# ------------------------------------------------------------------ membership


def test_a_member_added_starts_the_epoch_over_and_counts_from_zero() -> None:
    core = PurgeHorizon()
    held = {1: 1, 2: 2}
    core.observed(1, {1: held, 2: held})
    # Member 3 joins before the epoch is done: rows it wrote before it applied 2:2 are
    # bounded by nothing in the epoch, so it ends unfinished.
    assert core.observed(1, {1: held, 2: held, 3: {}}) is None
    assert core.epoch is not None and core.epoch.members == {1, 2, 3} and core.epoch.bound == {}
    assert core.observed(1, {1: held, 2: held, 3: {}}) is None, "3 has acknowledged nothing"
    assert core.observed(1, {1: held, 2: held, 3: {**held, 3: 4}}) is None, "an epoch bound at 2:2 starts"
    assert core.epoch.wait_for == {1: 1, 2: 2, 3: 4}
    assert core.observed(1, {1: {**held, 3: 4}, 2: {**held, 3: 4}, 3: {**held, 3: 4}}) == held


def test_a_removed_member_stops_acknowledging_but_its_rows_are_still_waited_for() -> None:
    core = PurgeHorizon()
    core.observed(1, {1: {2: 2}, 2: {2: 2}, 3: {2: 2, 3: 5}})
    # Member 3 is stopped and removed; of its rows, 3:1..3:4 made it to the others.
    core.member_removed(3, 4)
    assert core.epoch is not None and core.epoch.members == {1, 2}
    assert core.epoch.wait_for == {2: 2, 3: 4}, "min(its own LSN acknowledged, what is left of it)"
    assert core.observed(1, {1: {2: 2, 3: 4}, 2: {2: 2, 3: 3}}) is None, "member 2 lacks 3:4"
    assert core.observed(1, {1: {2: 2, 3: 4}, 2: {2: 2, 3: 4}}) == {2: 2}
    assert core.epoch.wait_for == {2: 2, 3: 4}, "later epochs wait for the removed origin's end"


def test_a_member_that_leaves_without_member_removed_is_the_hosts_error() -> None:
    core = PurgeHorizon()
    core.observed(1, {1: {}, 2: {}, 3: {}})
    with pytest.raises(LocalProtocolError, match="without member_removed"):
        core.observed(1, {1: {}, 2: {}})
    core.member_removed(3, 0)
    core.observed(1, {1: {}, 2: {}})
    with pytest.raises(LocalProtocolError, match="not a registered member"):
        core.observed(1, {1: {}, 2: {}, 3: {}})
    with pytest.raises(LocalProtocolError):
        core.member_removed(3, 0)


def test_bad_input_is_refused() -> None:
    core = PurgeHorizon()
    with pytest.raises(LocalProtocolError, match="lack this member"):
        core.observed(1, {2: {}})
    with pytest.raises(LocalProtocolError, match="vclock of member 2"):
        core.observed(1, {1: {}, 2: {1: -1}})
    with pytest.raises(LocalProtocolError, match="not a registered member"):
        core.observed(1, {1: {}, 0: {}})


# ------------------------------------------------------------------ helpers


def test_under_names_the_rows_of_a_bound_and_never_local_ones() -> None:
    assert under({1: 3}, 1, 3) and under({1: 3}, 1, 1)
    assert not under({1: 3}, 1, 4) and not under({1: 3}, 2, 1) and not under({0: 9}, 0, 1)
    assert under_stamps({1: 500}, 500, 1) and not under_stamps({1: 500}, 501, 1)
    assert not under_stamps({1: 500}, 1, 2) and not under_stamps({0: 500}, 1, 0)


def test_horizon_and_covers() -> None:
    assert horizon([{1: 3, 2: 5}, {1: 4}, {1: 9, 2: 1}]) == {1: 3}
    assert horizon([]) == {}
    assert covers({1: 3, 2: 1}, {1: 3}) and not covers({1: 3}, {1: 3, 2: 1})


# ------------------------------------------------------------------ a replica set in miniature
#
# The spec's model in Python, with the real core as every member's purger: writes with HLC
# stamps above the clock and the stored version, rows applied once in per-origin LSN order
# (the receive rule), acknowledgements heard late, passes that purge the tombstones under the
# returned bound. After every step each member must show what last-writer-wins over every
# row it applied says (spec NoResurrection).

DELETE = None
MEMBERS = (1, 2, 3)
WRITES_MAX = 6
KEYS = ("a", "b")


@dataclass(frozen=True)
class Row:
    origin: int
    lsn: int
    hlc: int
    key: str
    val: int | None

    @property
    def version(self) -> tuple[int, int]:
        return (self.hlc, self.origin)


@dataclass
class Member:
    id: int
    vclock: dict[int, int] = field(default_factory=dict)
    table: dict[str, Row] = field(default_factory=dict)  # the row whose version k stores
    clock: int = 0
    heard: dict[int, dict[int, int]] = field(default_factory=dict)
    core: PurgeHorizon = field(default_factory=PurgeHorizon)


class ReplicaSet:
    def __init__(self, purge: str = "core") -> None:
        self.members = {m: Member(m, heard={o: {} for o in MEMBERS if o != m}) for m in MEMBERS}
        self.log: dict[int, list[Row]] = {m: [] for m in MEMBERS}
        self.purge = purge

    def held(self, m: int) -> list[Row]:
        member = self.members[m]
        return [r for o, rows in self.log.items() for r in rows[: member.vclock.get(o, 0)]]

    def store(self, member: Member, row: Row) -> None:
        stored = member.table.get(row.key)
        if stored is None or row.version > stored.version:
            member.table[row.key] = row

    def write(self, m: int, key: str, val: int | None) -> bool:
        member = self.members[m]
        live = key in member.table and member.table[key].val is not None
        if val is DELETE and not live:
            return False
        stored = member.table.get(key)
        row = Row(m, len(self.log[m]) + 1, max(member.clock, stored.hlc if stored else 0) + 1, key, val)
        self.log[m].append(row)
        member.vclock[m], member.clock = row.lsn, row.hlc
        self.store(member, row)
        return True

    def apply(self, p: int, o: int) -> bool:
        member = self.members[p]
        nxt = member.vclock.get(o, 0)
        if p == o or nxt >= len(self.log[o]):
            return False
        row = self.log[o][nxt]
        member.vclock[o], member.clock = row.lsn, max(member.clock, row.hlc)
        self.store(member, row)
        return True

    def ack(self, m: int, p: int) -> bool:
        if m == p or self.members[p].heard[m] == self.members[m].vclock:
            return False
        self.members[p].heard[m] = dict(self.members[m].vclock)
        return True

    def observed(self, p: int) -> bool:
        member = self.members[p]
        vclocks = {p: dict(member.vclock), **member.heard}
        bound = horizon(vclocks.values()) if self.purge == "one horizon" else member.core.observed(p, vclocks)
        if not bound:
            return False
        for key, row in list(member.table.items()):
            if row.val is DELETE and under(bound, row.origin, row.lsn):
                del member.table[key]
        return True

    def resurrected(self) -> list[str]:
        found = []
        for m, member in self.members.items():
            for key in KEYS:
                rows = [r for r in self.held(m) if r.key == key]
                lww = max(rows, key=lambda r: r.version).val if rows else DELETE
                shown = member.table[key].val if key in member.table else DELETE
                if shown != lww:
                    found.append(f"member {m} shows {key}={shown}, last-writer-wins says {lww}")
        return found

    def step(self, choice: int) -> None:
        """One step picked by `choice`: a write (at most WRITES_MAX in all), and rows,
        acknowledgements and passes more often, so that schedules reach purges."""
        kind, rest = choice % 8, choice // 8
        m, rest = MEMBERS[rest % 3], rest // 3
        o = MEMBERS[rest % 3]
        if kind == 0 and sum(map(len, self.log.values())) < WRITES_MAX:
            self.write(m, KEYS[rest % 2], DELETE if rest % 3 == 0 else rest % 5)
        elif kind in (1, 2, 3):
            self.apply(m, o)
        elif kind in (4, 5):
            self.ack(o, m)
        elif kind in (6, 7):
            self.observed(m)


def test_the_miniature_catches_the_one_phase_rule() -> None:
    naive = ReplicaSet(purge="one horizon")
    naive.write(2, "a", 7), naive.write(2, "a", DELETE), naive.write(1, "a", 8)
    for member in (1, 3):
        naive.apply(member, 2), naive.apply(member, 2), naive.ack(member, 2)
    assert naive.observed(2), "the tombstone goes: every member holds 2:2"
    naive.apply(2, 1)
    assert naive.resurrected() == ["member 2 shows a=8, last-writer-wins says None"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=100, max_size=200))
def test_no_schedule_brings_a_deleted_row_back(choices: list[int]) -> None:
    replica_set = ReplicaSet()
    for choice in choices:
        replica_set.step(choice)
        assert replica_set.resurrected() == []
        for member in replica_set.members.values():
            member.core.check_invariants()
    # Then every row everywhere, every acknowledgement heard, and a few passes: every
    # tombstone goes (the rule makes progress), and still nothing came back.
    for _ in range(3):
        for p in MEMBERS:
            for o in MEMBERS:
                while replica_set.apply(p, o):
                    pass
        for p in MEMBERS:
            for m in MEMBERS:
                replica_set.ack(m, p)
        for p in MEMBERS:
            replica_set.observed(p)
    assert replica_set.resurrected() == []
    for member in replica_set.members.values():
        assert all(row.val is not DELETE for row in member.table.values()), member.table
