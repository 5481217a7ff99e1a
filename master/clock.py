"""The master's sense of time: the present, and timers that fire later.

Everything in the master that depends on time (agent silence, offer and failover timeouts,
decline filters, offer latency) reads it through one `Clock`, so that tests can drive the whole
state machine with a `ManualClock`: advancing it fires the timers that fell due, in order,
without sleeping. Mesos pauses its clock in the allocator tests for the same reason.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "LoopClock", "ManualClock", "Timer"]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Runs `callback` once, `delay` seconds from now, unless the timer is cancelled."""
        ...


class LoopClock:
    """Real time: time.monotonic, and timers on the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


class _ManualTimer:
    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due, self.callback, self.cancelled = due, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time that moves only when told to: `advance(seconds)` runs every timer that falls due,
    each at its own time (the clock reads the timer's due time while its callback runs)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()  # ties fire in the order they were set

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = _ManualTimer(self._now + max(0.0, delay), callback)
        heapq.heappush(self._timers, (timer.due, next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        until = self._now + seconds
        while self._timers and self._timers[0][0] <= until:
            due, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, due)
            timer.callback()
        self._now = until

    def pending(self) -> int:
        """Timers set and neither fired nor cancelled."""
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)
