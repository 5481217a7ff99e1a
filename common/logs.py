"""structlog set-up, called only from entry points (the `agora` command, examples, tests).

Nothing in Agora configures logging at import time; a library user keeps their own set-up.
"""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(
    level: str = "info", fmt: str = "console", stream=None, final: bool = False
) -> None:
    """Routes structlog to `stream` (stderr) as human-readable lines or JSON objects.

    `final`: the process never configures logging again (a daemon's entry point), so each
    logger may keep what it resolved on first use; without it every `log.bind()` builds its
    logger afresh, ~3% of a busy master's CPU. Tests and embedders that reconfigure leave it.
    """
    stream = stream or sys.stderr
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}: use debug, info, warning or error")
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=final,
    )
