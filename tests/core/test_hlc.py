"""The hybrid logical clock: stamps only grow, peers push it forward, the 64-bit layout."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from replicaset.core.hlc import (
    HLC,
    LOGICAL_MAX,
    NODE_MAX,
    PHYSICAL_MAX,
    pack_stamp,
    unpack_stamp,
)

MS = 1_736_000_000_000


def stamps_of(clock: HLC, readings: list[int]) -> list[int]:
    return [clock.now(ms) for ms in readings]


# ------------------------------------------------------------------ layout


def test_marmot_example_has_physical_node_and_logical_in_their_bits() -> None:
    # 1736000000000 << 22 = 0x650C6A7400000000; node 1 << 16 = 0x10000; logical 1.
    # (The Marmot text prints 0x0001A2B3C4D50001 for this stamp; that value is only
    # illustrative: its top 42 bits are not 1736000000000.)
    stamp = pack_stamp(1_736_000_000_000, 1, 1)
    assert stamp == 0x650C_6A74_0001_0001
    assert stamp == 1_736_000_000_000 * 2**22 + 1 * 2**16 + 1
    assert unpack_stamp(stamp) == (1_736_000_000_000, 1, 1)


@pytest.mark.parametrize(
    ("physical_ms", "node_id", "logical", "expected"),
    [
        (0, 0, 1, 0x1),
        (0, 0, LOGICAL_MAX, 0xFFFF),
        (0, 1, 0, 0x1_0000),
        (0, NODE_MAX, 0, 0x3F_0000),
        (1, 0, 0, 0x40_0000),
        (PHYSICAL_MAX, NODE_MAX, LOGICAL_MAX, 2**64 - 1),
    ],
)
def test_bit_layout_is_42_ms_6_node_16_logical(
    physical_ms: int, node_id: int, logical: int, expected: int
) -> None:
    assert pack_stamp(physical_ms, node_id, logical) == expected
    assert unpack_stamp(expected) == (physical_ms, node_id, logical)


@settings(max_examples=300, deadline=None)
@given(
    physical_ms=st.integers(0, PHYSICAL_MAX),
    node_id=st.integers(0, NODE_MAX),
    logical=st.integers(0, LOGICAL_MAX),
)
def test_pack_unpack_round_trip(physical_ms: int, node_id: int, logical: int) -> None:
    stamp = pack_stamp(physical_ms, node_id, logical)
    assert 0 <= stamp < 2**64
    assert unpack_stamp(stamp) == (physical_ms, node_id, logical)


@settings(max_examples=300, deadline=None)
@given(a=st.tuples(st.integers(0, PHYSICAL_MAX), st.integers(0, NODE_MAX), st.integers(0, LOGICAL_MAX)),
       b=st.tuples(st.integers(0, PHYSICAL_MAX), st.integers(0, NODE_MAX), st.integers(0, LOGICAL_MAX)))
def test_stamps_compare_as_their_fields_in_order(
    a: tuple[int, int, int], b: tuple[int, int, int]
) -> None:
    assert (pack_stamp(*a) < pack_stamp(*b)) == (a < b)


@pytest.mark.parametrize(
    "fields",
    [(PHYSICAL_MAX + 1, 0, 0), (-1, 0, 0), (0, NODE_MAX + 1, 0), (0, -1, 0), (0, 0, LOGICAL_MAX + 1), (0, 0, -1)],
)
def test_pack_refuses_fields_that_do_not_fit(fields: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        pack_stamp(*fields)


def test_node_id_must_fit_in_six_bits() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        HLC(NODE_MAX + 1)


def test_stamps_carry_the_node_id() -> None:
    clock = HLC(7)
    assert unpack_stamp(clock.now(MS))[1] == 7


# ------------------------------------------------------------------ local stamps


@pytest.mark.parametrize(
    "readings",
    [
        pytest.param([MS] * 50, id="clock-stands-still"),
        pytest.param([MS, MS - 1, MS - 1000, MS - 5, MS], id="clock-jumps-back"),
        pytest.param([MS, MS + 1, MS + 60_000, MS + 60_000, MS + 60_001], id="clock-jumps-forward"),
        pytest.param([MS, MS + 10, MS - 10, MS + 10, MS + 11, MS - 3_600_000], id="clock-jitters"),
    ],
)
def test_local_stamps_strictly_increase(readings: list[int]) -> None:
    stamps = stamps_of(HLC(3), readings)
    assert stamps == sorted(set(stamps))


def test_clock_standing_still_counts_in_the_logical_part() -> None:
    stamps = stamps_of(HLC(3), [MS] * 4)
    assert [unpack_stamp(s) for s in stamps] == [(MS, 3, 0), (MS, 3, 1), (MS, 3, 2), (MS, 3, 3)]


def test_clock_jumping_back_keeps_the_highest_time_seen() -> None:
    clock = HLC(3)
    clock.now(MS)
    assert unpack_stamp(clock.now(MS - 5_000)) == (MS, 3, 1)


def test_clock_jumping_forward_takes_the_new_time_and_restarts_the_counter() -> None:
    clock = HLC(3)
    stamps_of(clock, [MS] * 3)
    assert unpack_stamp(clock.now(MS + 250)) == (MS + 250, 3, 0)


def test_logical_overflow_borrows_the_next_millisecond() -> None:
    clock = HLC(2, last_stamp=pack_stamp(MS, 2, LOGICAL_MAX - 1))
    assert unpack_stamp(clock.now(MS)) == (MS, 2, LOGICAL_MAX)
    assert unpack_stamp(clock.now(MS)) == (MS + 1, 2, 0)
    assert unpack_stamp(clock.now(MS)) == (MS + 1, 2, 1)
    # physical time catching up past the borrowed millisecond resets the counter again
    assert unpack_stamp(clock.now(MS + 2)) == (MS + 2, 2, 0)


def test_a_long_run_in_one_millisecond_stays_strictly_increasing() -> None:
    clock = HLC(1)
    stamps = stamps_of(clock, [MS] * (3 * (LOGICAL_MAX + 1)))
    assert all(a < b for a, b in zip(stamps, stamps[1:]))
    assert unpack_stamp(stamps[-1])[0] == MS + 2


# ------------------------------------------------------------------ the receive rule


def test_after_a_stamp_from_the_future_the_next_local_stamp_is_above_it() -> None:
    clock = HLC(5)
    clock.now(MS)
    remote = pack_stamp(MS + 10_000, 2, 7)
    clock.receive(remote, MS + 1)
    stamp = clock.now(MS + 2)
    assert stamp > remote
    assert unpack_stamp(stamp)[0] == MS + 10_000


def test_receive_in_the_same_millisecond_takes_the_higher_counter() -> None:
    clock = HLC(5)
    stamps_of(clock, [MS] * 3)  # logical 0, 1, 2
    remote = pack_stamp(MS, 2, 40)
    clock.receive(remote, MS)
    stamp = clock.now(MS)
    assert stamp > remote
    assert unpack_stamp(stamp) == (MS, 5, 42)


def test_receive_of_an_older_stamp_still_moves_the_counter_on() -> None:
    clock = HLC(5)
    before = clock.now(MS)
    clock.receive(pack_stamp(MS - 100, 2, 9), MS)
    after = clock.now(MS)
    assert after > before
    assert unpack_stamp(after) == (MS, 5, 2)


def test_receive_with_physical_time_ahead_of_everything_restarts_the_counter() -> None:
    clock = HLC(5)
    clock.now(MS)
    clock.receive(pack_stamp(MS + 5, 2, 9), MS + 100)
    assert unpack_stamp(clock.now(MS + 100)) == (MS + 100, 5, 1)


def test_receive_at_the_end_of_the_counter_borrows_the_next_millisecond() -> None:
    clock = HLC(5)
    remote = pack_stamp(MS, 2, LOGICAL_MAX)
    clock.receive(remote, MS)
    stamp = clock.now(MS)
    assert stamp > remote
    assert unpack_stamp(stamp)[0] == MS + 1


def test_a_stamp_received_from_a_higher_node_in_the_same_millisecond_is_passed() -> None:
    # Node 1 hears of node 2's stamp (MS, 2, 0) while its own clock also reads MS. Every
    # stamp node 1 issues next must be above it, or its write loses to a write it has seen.
    clock = HLC(1)
    remote = pack_stamp(MS, 2, 0)
    clock.receive(remote, MS)
    assert clock.now(MS) > remote


# ------------------------------------------------------------------ properties

events = st.lists(
    st.one_of(
        st.tuples(st.just("now"), st.integers(-3, 3)),
        st.tuples(
            st.just("receive"),
            st.tuples(st.integers(-3, 3), st.integers(0, NODE_MAX), st.integers(0, LOGICAL_MAX)),
        ),
    ),
    max_size=40,
)


def play(clock: HLC, script: list, *, remote_nodes_below: int | None = None) -> None:
    """Run now/receive events around MS; every local stamp must beat everything seen."""
    seen = clock.last_stamp
    physical = MS
    for kind, arg in script:
        if kind == "now":
            physical += arg
            stamp = clock.now(physical)
            assert stamp > seen, (unpack_stamp(stamp), unpack_stamp(seen))
            seen = stamp
        else:
            offset, node, logical = arg
            if remote_nodes_below is not None:
                node = node % remote_nodes_below
            remote = pack_stamp(MS + offset, node, logical)
            clock.receive(remote, physical)
            seen = max(seen, remote)


@settings(max_examples=300, deadline=None)
@given(script=events)
def test_every_local_stamp_is_above_every_stamp_issued_or_received_from_lower_nodes(script: list) -> None:
    play(HLC(NODE_MAX), script, remote_nodes_below=NODE_MAX + 1)


@settings(max_examples=300, deadline=None)
@given(node_id=st.integers(1, NODE_MAX), script=events)
@example(node_id=1, script=[("receive", (0, 2, 0)), ("now", 0)])
def test_every_local_stamp_is_above_every_stamp_issued_or_received(node_id: int, script: list) -> None:
    play(HLC(node_id), script)


@settings(max_examples=300, deadline=None)
@given(
    node_id=st.integers(0, NODE_MAX),
    seed=st.tuples(st.integers(MS - 10, MS + 10), st.integers(0, LOGICAL_MAX)),
    readings=st.lists(st.integers(MS - 20, MS + 20), min_size=1, max_size=20),
)
def test_a_clock_seeded_with_its_own_last_stamp_never_issues_one_at_or_below_it(
    node_id: int, seed: tuple[int, int], readings: list[int]
) -> None:
    last = pack_stamp(seed[0], node_id, seed[1])
    clock = HLC(node_id, last_stamp=last)
    stamps = stamps_of(clock, readings)
    assert stamps[0] > last
    assert stamps == sorted(set(stamps))


@settings(max_examples=300, deadline=None)
@given(
    node_id=st.integers(0, NODE_MAX),
    seed=st.tuples(st.integers(MS - 10, MS + 10), st.integers(0, NODE_MAX), st.integers(0, LOGICAL_MAX)),
    readings=st.lists(st.integers(MS - 20, MS + 20), min_size=1, max_size=20),
)
@example(node_id=1, seed=(MS, 2, 0), readings=[MS])
def test_a_clock_seeded_with_last_stamp_never_issues_one_at_or_below_it(
    node_id: int, seed: tuple[int, int, int], readings: list[int]
) -> None:
    last = pack_stamp(*seed)
    clock = HLC(node_id, last_stamp=last)
    stamps = stamps_of(clock, readings)
    assert min(stamps) > last
