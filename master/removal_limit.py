"""How many silent agents the master may remove, and when: Mesos' --agent_removal_rate_limit.

A master that loses touch with many agents at once (a switch fails, or the master itself falls
behind) should not declare them all gone in one stroke: each removal makes every task of the
agent LOST and every framework relaunch them elsewhere. With a limit of N per window, removals
beyond it wait for the next window; an agent that speaks again meanwhile stays. Pure: the caller
passes the time.
"""

from __future__ import annotations

import re
from collections import deque

__all__ = ["RemovalLimit", "parse_rate"]

_UNITS = {"s": 1.0, "secs": 1.0, "mins": 60.0, "m": 60.0, "hrs": 3600.0, "h": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*\.?\d+)?\s*([a-z]+)\s*$")


def parse_rate(text: str) -> tuple[int, float]:
    """'1/10mins' -> (1, 600.0): at most 1 removal per 600 s; ValueError saying what to write."""
    match = _RATE.match(text)
    if not match or match.group(3) not in _UNITS or int(match.group(1)) < 1:
        raise ValueError(
            f"agent removal rate {text!r}: write N/PERIOD, e.g. 1/10mins, 5/1m or 100/30s "
            f"(units: {', '.join(_UNITS)})"
        )
    count = int(match.group(1))
    window = float(match.group(2) or 1) * _UNITS[match.group(3)]
    if window <= 0:
        raise ValueError(f"agent removal rate {text!r}: the period must be more than 0")
    return count, window


class RemovalLimit:
    """At most `count` removals in any `window` seconds (a sliding window)."""

    def __init__(self, count: int, window: float) -> None:
        self.count = count
        self.window = window
        self._recent: deque[float] = deque()

    def allow(self, now: float) -> bool:
        """True (and counted) if a removal may happen at `now`."""
        while self._recent and self._recent[0] <= now - self.window:
            self._recent.popleft()
        if len(self._recent) >= self.count:
            return False
        self._recent.append(now)
        return True

    def next_allowed(self, now: float) -> float:
        """When the next removal may happen (now, if one may)."""
        if len(self._recent) < self.count:
            return now
        return self._recent[0] + self.window
