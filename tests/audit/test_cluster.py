"""The audit job through `spark-submit` against a standalone master and worker on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.audit.conftest import ROOT, generate, member_dirs

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 60


def _env() -> dict[str, str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{what} did not listen on {port}")


def _wait_worker(log: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if "Successfully registered with master" in log.read_text(errors="replace"):
            return
        time.sleep(0.2)
    raise AssertionError(f"the worker did not register: {log.read_text()[-2000:]}")


def test_spark_submit_runs_the_job_on_a_standalone_master_and_worker(tmp_path: Path) -> None:
    """One job for both ways in, since each start of Spark costs half a minute of CI: the
    gap injected on m3 must be found through `spark-submit` by executors of a real worker."""
    manifest = generate(tmp_path / "set", "--inject", "gap", rows=3000)
    port = _free_port()
    env = _env()
    env["SPARK_LOG_DIR"] = str(tmp_path)
    env["SPARK_WORKER_DIR"] = str(tmp_path / "work")
    master_log, worker_log = tmp_path / "master.log", tmp_path / "worker.log"
    procs: list[subprocess.Popen] = []
    try:
        with open(master_log, "wb") as log:
            procs.append(subprocess.Popen(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        _wait_port(port, procs[0], "the master")
        with open(worker_log, "wb") as log:
            procs.append(subprocess.Popen(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                 f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--webui-port", "0",
                 "--cores", "1", "--memory", "1g"],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        _wait_worker(worker_log, procs[1])
        out = tmp_path / "report.json"
        done = subprocess.run(
            [str(BIN / "spark-submit"), "--master", f"spark://127.0.0.1:{port}",
             "--conf", "spark.ui.enabled=false", str(ROOT / "tools" / "spark_audit.py"),
             *map(str, member_dirs(manifest)), "--json", str(out), "--no-progress"],
            capture_output=True, text=True, env=env, timeout=240,
        )
        assert done.returncode == 1, done.stdout + done.stderr[-4000:]
        report = json.loads(out.read_text())
        assert report["master"] == f"spark://127.0.0.1:{port}"
        order = next(c for c in report["checks"] if c["name"] == "order")
        assert [(v["member"], v["lsn"]) for v in order["violations"]] == [
            ("m3", manifest["injected"][0]["lsn"])
        ]
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
