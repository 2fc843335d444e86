"""One Spark session for the whole audit suite (session start costs 5-6 s), and WAL sets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "gen_walset.py"


# The time limit of a test that runs Spark: the first one starts the session (half a minute
# of CI, over a minute on a loaded machine) and a job over a generated set takes minutes
# on a loaded machine. Every module whose tests use the session carries it.
SPARK_TIMEOUT = pytest.mark.timeout(600)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark")
    from replicaset.audit.session import open_session

    session = open_session("local[2]", driver_memory="1g")
    try:
        yield session
    finally:
        session.stop()


def generate(out: Path, *extra: str, rows: int = 6000) -> dict:
    """Run the generator as a user would; returns its manifest."""
    done = subprocess.run(
        [sys.executable, str(GENERATOR), str(out), "--rows", str(rows), "--segment-bytes", "60000", *extra],
        check=True, capture_output=True, text=True,
    )
    return json.loads(done.stdout)


def member_dirs(manifest: dict) -> list[Path]:
    return [Path(p) for p in manifest["members"].values()]
