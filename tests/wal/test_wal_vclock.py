"""VClock algebra and its packed form."""

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wal import Order, VClock, covers

small_clocks = st.dictionaries(st.integers(0, 31), st.integers(0, 20), max_size=6).map(VClock)
any_clocks = st.dictionaries(st.integers(0, 31), st.integers(0, 2**64 - 1)).map(VClock)


def meet(a: VClock, b: VClock) -> VClock:
    origins = set(a.to_dict()) | set(b.to_dict())
    return VClock({o: min(a.get(o), b.get(o)) for o in origins})


@settings(max_examples=200, deadline=None)
@given(a=small_clocks, b=small_clocks, c=small_clocks)
def test_merge_is_commutative_associative_idempotent(a: VClock, b: VClock, c: VClock) -> None:
    before = (a.copy(), b.copy())
    assert a.merge(b) == b.merge(a)
    assert a.merge(b).merge(c) == a.merge(b.merge(c))
    assert a.merge(a) == a
    assert a <= a.merge(b) and b <= a.merge(b)
    assert (a, b) == before


@settings(max_examples=200, deadline=None)
@given(a=small_clocks, b=small_clocks)
def test_compare_is_consistent_with_le(a: VClock, b: VClock) -> None:
    expected = {
        (True, True): Order.EQUAL,
        (True, False): Order.BEFORE,
        (False, True): Order.AFTER,
        (False, False): Order.CONCURRENT,
    }[(a <= b, b <= a)]
    assert a.compare(b) is expected
    mirrored = {Order.BEFORE: Order.AFTER, Order.AFTER: Order.BEFORE}.get(expected, expected)
    assert b.compare(a) is mirrored
    assert (expected is Order.EQUAL) == (a == b)
    assert (a <= b) == all(lsn <= b.get(origin) for origin, lsn in a.items())


@settings(max_examples=200, deadline=None)
@given(a=small_clocks, b=small_clocks)
def test_signature_is_additive(a: VClock, b: VClock) -> None:
    assert a.signature == sum(lsn for _, lsn in a.items())
    assert a.merge(b).signature + meet(a, b).signature == a.signature + b.signature


@settings(max_examples=200, deadline=None)
@given(clock=small_clocks, origin=st.integers(0, 31), step=st.integers(1, 5))
def test_follow_advances_signature_by_the_step(clock: VClock, origin: int, step: int) -> None:
    before = clock.signature
    clock.follow(origin, clock.get(origin) + step)
    assert clock.signature == before + step


@settings(max_examples=200, deadline=None)
@given(clock=small_clocks, origin=st.integers(0, 31), data=st.data())
def test_follow_refuses_non_increasing_lsn(clock: VClock, origin: int, data: st.DataObject) -> None:
    lsn = data.draw(st.integers(0, clock.get(origin)))
    saved = clock.copy()
    with pytest.raises(ValueError, match="vclock_follow"):
        clock.follow(origin, lsn)
    assert clock == saved


@settings(max_examples=200, deadline=None)
@given(clock=any_clocks)
def test_pack_unpack_round_trip(clock: VClock) -> None:
    assert VClock.unpack(clock.pack()) == clock
    assert msgpack.unpackb(clock.pack(), strict_map_key=False) == clock.to_dict()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        msgpack.packb([1, 2]),
        msgpack.packb({"a": 1}),
        msgpack.packb({1: -1}),
        msgpack.packb({32: 1}),
        msgpack.packb({-1: 1}),
        msgpack.packb({1: "x"}),
        msgpack.packb({1: 1.0}),
        msgpack.packb({True: 1}),
        msgpack.packb({1: 2}) + b"\x00",
        msgpack.packb({i: 1 for i in range(33)}),
    ],
)
def test_unpack_refuses_bad_input(data: bytes) -> None:
    with pytest.raises(ValueError):
        VClock.unpack(data)


def test_zero_entries_are_not_stored() -> None:
    assert VClock({1: 0}) == VClock()
    clock = VClock({2: 3, 1: 5})
    clock.reset(2, 0)
    assert clock == VClock({1: 5}) and clock.items() == [(1, 5)]


def test_reset_sets_unconditionally_and_copy_is_independent() -> None:
    clock = VClock({1: 5})
    copy = clock.copy()
    clock.reset(1, 2)
    assert clock.get(1) == 2 and copy.get(1) == 5 and clock.get(9) == 0


def test_presentation() -> None:
    clock = VClock({2: 3, 1: 5})
    assert repr(clock) == "{1: 5, 2: 3}"
    assert repr(VClock()) == "{}"
    assert clock.items() == [(1, 5), (2, 3)]
    assert clock.to_dict() == {1: 5, 2: 3}
    assert clock.signature == 8
    with pytest.raises(TypeError):
        hash(clock)


@pytest.mark.parametrize("items", [{32: 1}, {-1: 1}, {1: -1}, {1: 2**64}, {"1": 1}])
def test_constructor_validates(items: dict[object, object]) -> None:
    with pytest.raises(ValueError):
        VClock(items)  # type: ignore[arg-type]


def test_covers_asks_for_every_row_counted_and_replicated_drops_the_local_origin() -> None:
    held = VClock({0: 9, 1: 5, 2: 3})
    assert held.covers(VClock({1: 5, 2: 1})) and held.covers({1: 4}) and held.covers({})
    assert not held.covers({1: 6}) and not held.covers(VClock({3: 1}))
    assert held.replicated() == VClock({1: 5, 2: 3}) and held.get(0) == 9, "a new vclock; the original keeps origin 0"
    assert not VClock({1: 5}).covers(held) and VClock({1: 5, 2: 3}).covers(held.replicated())
    assert covers({1: 5}, {1: 5}) and not covers({}, VClock({1: 1})), "plain maps and vclocks alike"
