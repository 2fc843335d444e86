"""What a member's driver reads of its host: the store (the Engine, in the server and in
the simulator alike) and the membership the host keeps.

The driver decides nothing from these: it hands them to the cores, which do. They are
read, never written: rows reach the store through the host (the writer), not the driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from wal import VClock


class MemberStore(Protocol):
    """The member's data as replication sees it; `replicaset.storage.Engine` is one."""

    @property
    def vclock(self) -> VClock:
        """What the member holds durably applied: SUBSCRIBE carries it, acks report it."""
        ...

    @property
    def pending_vclock(self) -> VClock:
        """What the member holds, flushed or not: a row waiting for its schema goes once
        the schema is here."""
        ...

    @property
    def durable_vclock(self) -> VClock:
        """What an OS crash cannot take: relays ship the member's own rows up to it."""
        ...

    def last_txn(self) -> dict[int, tuple[int, int]]:
        """Per origin, `(lsn, txn_id)` of the last row held: SUBSCRIBE's split-brain probe."""
        ...

    def txn_at(self, origin: int, lsn: int) -> int | None:
        """The txn id of a row held, None when not held: a relay compares it with the
        subscriber's."""
        ...

    def stored_versions(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, int]]:
        """The committed version `(hlc, origin)` of each key that has one: a PREPARE
        compares it with the version its coordinator read."""
        ...

    def quorum_row(self, txn_id: int) -> tuple[int, int] | None:
        """`(origin, lsn)` of the row of quorum transaction `txn_id`, None when not held:
        the decision a restarted coordinator finds."""
        ...

    def log_start(self) -> VClock:
        """Where the log starts: a relay refuses a subscriber that needs rows before it."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """The set as the host knows it now: how many members are registered, whom the member
    follows (upstream keys, whether or not an applier runs for each yet), and the instance
    id behind each upstream key known to have one."""

    members: int
    upstreams: frozenset[str]
    ids: Mapping[str, int] = field(default_factory=dict)
