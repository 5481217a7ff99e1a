"""HeapKeeper: what survives the young generations is frozen (full collections stop visiting
the master's long-lived heap), cyclic garbage that was frozen is reclaimed by the periodic full
pass or once the heap has grown as much again, and stop() thaws everything."""

from __future__ import annotations

import asyncio
import gc
import weakref

from master_harness import start_master

from agora.master.heap import DEFER_FULL_MAX, FREEZE_EVERY, FULL_EVERY, HeapKeeper


class Node:
    peer: Node


def frozen_cycle(keeper: HeapKeeper, now: float) -> weakref.ref:
    """A two-object cycle, frozen by the tick at `now` while alive, then dropped: only the
    collector can free it, and it cannot see it until the heap is thawed."""
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    gone = weakref.ref(a)
    keeper.tick(now)
    del a, b
    gc.collect()
    assert gone() is not None, "a frozen cycle is out of the collector's sight"
    return gone


def test_frozen_cycles_wait_for_the_full_pass_and_stop_thaws_the_heap():
    try:
        keeper = HeapKeeper(now=0.0)
        keeper.tick(FREEZE_EVERY / 2)
        assert gc.get_freeze_count() == 0, "froze before FREEZE_EVERY"
        keeper.tick(FREEZE_EVERY)  # this process's whole heap: frozen (after a full pass)
        assert gc.get_freeze_count() > 0
        gone = frozen_cycle(keeper, 2 * FREEZE_EVERY)
        keeper.tick(3 * FREEZE_EVERY)  # an ordinary tick: young collections only
        assert gone() is not None
        keeper.tick(FREEZE_EVERY + FULL_EVERY)  # the full pass: thaw, collect, freeze again
        assert gone() is None
        assert gc.get_freeze_count() > 0
        HeapKeeper.stop()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()


def test_a_heap_that_doubled_is_collected_before_the_timer():
    try:
        keeper = HeapKeeper(now=0.0)
        keeper.tick(FREEZE_EVERY)  # the first freeze (after a full pass)
        gone = frozen_cycle(keeper, 2 * FREEZE_EVERY)
        # The heap grows (a fleet registering): more than doubles.
        grown = [[i] for i in range(2 * gc.get_freeze_count() + 20_000)]
        keeper.tick(3 * FREEZE_EVERY)  # long before FULL_EVERY
        assert gone() is None
        del grown
    finally:
        gc.unfreeze()


def test_a_full_pass_due_while_busy_waits_for_a_quiet_tick_or_its_limit():
    try:
        keeper = HeapKeeper(now=0.0)
        keeper.tick(FREEZE_EVERY)
        gone = frozen_cycle(keeper, 2 * FREEZE_EVERY)
        due = FREEZE_EVERY + FULL_EVERY
        keeper.tick(due, busy=True)  # an offer round under way: put off
        assert gone() is not None
        keeper.tick(due + FREEZE_EVERY)  # the next quiet tick: done
        assert gone() is None

        gone = frozen_cycle(keeper, due + 2 * FREEZE_EVERY)
        due = due + FREEZE_EVERY + FULL_EVERY
        keeper.tick(due, busy=True)
        keeper.tick(due + DEFER_FULL_MAX / 2, busy=True)
        assert gone() is not None
        keeper.tick(due + DEFER_FULL_MAX, busy=True)  # busy for too long: done anyway
        assert gone() is None
    finally:
        gc.unfreeze()


async def test_a_running_master_keeps_its_heap_frozen_and_thaws_it_when_it_stops():
    master = await start_master(None)
    try:
        await asyncio.sleep(FREEZE_EVERY + 0.5)  # its tick loop's first freeze
        assert gc.get_freeze_count() > 0
        await master.stop(0)
        assert gc.get_freeze_count() == 0  # Master.stop thawed it
    finally:
        await master.stop(0)  # (does nothing once stopped)
        gc.unfreeze()
