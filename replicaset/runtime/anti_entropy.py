"""Anti-entropy on the server: the host of the driver's `core.anti_entropy` (docs/design/README.md §4.8).

Every `[replication] anti_entropy_interval_seconds` the driver compares the member with
each peer SWIM holds alive (every peer it follows, without SWIM). A delta sync is what
the appliers do already; a snapshot transfer is the re-join of `replicaset serve --rejoin`: the node
stops, keeps its data directory aside and joins again through the peer under the same
UUID and id, starting from the peer's newest checkpoint, its local tables carried over.
The member does that by itself unless the operator turned it off (`[replication]
auto_rejoin = false`); then it logs `snapshot_transfer_needed` once, with the reason, and
goes on streaming. The counts of repairs are kept in the data directory (`repairs.py`)
whenever they change, before a re-join stops the node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import trio

from replicaset.config import Config
from replicaset.member import AntiEntropyAction, MemberDriver
from replicaset.runtime import repairs


class AntiEntropyNode(Protocol):
    """What anti-entropy needs of its member: a snapshot transfer is its re-join."""

    config: Config
    driver: MemberDriver
    log: Any
    data_dir: Path
    allow_rejoin: bool

    def members(self) -> list[tuple[int, str, str]]: ...

    def rejoin(self, through: str) -> None: ...


class AntiEntropyHost:
    def __init__(self, node: AntiEntropyNode) -> None:
        self._node = node
        self._told: tuple[int, str] | None = None  # the snapshot transfer last logged as needed
        self._kept = dict(node.driver.anti_entropy.runs)  # the counts as the data directory holds them

    async def run(self) -> None:
        interval = float(self._node.config["replication.anti_entropy_interval_seconds"])
        while True:
            await trio.sleep(interval)
            self.check()

    def check(self) -> None:
        node = self._node
        actions = node.driver.anti_entropy_check(trio.current_time())
        self.keep_counts()
        for tagged in actions:
            assert isinstance(tagged, AntiEntropyAction)
            transfer = tagged.action
            address = {i: a for i, _, a in node.members()}.get(transfer.through)
            if address is None:
                continue
            if node.allow_rejoin:
                node.log.warning("snapshot_transfer", through=address, peer=transfer.through, reason=transfer.reason,
                                 behind_rows=transfer.behind_rows)
                node.rejoin(address)
            elif self._told != (transfer.through, transfer.reason):
                self._told = (transfer.through, transfer.reason)
                node.log.warning("snapshot_transfer_needed", peer=transfer.through, reason=transfer.reason,
                                 behind_rows=transfer.behind_rows,
                                 hint="restart with `replicaset serve --rejoin` or set [replication] auto_rejoin = true")

    def keep_counts(self) -> None:
        """The repairs counted, into the data directory when they changed."""
        runs = self._node.driver.anti_entropy.runs
        if runs != self._kept:
            repairs.save(self._node.data_dir, runs)
            self._kept = dict(runs)

    def info(self) -> dict[str, Any]:
        """`box.info.anti_entropy`: repairs by kind since the member was made (delta, snapshot
        and gap, across restarts and re-joins), and each alive peer at the last check."""
        core = self._node.driver.anti_entropy
        return {
            "runs": {kind.value: count for kind, count in core.runs.items()},
            "peers": {peer: {"repair": c.repair.value if c.repair else None, "behind_rows": c.behind_rows,
                             "behind_s": round(c.behind_s, 3), "reason": c.reason}
                      for peer, c in sorted(core.checks.items())},
        }
