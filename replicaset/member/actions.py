"""The driver's actions: a core's action, tagged with the core it belongs to, so that the
host knows on which link to carry it out."""

from __future__ import annotations

from dataclasses import dataclass

from replicaset.core import anti_entropy, gc, purge, quorum, swim
from replicaset.core import replication as repl
from replicaset.core import replicaset as rs


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplierAction:
    """An action of the applier following upstream `key` (connect, subscribe, apply, ack,
    disconnect)."""

    key: str
    action: repl.Action


@dataclass(frozen=True, slots=True, kw_only=True)
class RelayAction:
    """An action of the relay serving connection `conn` (read the log, send rows or a
    heartbeat, sync the WAL, disconnect)."""

    conn: int
    action: repl.Action


@dataclass(frozen=True, slots=True, kw_only=True)
class SetAction:
    """An action of the replica-set core (recovery done or given up for a peer, connect
    quorum reached, registration held, rejoin)."""

    action: rs.Action


@dataclass(frozen=True, slots=True, kw_only=True)
class QuorumAction:
    """An action of the coordinator or the participant of quorum transactions (PREPARE,
    this member's own answer, the decision, COMMIT or ABORT to send, the client's answer)."""

    action: quorum.Action | quorum.Prepared | quorum.Conflicted


@dataclass(frozen=True, slots=True, kw_only=True)
class GcAction:
    """An action of WAL GC: remove the oldest segments of the log."""

    action: gc.RemoveSegments


@dataclass(frozen=True, slots=True, kw_only=True)
class PurgeAction:
    """An action of tombstone purge: delete tombstones, keep a settled origin's end, or
    stop purging."""

    action: purge.Action


@dataclass(frozen=True, slots=True, kw_only=True)
class AntiEntropyAction:
    """An action of anti-entropy: transfer a checkpoint from a peer."""

    action: anti_entropy.SnapshotTransfer


@dataclass(frozen=True, slots=True, kw_only=True)
class SwimAction:
    """An action of SWIM: a datagram to send, or a member's state changed."""

    action: swim.Action


Action = (ApplierAction | RelayAction | SetAction | QuorumAction | GcAction | PurgeAction | AntiEntropyAction
          | SwimAction)


@dataclass(frozen=True, slots=True, kw_only=True)
class Accepted:
    """A subscriber accepted: answer with `vclock`, then carry out `actions`."""

    vclock: dict[int, int]
    actions: list[Action]
