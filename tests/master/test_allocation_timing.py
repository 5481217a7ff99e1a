"""When the event-driven offer loop allocates and over which agents (master/allocation_timing.py),
on an injected clock: the decision behind the offer-latency claim, without a network."""

from __future__ import annotations

import math

from agora.master.allocation_timing import AllocationTiming

BATCH, SWEEP = 0.002, 1.0


def test_a_change_after_a_quiet_spell_is_allocated_at_once():
    timing = AllocationTiming(BATCH, SWEEP, now=0.0)
    assert timing.batch_delay(now=0.5) == 0.0  # no cycle yet: leading edge
    assert timing.scope(0.5, ["a1"], []) == ["a1"]  # only the agent that changed
    timing.cycle_ended(0.5)
    assert timing.batch_delay(now=0.6) == 0.0  # quiet for longer than the window


def test_changes_in_a_burst_wait_out_the_rest_of_the_batch_window():
    timing = AllocationTiming(BATCH, SWEEP, now=0.0)
    timing.cycle_ended(10.0)
    assert math.isclose(timing.batch_delay(now=10.0005), 0.0015)
    assert timing.batch_delay(now=10.002) == 0.0


def test_with_nothing_changing_the_loop_wakes_for_the_sweep_or_a_filter_expiry():
    timing = AllocationTiming(BATCH, SWEEP, now=0.0)
    assert timing.wait(now=0.25, filter_expiry=None) == 0.75  # the next sweep at 1.0
    assert timing.wait(now=0.25, filter_expiry=0.5) == 0.25  # a filter expires first
    assert timing.wait(now=0.25, filter_expiry=0.1) == 0.0  # already due
    assert timing.wait(now=2.0, filter_expiry=None) == 0.0  # the sweep is overdue


def test_the_sweep_visits_every_agent_and_a_filter_expiry_only_its_own():
    timing = AllocationTiming(BATCH, SWEEP, now=0.0)
    assert timing.scope(1.0, ["a1"], []) is None  # the sweep is due: all agents
    assert timing.next_sweep == 2.0
    # A filter expired on a3: the agents that changed and a3, not the whole cluster.
    assert timing.scope(1.2, ["a1", "a3"], ["a3", "a7"]) == ["a1", "a3", "a7"]
    assert timing.next_sweep == 2.0
    assert timing.scope(1.3, ["a2"], []) == ["a2"]  # neither: the changed agents only
    assert timing.scope(1.4, None, []) is None  # changes on unknown agents: all
    assert timing.next_sweep == 2.4
