"""Keeps CPython's cycle collector off the master's long-lived heap.

The collector runs a full collection whenever the objects that survived the young generations
since the last one reach a quarter of all the long-lived ones, and a full collection visits
every tracked object: the master's core alone holds 166,000 of them with 10,000 agents (81 ms
to collect) and 496,000 with 40,000 (251 ms), its gRPC streams as many again, and nothing else
runs meanwhile (no offers, no heartbeats read). A master registering 50,000 agents, or making
50,000 offers, grows its heap by that quarter again and again.

Almost everything the master keeps (agents, sessions, tasks, offers) is freed by reference
counting when it goes; the collector is only needed for cycles. So, as services with large
heaps do (gc.freeze, made for this), every FREEZE_EVERY seconds the young generations are
collected and what survived is frozen: moved where collections do not look. Every FULL_EVERY
seconds, or once the frozen heap has doubled, everything is thawed and collected once, so
cyclic garbage that was frozen is reclaimed after a bounded delay, at a time the tick loop
picks; ended streams break their own task <-> frame cycles (Session.owner). A stopped master
thaws the heap (stop()), leaving the process as it found it. (common/runtime.tune_gc, which
makes young collections rarer, is the other half.)
"""

from __future__ import annotations

import gc

FREEZE_EVERY = 1.0  # seconds between freezes of what survived the young generations
FULL_EVERY = 600.0  # seconds between full collections of the whole (thawed) heap
# ... or sooner, once as much again as the last full pass left has been frozen since: cyclic
# garbage frozen meanwhile stays a bounded part of the heap, and a heap growing from nothing
# (50,000 agents registering) is collected a handful of times, not at every quarter.
FULL_WHEN_GROWN = 1.0
MIN_HEAP = 10_000  # objects: a small heap is not collected again for its first growth
# A full pass due while the master is busy (an offer round under way) waits for a quiet tick,
# but no longer than this: a round of 100,000 offers doubles the heap, and the pass it
# triggered (about half a second over the whole heap) held the round's later slices back.
DEFER_FULL_MAX = 10.0


class HeapKeeper:
    def __init__(self, now: float) -> None:
        self._next_freeze = now + FREEZE_EVERY
        self._next_full = now + FULL_EVERY
        self._heap_after_full = MIN_HEAP  # tracked objects the last full pass left
        self._frozen_since_full = 0
        self._full_due_since: float | None = None  # a full pass put off while busy
        # (Counted from the small unfrozen generation each time: gc.get_freeze_count() walks
        # the whole frozen list, ~0.3 s a call with 50,000 agents.)

    def tick(self, now: float, busy: bool = False) -> None:
        """Called from the master's tick loop (every 50 ms): freezes or collects when due. A
        full pass due while `busy` (an offer round under way) waits for a tick that is not, at
        most DEFER_FULL_MAX seconds; what survived is frozen meanwhile as usual."""
        if now < self._next_freeze:
            return
        self._next_freeze = now + FREEZE_EVERY
        gc.collect(1)  # young garbage goes now; only survivors are frozen
        self._frozen_since_full += len(gc.get_objects(generation=2))
        due = (
            now >= self._next_full
            or self._frozen_since_full > FULL_WHEN_GROWN * self._heap_after_full
        )
        if due and busy:
            if self._full_due_since is None:
                self._full_due_since = now
            due = now - self._full_due_since >= DEFER_FULL_MAX
        if due:
            self._full_due_since = None
            self._next_full = now + FULL_EVERY
            gc.unfreeze()
            gc.collect()
            self._heap_after_full = max(MIN_HEAP, len(gc.get_objects(generation=2)))
            self._frozen_since_full = 0
        gc.freeze()

    @staticmethod
    def stop() -> None:
        """Thaws everything: the collector sees the whole heap again."""
        gc.unfreeze()
