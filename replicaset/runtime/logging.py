"""Structured logs: one JSON object a line on stderr, `instance_id` on every line."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info") -> None:
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def get_logger(instance_id: int | None, **context: Any) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger().bind(instance_id=instance_id, **context)


def event_sink(logger: structlog.typing.FilteringBoundLogger):  # type: ignore[no-untyped-def]
    """Adapt a logger to the `log(event, **fields)` callables the lower layers take."""

    def log(event: str, **fields: Any) -> None:
        logger.info(event, **fields)

    return log
