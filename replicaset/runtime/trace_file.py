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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


class TraceFile:
    """Appends; each line is written whole (line buffered), so a killed server leaves
    every line it traced before the kill."""

    def __init__(self, path: Path, on_failure: Callable[[OSError], None] = lambda error: None,
                 host_clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        """`on_failure` hears of the first write that failed (a full disk): tracing stops
        there, so the file holds a prefix of the trace, never one with a hole in it, and
        the member goes on. `host_clock_ns` is the clock the members of one host share
        (a simulation gives its own)."""
        self.path = path
        self._file: TextIO | None = open(path, "a", buffering=1, encoding="utf-8")
        self._on_failure = on_failure
        self._host_clock_ns = host_clock_ns

    def __call__(self, event: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json.dumps({**event, "clock_ns": self._host_clock_ns()}, separators=(",", ":")) + "\n")
        except OSError as error:
            self._stop()
            self._on_failure(error)

    def _stop(self) -> None:
        file, self._file = self._file, None
        try:
            if file is not None:
                file.close()
        except OSError:
            pass  # the line that failed is still buffered: dropped with the rest

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
