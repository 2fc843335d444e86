"""Logs and traces on a full disk (/dev/full answers every write with ENOSPC): a line that
cannot be written is dropped and counted, never raised into the task that logged it, and
the first line written after says how many went; a trace stops at its first failed line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from replicaset.runtime.logging import DroppingStderr
from replicaset.runtime.trace_file import TraceFile

DEV_FULL = Path("/dev/full")
pytestmark = pytest.mark.skipif(not DEV_FULL.exists(), reason="no /dev/full to stand for a full disk")


def test_log_lines_the_disk_cannot_take_are_dropped_and_counted_once_it_can(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    full = os.open(DEV_FULL, os.O_WRONLY)
    saved = os.dup(fd)
    try:
        stream = DroppingStderr(fd, instance_id=3)
        os.dup2(full, fd)
        for n in range(3):
            print(json.dumps({"event": "lost", "n": n}), file=stream, flush=True)  # as structlog's PrintLogger
        assert stream.dropped == 3
        os.dup2(saved, fd)
        print(json.dumps({"event": "kept"}), file=stream, flush=True)
    finally:
        for each in (fd, full, saved):
            os.close(each)
    lines = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert lines == [{"instance_id": 3, "event": "log_lines_dropped", "count": 3, "level": "error",
                      "reason": "the log file could not be written (no space left on device?)"}, {"event": "kept"}]


def test_a_trace_stops_at_its_first_failed_line_and_says_so_once() -> None:
    failures: list[OSError] = []
    trace = TraceFile(DEV_FULL, on_failure=failures.append)
    for n in range(3):
        trace({"action": "LocalWrite", "n": n})
    trace.close()
    assert len(failures) == 1 and "No space left on device" in str(failures[0])
