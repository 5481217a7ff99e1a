"""The master's sense of time: the present, and timers that fire later.

Everything in the master that depends on time (agent silence, offer and failover timeouts,
decline filters, offer latency, and the wall-clock stamps it keeps and shows: registration
times, drain deadlines) reads it through one `Clock`, so that tests can drive the whole state
machine with a `ManualClock`: advancing it fires the timers that fell due, in order, without
sleeping. Mesos pauses its clock in the allocator tests for the same reason.

Two scales, one clock: `now()` is monotonic (durations, timers); `wall()` is epoch seconds
(what is stored, shown, or compared with a peer's stamp). A `ManualClock` moves both together.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["WALL_START", "Clock", "LoopClock", "ManualClock", "Timer"]


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""
        ...

    def wall(self) -> float:
        """Seconds since the epoch (may jump when the system clock is set)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Runs `callback` once, `delay` seconds from now, unless the timer is cancelled."""
        ...


class LoopClock:
    """Real time: time.monotonic and time.time, and timers on the running event loop."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(delay, callback)


class _ManualTimer:
    def __init__(self, due: float, callback: Callable[[], None]) -> None:
        self.due, self.callback, self.cancelled = due, callback, False

    def cancel(self) -> None:
        self.cancelled = True


# ManualClock's wall time at its start unless told otherwise: a fixed instant (2023-11-14
# 22:13:20 UTC), so that a test's stamps are the same on every run.
WALL_START = 1_700_000_000.0


class ManualClock:
    """Time that moves only when told to: `advance(seconds)` runs every timer that falls due,
    each at its own time (the clock reads the timer's due time while its callback runs).

    `start` is `now()` at the start, `wall_start` is `wall()` then; both move by the same
    `advance`, so `wall() - now()` never changes."""

    def __init__(self, start: float = 0.0, wall_start: float = WALL_START) -> None:
        self._start, self._now, self._wall_start = start, start, wall_start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._order = itertools.count()  # ties fire in the order they were set

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._wall_start + (self._now - self._start)

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
