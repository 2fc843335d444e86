"""The runtime's modules import one another without a circle, imports made for type checking
only included (issue "One host"): a host is handed its member as the narrow interface it
declares (`SwimNode`, `QuorumNode`, `WalGcNode`...), never as the `Node` it would have to
import, so each host can be built around another member, a test's or the simulator's."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import replicaset.runtime
import replicaset.runtime.node
from replicaset.runtime.anti_entropy import AntiEntropyNode
from replicaset.runtime.applier import ApplierHost
from replicaset.runtime.checkpoint_daemon import CheckpointNode
from replicaset.runtime.quorum import QuorumNode
from replicaset.runtime.swim import SwimNode
from replicaset.runtime.wal_gc import WalGcNode
from tests.storage.test_layout import find_circle, import_graph

PACKAGE = "replicaset.runtime"
# The member's composition and its faces (the server, its sessions, the console's `box`,
# the metrics, the join command's start) are the only modules that may know `Node`.
KNOW_THE_NODE = {"server", "session", "box", "metrics", "join"}


def runtime_graph() -> dict[str, set[str]]:
    return import_graph(Path(replicaset.runtime.__file__).parent, PACKAGE)


def test_the_runtime_modules_import_one_another_without_a_circle() -> None:
    graph = runtime_graph()
    assert {"node", "quorum", "swim", "wal_gc", "anti_entropy", "writer", "applier", "relay"} <= graph.keys()
    assert find_circle(graph) is None


def test_the_hosts_get_their_member_as_an_interface_of_their_own() -> None:
    knowing = {name for name, imported in runtime_graph().items() if "node" in imported}
    assert knowing <= KNOW_THE_NODE, sorted(knowing - KNOW_THE_NODE)


def node_names() -> set[str]:
    """What `Node` defines: its methods, properties and class attributes, and every
    attribute its methods set on `self`."""
    tree = ast.parse(Path(replicaset.runtime.node.__file__).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Node")
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                  and t.value.id == "self"}
    return names


def protocol_names(protocol: type) -> set[str]:
    return set(getattr(protocol, "__annotations__", {})) | {
        name for name, value in vars(protocol).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))}


@pytest.mark.parametrize("protocol", [SwimNode, QuorumNode, WalGcNode, AntiEntropyNode, CheckpointNode, ApplierHost],
                         ids=lambda p: p.__name__)
def test_the_node_gives_each_host_what_its_interface_names(protocol: type) -> None:
    missing = protocol_names(protocol) - node_names()
    assert protocol_names(protocol) and not missing, sorted(missing)
