"""The packages follow the layers: the server installs and runs without the audit's Spark,
pyarrow and matplotlib (`pip install replicaset`); `replicaset[audit]` adds them. A member
loads the metrics client only when it exports metrics."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from replicaset import cli

ROOT = Path(__file__).resolve().parents[1]
AUDIT_ONLY = {"pyspark", "pyarrow", "matplotlib"}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}


def test_the_audit_packages_are_an_extra_not_a_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not _requirement_names(project["dependencies"]) & AUDIT_ONLY
    assert _requirement_names(project["optional-dependencies"]["audit"]) == AUDIT_ONLY
    assert set(cli.AUDIT_PACKAGES) == AUDIT_ONLY


def test_the_server_and_its_tools_never_load_the_audit_packages() -> None:
    code = (
        "import sys, replicaset.cli, replicaset.runtime.node, replicaset.demo, replicaset.sim, replicaset.console, replicaset.testing.processes; "
        f"loaded = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(AUDIT_ONLY)!r}); "
        "print(loaded); sys.exit(1 if loaded else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_member_loads_the_metrics_client_only_to_export_metrics() -> None:
    code = (
        "import sys, replicaset.cli, replicaset.runtime.node, replicaset.runtime.server; "
        "print('prometheus_client' in sys.modules); "
        "import replicaset.runtime.metrics; print('prometheus_client' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_replicaset_audit_without_the_extra_says_how_to_install_it(monkeypatch, capsys, tmp_path: Path) -> None:
    real_find_spec = cli.importlib.util.find_spec
    monkeypatch.setattr(cli.importlib.util, "find_spec", lambda name: None if name == "pyspark" else real_find_spec(name))
    assert cli.main(["audit", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "missing: pyspark" in err and "pip install 'replicaset[audit]'" in err
