"""The audit job through `spark-submit` against a standalone master and worker on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from replicaset.testing.spark_standalone import BIN, spark_env, standalone_cluster
from tests.audit.conftest import ROOT, SPARK_TIMEOUT, generate, member_dirs

pytestmark = SPARK_TIMEOUT


def test_spark_submit_runs_the_job_on_a_standalone_master_and_worker(tmp_path: Path) -> None:
    """One job for both ways in, since each start of Spark costs half a minute of CI: the
    gap injected on m3 must be found through `spark-submit` by executors of a real worker."""
    manifest = generate(tmp_path / "set", "--inject", "gap", rows=3000)
    with standalone_cluster(tmp_path / "spark") as master:
        out = tmp_path / "report.json"
        done = subprocess.run(
            [str(BIN / "spark-submit"), "--master", master,
             "--conf", "spark.ui.enabled=false", str(ROOT / "tools" / "spark_audit.py"),
             *map(str, member_dirs(manifest)), "--json", str(out), "--no-progress"],
            capture_output=True, text=True, env=spark_env(tmp_path / "spark"), timeout=240,
        )
    assert done.returncode == 1, done.stdout + done.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["master"] == master
    order = next(c for c in report["checks"] if c["name"] == "order")
    assert [(v["member"], v["lsn"]) for v in order["violations"]] == [
        ("m3", manifest["injected"][0]["lsn"])
    ]
