"""Time the master was keeping up: what an agent's silence is measured on.

A master that falls behind (a burst of registrations, a long cycle, a stalled machine) leaves
the agents' heartbeats waiting in its own queues. Measured on the wall clock, those agents look
silent, are removed while alive, register again and deepen the backlog: with 50,000 emulated
agents the master removed 31,777 live ones that way. Measured here, a stretch in which the
master's tick loop ran late counts only as long as the tick was meant to take, so silence is
judged on evidence (ticks the master did run without hearing from the agent), not on the
master's own backlog. An agent that is really gone is still removed after the agent timeout of
a master that keeps up, and proportionally later on one that does not.

A master can also be behind on reading while its loop ticks on time: the agents' messages
wait in gRPC's queues instead. IntakeLag measures that wait from the heartbeats' send times.

Pure: the tick loop says when it ran and how long after the last run it meant to; the agent
link says when each heartbeat was sent and read.
"""

from __future__ import annotations

import statistics
from collections import deque

__all__ = ["Attention", "IntakeLag"]

# A tick may run this many times its intended step late and still count in full; beyond that
# the master was behind, and the excess is not counted.
SLACK = 2.0


class Attention:
    def __init__(self, now: float) -> None:
        self._last = now  # clock time of the last tick
        self._attended = 0.0  # attention time at the last tick
        self._step = 0.0  # the step the tick loop meant (0 until it says)
        self.lag = 0.0  # how late the last tick ran beyond its step (seconds)
        self.unattended = 0.0  # total clock time not counted

    def tick(self, now: float, step: float) -> None:
        """The tick loop ran at `now`, meaning to run `step` seconds after its last run."""
        gap = max(0.0, now - self._last)
        counted = min(gap, SLACK * step)
        self.lag = max(0.0, gap - step)
        self.unattended += gap - counted
        self._attended += counted
        self._last, self._step = now, step

    def behind(self, now: float) -> float:
        """Seconds the master is behind on its work: how late its last tick ran, or how
        overdue the next one is, whichever is more (0 before the tick loop first ran)."""
        if not self._step:
            return 0.0
        return max(self.lag, now - self._last - self._step)

    def now(self, now: float) -> float:
        """Attention time at clock time `now` (between ticks: as the next tick will count it;
        before the first tick, the clock itself)."""
        since = max(0.0, now - self._last)
        if self._step:
            since = min(since, SLACK * self._step)
        return self._attended + since


class IntakeLag:
    """How long agents' messages waited before the master read them, from the heartbeats' own
    send times (each carries the agent's wall clock).

    A master behind on reading (its gRPC queues full, its loop still ticking on time) hears
    every agent late by about the same amount; a dead agent sends nothing and moves nothing.
    The median delay of the heartbeats read in the last HORIZON seconds (at most WINDOW of
    them) is that backlog, and silence is judged net of it; with none read in that time it is
    0. It assumes roughly synchronized clocks (as certificates and logs do): a skewed clock can
    only delay a removal, and by at most `cap` seconds (the agent timeout).
    """

    WINDOW = 255  # heartbeats the median is taken over, at most
    EVERY = 32  # heartbeats between recomputations, once the window is full
    HORIZON = 10.0  # seconds: older readings say nothing about the queues now

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self._lag = 0.0
        self._recent: deque[tuple[float, float]] = deque(maxlen=self.WINDOW)  # (read at, wait)
        self._seen = 0

    def observe(self, sent_at: float, now: float) -> None:
        """A heartbeat sent at `sent_at` (the agent's wall clock) read at `now` (the master's)."""
        if sent_at <= 0:
            return  # no send time given
        recent = self._recent
        recent.append((now, now - sent_at))
        while recent[0][0] < now - self.HORIZON:
            recent.popleft()
        self._seen += 1
        if self._seen % self.EVERY == 0 or len(recent) < self.EVERY:
            waits = statistics.median(wait for _, wait in recent)
            self._lag = min(self.cap, max(0.0, waits))

    def lag(self, now: float) -> float:
        """The backlog at `now` (wall clock): 0 once nothing was read for HORIZON seconds."""
        if not self._recent or self._recent[-1][0] < now - self.HORIZON:
            return 0.0
        return self._lag
