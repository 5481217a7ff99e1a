"""ManualClock: timers fire in due order, each seeing its own due time; cancelled ones never."""

from __future__ import annotations

from agora.master.clock import ManualClock


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
