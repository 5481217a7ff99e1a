"""The simulator's virtual clock: time is the due time of the event being run, nothing else.

Events are callbacks due at a time; `run_until` runs them in time order (ties in the order they
were scheduled) and the clock jumps from one to the next, so an hour with nothing due costs
nothing. Nothing here reads the machine's clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable

__all__ = ["VirtualClock"]


class VirtualClock:
    def __init__(self, start: float = 0.0) -> None:
        self.now = start
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self.events_run = 0

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Runs `callback` at virtual time `when` (now, if `when` is already past)."""
        if math.isnan(when):
            raise ValueError("an event needs a time, got nan")
        heapq.heappush(self._queue, (max(when, self.now), next(self._order), callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def next_due(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    def run_until(self, end: float) -> None:
        """Runs every event due by `end`, in order; the clock then reads `end` (or the last
        event's time, if the queue ran dry before it and `end` is infinite)."""
        queue = self._queue
        while queue and queue[0][0] <= end:
            when, _, callback = heapq.heappop(queue)
            self.now = when
            self.events_run += 1
            callback()
        if math.isfinite(end):
            self.now = max(self.now, end)
