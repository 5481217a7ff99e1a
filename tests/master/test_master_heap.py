"""HeapKeeper: what survives the young generations is frozen (full collections stop visiting
the master's long-lived heap), cyclic garbage that was frozen is reclaimed by the periodic full
pass, and stop() thaws everything."""

from __future__ import annotations

import gc
import weakref

from agora.master.heap import FREEZE_EVERY, FULL_EVERY, HeapKeeper


class Node:
    peer: Node


def test_frozen_cycles_wait_for_the_full_pass_and_stop_thaws_the_heap():
    try:
        keeper = HeapKeeper(now=0.0)
        a, b = Node(), Node()
        a.peer, b.peer = b, a  # a cycle: only the collector can free it
        gone = weakref.ref(a)
        keeper.tick(FREEZE_EVERY / 2)
        assert gc.get_freeze_count() == 0, "froze before FREEZE_EVERY"
        keeper.tick(FREEZE_EVERY)
        assert gc.get_freeze_count() > 0
        del a, b
        gc.collect()
        assert gone() is not None, "a frozen cycle is out of the collector's sight"
        keeper.tick(FULL_EVERY)  # the full pass: thaw, collect everything, freeze again
        assert gone() is None
        assert gc.get_freeze_count() > 0
        HeapKeeper.stop()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
