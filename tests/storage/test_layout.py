"""The storage modules import one another without a circle, imports made for type checking
only included: each one can be read, changed and tested with only the modules below it
(docs/storage.md, "Engine layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import replicaset.storage

PACKAGE = "replicaset.storage"


def package_imports(path: Path, package: str = PACKAGE) -> set[str]:
    """The modules of `package` that `path` imports anywhere in it, `if TYPE_CHECKING:` too."""
    names: set[str] = set()
    depth = package.count(".") + 1
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[depth] for alias in node.names if alias.name.startswith(package + "."))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = f"{package}.{module}".rstrip(".")
            if module == package:
                names.update(alias.name for alias in node.names)
            elif module.startswith(package + "."):
                names.add(module.split(".")[depth])
    return names


def import_graph(directory: Path = Path(replicaset.storage.__file__).parent, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules it imports; the package's `__init__` only re-exports."""
    modules = {path.stem: path for path in directory.glob("*.py") if path.stem != "__init__"}
    return {name: package_imports(path, package) & modules.keys() for name, path in modules.items()}


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """A list of modules each importing the next and the last the first, None when none."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str] | None:
        if name in path:
            return path[path.index(name):]
        if name in done:
            return None
        for imported in sorted(graph.get(name, ())):
            circle = visit(imported, [*path, name])
            if circle:
                return circle
        done.add(name)
        return None

    for name in sorted(graph):
        circle = visit(name, [])
        if circle:
            return circle
    return None


def test_the_storage_modules_import_one_another_without_a_circle() -> None:
    graph = import_graph()
    assert {"engine", "recovery", "batch", "apply_record", "transactions", "statements", "auto_ids"} <= graph.keys()
    assert find_circle(graph) is None


def test_the_check_finds_a_circle_and_type_checking_imports(tmp_path: Path) -> None:
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "from replicaset.storage import checkpoint as checkpoints\n"
        "if TYPE_CHECKING:\n"
        "    from replicaset.storage.engine import Engine\n"
    )
    assert package_imports(sample) == {"checkpoint", "engine"}
