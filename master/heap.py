"""Keeps CPython's cycle collector off the master's long-lived heap.

The collector runs a full collection whenever the objects that survived the young generations
since the last one reach a quarter of all the long-lived ones, and a full collection visits
every tracked object: with 10,000 agents about 280,000 of them, 115 ms; with 50,000 over half
a second, during which nothing else runs (no offers, no heartbeats read). A large offer round
leaves enough survivors (its offers) to set one off: three in four rounds at 10,000 agents.

Almost everything the master keeps (agents, sessions, tasks, offers) is freed by reference
counting when it goes; the collector is only needed for cycles. So, as services with large
heaps do (gc.freeze, made for this), every FREEZE_EVERY seconds the young generations are
collected and what survived is frozen: moved where collections do not look. Every FULL_EVERY
seconds everything is thawed and collected once, so cyclic garbage that was frozen is
reclaimed after a bounded delay, at a time the tick loop picks rather than inside an offer
round. A stopped master thaws the heap (stop()), leaving the process as it found it.
"""

from __future__ import annotations

import gc

FREEZE_EVERY = 1.0  # seconds between freezes of what survived the young generations
FULL_EVERY = 600.0  # seconds between full collections of the whole (thawed) heap


class HeapKeeper:
    def __init__(self, now: float) -> None:
        self._next_freeze = now + FREEZE_EVERY
        self._next_full = now + FULL_EVERY

    def tick(self, now: float) -> None:
        """Called from the master's tick loop (every 50 ms): freezes or collects when due."""
        if now < self._next_freeze:
            return
        self._next_freeze = now + FREEZE_EVERY
        if now >= self._next_full:
            self._next_full = now + FULL_EVERY
            gc.unfreeze()
            gc.collect()
        else:
            gc.collect(1)  # young garbage goes now; only survivors are frozen
        gc.freeze()

    @staticmethod
    def stop() -> None:
        """Thaws everything: the collector sees the whole heap again."""
        gc.unfreeze()
