"""The trace file stamps each line with the host clock it is given."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

from replicaset.runtime.trace_file import TraceFile


def test_each_line_carries_the_host_clock_it_was_given_so_a_simulation_can_give_its_own(tmp_path: Path) -> None:
    ticks = itertools.count(1000, 7)
    trace = TraceFile(tmp_path / "trace.jsonl", host_clock_ns=lambda: next(ticks))
    trace({"op": "Send", "t": 0.5})
    trace({"op": "Receive", "t": 0.75})
    trace.close()
    lines = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    assert lines == [{"op": "Send", "t": 0.5, "clock_ns": 1000}, {"op": "Receive", "t": 0.75, "clock_ns": 1007}]
