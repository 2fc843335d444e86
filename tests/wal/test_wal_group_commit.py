"""The group commit policy: flush at a byte or count bound, or at the deadline the caller times."""

import pytest

from wal import GroupCommitPolicy


def test_count_bound() -> None:
    policy = GroupCommitPolicy(max_batch_bytes=10_000, max_batch_count=3, max_delay_ms=2)
    assert [policy.add(10) for _ in range(3)] == [False, False, True]
    assert (policy.batch_count, policy.batch_bytes) == (3, 30)


def test_byte_bound_is_reached_by_the_transaction_that_crosses_it() -> None:
    policy = GroupCommitPolicy(max_batch_bytes=100, max_batch_count=50, max_delay_ms=2)
    assert policy.add(60) is False
    assert policy.add(39) is False
    assert policy.add(1) is True
    policy.reset()
    assert policy.add(250) is True, "one transaction over the bound flushes at once"


def test_reset_starts_an_empty_batch() -> None:
    policy = GroupCommitPolicy(max_batch_bytes=100, max_batch_count=2, max_delay_ms=2)
    policy.add(99)
    policy.reset()
    assert (policy.batch_count, policy.batch_bytes) == (0, 0)
    assert policy.add(50) is False


def test_deadline_is_counted_from_the_first_transaction() -> None:
    policy = GroupCommitPolicy(max_batch_bytes=100, max_batch_count=2, max_delay_ms=1.5)
    assert policy.deadline_ms(1000) == 1001.5
    assert GroupCommitPolicy(1, 1, 0).deadline_ms(7) == 7


@pytest.mark.parametrize(
    "bounds", [(0, 1, 1), (1, 0, 1), (1, 1, -1), (-5, 1, 1)]
)
def test_bounds_are_validated(bounds: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        GroupCommitPolicy(*bounds)


def test_negative_size_is_refused() -> None:
    with pytest.raises(ValueError):
        GroupCommitPolicy(1, 1, 1).add(-1)
