"""Structured logs: one JSON object a line on stderr, `instance_id` on every line."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class DroppingStderr:
    """stderr for the log lines, written a whole line per write(2). A line the file behind
    stderr cannot take (a full disk under the log file) is dropped and counted rather than
    raised into the task that logged it: a member keeps serving when its log cannot grow,
    and the first line written after that says how many went (as a syslog daemon does)."""

    def __init__(self, fd: int = 2, instance_id: int | None = None) -> None:
        self._fd = fd
        self._instance_id = instance_id
        self._partial = ""
        self.dropped = 0
        self._torn = False  # a line cut short by the error: the next one starts on a line of its own

    def write(self, text: str) -> int:
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            self._write_line(line + "\n")
        return len(text)

    def flush(self) -> None:
        """Lines go out whole as they end; nothing is held back."""

    def _write_line(self, line: str) -> None:
        try:
            if self._torn:
                self._write_all(b"\n")
                self._torn = False
            if self.dropped:
                note = json.dumps({"instance_id": self._instance_id, "event": "log_lines_dropped",
                                   "count": self.dropped, "level": "error",
                                   "reason": "the log file could not be written (no space left on device?)"})
                self._write_all((note + "\n").encode())
                self.dropped = 0
            self._write_all(line.encode())
        except OSError:
            self.dropped += 1

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._fd, view):]
            except OSError:
                self._torn = len(view) < len(data)
                raise


class _LevelFilter:
    """Drops the lines below the level of the moment. The loggers the modules hold were
    bound once, at the level of that time: `box.cfg{log_level = ...}` changes what they
    log through this filter, which every line passes first."""

    def __init__(self) -> None:
        self.level = logging.INFO

    def __call__(self, logger: Any, method_name: str, event_dict: Any) -> Any:
        if _METHOD_LEVELS.get(method_name, logging.CRITICAL) < self.level:
            raise structlog.DropEvent
        return event_dict


_METHOD_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "msg": logging.INFO, "warning": logging.WARNING,
                  "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
                  "critical": logging.CRITICAL, "fatal": logging.CRITICAL}
_level_filter = _LevelFilter()


def set_level(level: str) -> None:
    """`log_level` from now on, for every logger of the process (`box.cfg{log_level = ...}`)."""
    _level_filter.level = _LEVELS[level]


def configure(level: str = "info", instance_id: int | None = None) -> None:
    set_level(level)
    structlog.configure(
        processors=[
            _level_filter,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=DroppingStderr(sys.stderr.fileno(), instance_id)),
        cache_logger_on_first_use=False,
    )


def get_logger(instance_id: int | None, **context: Any) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger().bind(instance_id=instance_id, **context)


def event_sink(logger: structlog.typing.FilteringBoundLogger):  # type: ignore[no-untyped-def]
    """Adapt a logger to the `log(event, **fields)` callables the lower layers take."""

    def log(event: str, **fields: Any) -> None:
        logger.info(event, **fields)

    return log
