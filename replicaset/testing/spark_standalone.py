"""A Spark standalone master and its workers on 127.0.0.1, for the audit's cluster test and its
scaling benchmark: started from the `spark-class` pyspark installs beside this interpreter, on
free ports, waited for until every worker has registered, stopped by pid on exit."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from replicaset.testing.processes import free_port

BIN = Path(sys.executable).parent
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
POLL_S = 0.2


def spark_env(log_dir: Path) -> dict[str, str]:
    """The environment of every Spark process started here: loopback, this interpreter as the
    Python of drivers and workers, logs and scratch under `log_dir`."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOG_DIR=str(log_dir),
               SPARK_WORKER_DIR=str(log_dir / "work"))
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return env


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the master exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(POLL_S)
    raise RuntimeError(f"the master did not listen on {port}: {log.read_text()[-2000:]}")


def _wait_registered(proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"a worker exited with {proc.returncode}: {log.read_text()[-2000:]}")
        if "Successfully registered with master" in log.read_text(errors="replace"):
            return
        time.sleep(POLL_S)
    raise RuntimeError(f"a worker did not register: {log.read_text()[-2000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def standalone_cluster(log_dir: Path, *, workers: int = 1, cores: int = 1,
                       memory: str = "1g") -> Iterator[str]:
    """Yields the master URL once `workers` workers of `cores` cores and `memory` each have
    registered; logs go to `log_dir` (master.log, worker-N.log)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = spark_env(log_dir)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = log_dir / "master.log"
        with open(master_log, "wb") as log:
            procs.append(subprocess.Popen(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master",
                 "--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                stdout=log, stderr=subprocess.STDOUT, env=env))
        _wait_port(port, procs[0], master_log)
        for n in range(workers):
            worker_log = log_dir / f"worker-{n}.log"
            with open(worker_log, "wb") as log:
                procs.append(subprocess.Popen(
                    [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                     "--host", "127.0.0.1", "--webui-port", "0", "--cores", str(cores),
                     "--memory", memory],
                    stdout=log, stderr=subprocess.STDOUT, env=env))
            _wait_registered(procs[-1], worker_log)
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)
