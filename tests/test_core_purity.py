"""Sans-IO cores import no trio, socket, os, time or global random (docs/design/style.md §1)."""

import ast
from pathlib import Path

import replicaset.core

FORBIDDEN = {"trio", "socket", "os", "time", "random", "asyncio", "threading", "select", "selectors"}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_cores_do_no_io():
    core_dir = Path(replicaset.core.__file__).parent
    modules = sorted(core_dir.glob("*.py"))
    assert modules, "no core modules found"
    for path in modules:
        bad = imported_modules(path) & FORBIDDEN
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_the_check_itself_catches_an_import(tmp_path):
    sample = tmp_path / "bad.py"
    sample.write_text("import os\nfrom trio import sleep\n")
    assert imported_modules(sample) & FORBIDDEN == {"os", "trio"}
