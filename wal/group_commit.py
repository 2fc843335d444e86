"""When to flush a group commit: a sans-IO policy with no clock of its own.

The writer adds each transaction's encoded size as it queues it; the policy answers whether a
bound (bytes or count) is reached, and tells the deadline by which the batch must be flushed
anyway, given when its first transaction arrived. The runtime owns the timer and passes times in,
so the simulator can drive the same policy in virtual time.
"""


class GroupCommitPolicy:
    """Bounds of one group commit batch.

    `add` reports a bound once it is reached, so a batch may exceed `max_batch_bytes` by its last
    transaction, itself bounded by `max_txn_bytes` upstream.
    """

    __slots__ = (
        "max_batch_bytes",
        "max_batch_count",
        "max_delay_ms",
        "_batch_bytes",
        "_batch_count",
    )

    def __init__(self, max_batch_bytes: int, max_batch_count: int, max_delay_ms: float) -> None:
        if max_batch_bytes <= 0:
            raise ValueError(f"max_batch_bytes must be positive, got {max_batch_bytes}")
        if max_batch_count <= 0:
            raise ValueError(f"max_batch_count must be positive, got {max_batch_count}")
        if max_delay_ms < 0:
            raise ValueError(f"max_delay_ms must not be negative, got {max_delay_ms}")
        self.max_batch_bytes = max_batch_bytes
        self.max_batch_count = max_batch_count
        self.max_delay_ms = max_delay_ms
        self._batch_bytes = 0
        self._batch_count = 0

    @property
    def batch_bytes(self) -> int:
        return self._batch_bytes

    @property
    def batch_count(self) -> int:
        return self._batch_count

    def add(self, nbytes: int) -> bool:
        """Count one transaction of `nbytes` into the batch; True means flush now."""
        if nbytes < 0:
            raise ValueError(f"a transaction cannot be {nbytes} bytes")
        self._batch_bytes += nbytes
        self._batch_count += 1
        return (
            self._batch_bytes >= self.max_batch_bytes
            or self._batch_count >= self.max_batch_count
        )

    def deadline_ms(self, first_added_at_ms: float) -> float:
        """The latest time to flush a batch whose first transaction was added at the given time."""
        return first_added_at_ms + self.max_delay_ms

    def reset(self) -> None:
        """Start an empty batch, after a flush."""
        self._batch_bytes = 0
        self._batch_count = 0
