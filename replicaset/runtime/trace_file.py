"""The member driver's trace lines in a file, for a server started with `[debug]
trace_file`: one JSON object a line, named and parameterised as the actions of
`specs/VClockReplication.tla`, as the simulator's are.

Each line also carries `clock_ns`, CLOCK_MONOTONIC, which every process on the host
shares (the driver's `t` is the member's own trio clock): the members' files merge into
one order that respects causality on one host, since a row is received after it was sent.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class TraceFile:
    """Appends; each line is written whole (line buffered), so a killed server leaves
    every line it traced before the kill."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = open(path, "a", buffering=1, encoding="utf-8")

    def __call__(self, event: dict[str, Any]) -> None:
        self._file.write(json.dumps({**event, "clock_ns": time.monotonic_ns()}, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
