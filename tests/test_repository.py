"""The tree holds source only: a clone downloads what is tracked, and a merge once added
196 MiB of unrelated wheels at the root. Any archive, or any file over 1 MB, fails CI
unless `tests/large_files.txt` names it as test data."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = ROOT / "tests" / "large_files.txt"
SIZE_MAX_BYTES = 1024 * 1024
ARCHIVE_SUFFIXES = (".whl", ".tar.gz", ".tgz", ".tar", ".zip", ".egg", ".jar", ".tar.bz2", ".tar.xz", ".7z", ".rar")


def _tracked() -> list[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing is tracked")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    return [name for name in out.stdout.decode().split("\0") if name]


def _allowed() -> set[str]:
    lines = ALLOWED.read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def offenders(tracked: list[str], root: Path, allowed: set[str]) -> list[str]:
    """Tracked archives and files over `SIZE_MAX_BYTES` not listed as test data, each with why."""
    found = []
    for name in tracked:
        if name in allowed:
            continue
        path = root / name
        if name.lower().endswith(ARCHIVE_SUFFIXES):
            found.append(f"{name}: an archive")
        elif path.is_file() and path.stat().st_size > SIZE_MAX_BYTES:
            found.append(f"{name}: {path.stat().st_size:,} bytes")
    return found


def test_no_archive_or_large_file_is_tracked() -> None:
    found = offenders(_tracked(), ROOT, _allowed())
    assert not found, "tracked files that are not source (list test data in tests/large_files.txt):\n" + "\n".join(found)


def test_the_check_finds_an_archive_and_a_large_file(tmp_path: Path) -> None:
    (tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl").write_bytes(b"PK")
    (tmp_path / "big.bin").write_bytes(b"\0" * (SIZE_MAX_BYTES + 1))
    (tmp_path / "data.bin").write_bytes(b"\0" * (SIZE_MAX_BYTES + 1))
    (tmp_path / "small.py").write_text("x = 1\n")
    tracked = ["numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl", "big.bin", "data.bin", "small.py"]
    assert offenders(tracked, tmp_path, {"data.bin"}) == [
        "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.whl: an archive",
        f"big.bin: {SIZE_MAX_BYTES + 1:,} bytes",
    ]


def test_the_tree_ignores_build_outputs_and_archives() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    names = ["x.whl", "dist/replicaset-0.1.0.tar.gz", "y.tar.gz"]
    out = subprocess.run(["git", "check-ignore", "--no-index", *names], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == names
