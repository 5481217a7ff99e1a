"""Durations as people write them (`90`, `90s`, `10m`, `1h30m`, `2d`): one reading for the
command line's flags and the dashboard's queries, so `--since 1h30m` means the same in both."""

from __future__ import annotations

import re

__all__ = ["DurationError", "parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PLAIN_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhd])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


class DurationError(ValueError):
    """Not a duration; the message shows what to write."""


def parse_duration(text: str) -> float:
    """Seconds from `90`, `90s`, `10m`, `1h30m` or `2d` (case and surrounding spaces aside)."""
    text = text.strip().lower()
    if _PLAIN_SECONDS.fullmatch(text):
        return float(text)
    if not _DURATION.fullmatch(text):
        raise DurationError(f"{text!r} is not a duration: write e.g. 90s, 10m, 1h30m or 2d")
    return sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(text))
