"""One Spark session per audit run, sized for a 2-core machine.

`open_session` starts local[2] (or joins `--master URL`) with the UI off, few shuffle partitions,
the driver on 127.0.0.1 and this interpreter as the Python of the workers. Under `spark-submit`
the session it finds is reused (the submit already chose the master).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, TextIO

SHUFFLE_PARTITIONS = 4
DEFAULT_MASTER = "local[2]"
DEFAULT_DRIVER_MEMORY = "896m"
"""Enough for 10M WAL rows (their persisted columns take about 400 MiB) with the whole audit
under 2 GiB; a larger set spills what does not fit to disk, or takes --driver-memory."""
DRIVER_JAVA_OPTIONS = "-XX:+UseSerialGC"
"""G1's own structures took 83 MiB of the driver JVM at 10M rows; the serial collector needs a
few, and on two cores the audit ran as fast with it (docs/decisions.md)."""
PROGRESS_INTERVAL_S = 0.5


def prepare_environment() -> None:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def open_session(master: str | None = None, *, driver_memory: str = DEFAULT_DRIVER_MEMORY,
                 conf: dict[str, str] | None = None) -> Any:
    """`conf`: further Spark settings (the scaling benchmark caps `spark.cores.max`)."""
    prepare_environment()
    from pyspark.sql import SparkSession

    from replicaset.audit.source import WalDataSource

    active = SparkSession.getActiveSession()
    if active is not None and master is None:
        spark = active
    else:
        builder = (
            SparkSession.builder.appName("replicaset-audit")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
            .config("spark.default.parallelism", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.extraJavaOptions", DRIVER_JAVA_OPTIONS)
            .config("spark.sql.adaptive.enabled", "true")
            .config("spark.python.worker.reuse", "true")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
            .config("spark.executorEnv.SPARK_LOCAL_IP", "127.0.0.1")
        )
        for key, value in (conf or {}).items():
            builder = builder.config(key, value)
        if master is not None or not launched_by_spark_submit():
            builder = builder.master(master or DEFAULT_MASTER)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(WalDataSource)
    return spark


def launched_by_spark_submit() -> bool:
    """spark-submit starts the JVM first and hands its gateway port to this Python process."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


class Progress:
    """Prints the running stages' task counts to `stream` while a job runs (a daemon thread
    polling the status tracker: works on local[2] and on a standalone cluster alike)."""

    def __init__(self, spark: Any, label: str, stream: TextIO | None = None, enabled: bool = True) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._label = label
        self._stream = stream or sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._enabled = enabled
        self._last = ""

    def __enter__(self) -> Progress:
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._enabled:
            self._thread.join()
            if self._last:
                self._write(self._last.replace("\r", "") + "\n")

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except ValueError:  # the stream was closed under us
            pass

    def _run(self) -> None:
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            try:
                stages = [self._tracker.getStageInfo(s) for s in self._tracker.getActiveStageIds()]
            except Exception:  # the context is stopping
                return
            parts = [f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks" for s in stages if s]
            if parts:
                line = f"\r{self._label}: " + ", ".join(parts)
                if line != self._last:
                    self._last = line
                    self._write(line.ljust(78))
