"""A member of the replica set: its driver, which feeds the replication cores their events
and hands their actions to the host (the trio node, or the simulator) to carry out.

The public names are these; the modules behind them are the driver's own.
"""

from replicaset.member.actions import (
    Accepted,
    Action,
    AntiEntropyAction,
    ApplierAction,
    GcAction,
    PurgeAction,
    QuorumAction,
    RelayAction,
    SetAction,
    SwimAction,
)
from replicaset.member.driver import MemberDriver
from replicaset.member.store import MemberStore, Membership

__all__ = [
    "Accepted",
    "Action",
    "AntiEntropyAction",
    "ApplierAction",
    "GcAction",
    "PurgeAction",
    "QuorumAction",
    "MemberDriver",
    "MemberStore",
    "Membership",
    "RelayAction",
    "SetAction",
    "SwimAction",
]
