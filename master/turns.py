"""Letting the loop turn during a long run of work done without awaiting (pure timing).

A batch of calls or of relayed messages is handled item by item, back to back; one item can be
1,000 tasks or an agent's batch of hundreds of updates, so the loop is given a turn by time,
not by count: heartbeats, offers and other callers then wait at most about YIELD_AFTER.
"""

from __future__ import annotations

import asyncio
import time

__all__ = ["YIELD_AFTER", "Turns"]

YIELD_AFTER = 0.005


class Turns:
    """`due()` once `after` seconds have passed since the start or the last `take()`.

    Real time, not the master's clock: what is measured is how long this run of work has held
    the loop, which a ManualClock (still while the work runs) would never see."""

    def __init__(self, after: float = YIELD_AFTER) -> None:
        self._after = after
        self._since = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self._since > self._after

    async def take(self) -> None:
        """Lets the loop turn once, and starts the next stretch."""
        await asyncio.sleep(0)
        self._since = time.monotonic()
