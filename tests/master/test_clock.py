"""ManualClock: timers fire in due order, each seeing its own due time; cancelled ones never.
Its wall time moves with its monotonic time; LoopClock reads the real ones."""

from __future__ import annotations

import time

from agora.master.clock import WALL_START, LoopClock, ManualClock


def test_timers_fire_in_order_at_their_own_time_and_cancelled_ones_do_not():
    clock = ManualClock(start=100.0)
    fired: list[tuple[str, float]] = []
    clock.call_later(5, lambda: fired.append(("b", clock.now())))
    clock.call_later(2, lambda: fired.append(("a", clock.now())))
    cancelled = clock.call_later(3, lambda: fired.append(("never", clock.now())))
    clock.call_later(5, lambda: fired.append(("c", clock.now())))  # a tie: set after "b"
    cancelled.cancel()
    assert clock.pending() == 3
    clock.advance(1.9)
    assert fired == [] and clock.now() == 101.9
    clock.advance(10)
    assert fired == [("a", 102.0), ("b", 105.0), ("c", 105.0)]
    assert clock.now() == 111.9 and clock.pending() == 0


def test_a_timer_set_by_a_timer_fires_in_the_same_advance_when_due():
    clock = ManualClock()
    fired: list[float] = []
    clock.call_later(1, lambda: clock.call_later(1, lambda: fired.append(clock.now())))
    clock.advance(5)
    assert fired == [2.0]


def test_wall_time_starts_where_told_and_moves_with_advance_and_timers():
    clock = ManualClock(start=100.0, wall_start=1_000_000.0)
    seen: list[float] = []
    clock.call_later(2, lambda: seen.append(clock.wall()))
    assert clock.wall() == 1_000_000.0
    clock.advance(5)
    # The timer saw the wall time of its own due time, as it sees now() at its due time.
    assert seen == [1_000_002.0]
    assert clock.wall() == 1_000_005.0 and clock.now() == 105.0


def test_wall_time_starts_at_a_fixed_instant_unless_told():
    assert ManualClock().wall() == ManualClock(start=50.0).wall() == WALL_START


def test_loop_clock_reads_the_real_clocks():
    clock = LoopClock()
    before_wall, before_now = time.time(), time.monotonic()
    wall, now = clock.wall(), clock.now()
    assert before_wall <= wall <= time.time()
    assert before_now <= now <= time.monotonic()
