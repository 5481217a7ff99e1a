"""The event-driven master offers a task's resources while it handles the agent's message that
ended it (OfferCycle.allocate_if_quiet), when no cycle ran within the batch window: the offer
does not wait for the allocation loop's task to be woken. In a burst, the loop batches as
before. Runs the master's own loop (OfferCycle.run) on CoreHarness's paused clock."""

from __future__ import annotations

import asyncio

import pytest
from core_harness import CoreHarness, task

from agora.v1 import common_pb2


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.fixture
async def h():
    harness = CoreHarness()
    harness.auto_settle = False  # the master's own loop allocates
    loop = asyncio.create_task(harness.core.offers.run())
    await _turns()
    yield harness
    loop.cancel()
    await asyncio.gather(loop, return_exceptions=True)


async def _running(h, framework, agent, count: int) -> list[str]:
    """`count` tasks of 1 cpu launched and running on `agent` (of 4 cpus), nothing on offer."""
    for _ in range(100):
        if framework.offers():
            break
        await asyncio.sleep(0.001)
    [offer] = framework.offers()
    ids = [f"t{i}" for i in range(count)]
    framework.accept([offer.offer_id], [task(t, "cpus:1;mem:1024") for t in ids], 3600)
    for t in ids:
        agent.status(framework.framework_id, t, common_pb2.TASK_RUNNING)
    return ids


async def test_a_task_end_is_offered_before_the_loop_turns(h):
    agent, framework = h.agent("cpus:4;mem:4096"), h.framework()
    await _turns()
    first, second, *_ = await _running(h, framework, agent, 4)
    await _turns()
    h.clock.advance(0.01)  # a quiet spell: longer than the 2 ms batch window
    agent.status(framework.framework_id, first, common_pb2.TASK_FINISHED)
    # What the agent stream's handler calls after each message, with no await in between.
    assert h.core.offers.allocate_if_quiet() == 1
    [offer] = framework.offers()
    assert offer.agent_id == agent.agent_id
    cpus = {r.name: r.scalar for r in offer.resources}["cpus"]
    assert cpus == pytest.approx(1.0)

    # A second end within the window waits for the loop's batched cycle, which offers it.
    agent.status(framework.framework_id, second, common_pb2.TASK_FINISHED)
    assert h.core.offers.allocate_if_quiet() == 0
    assert len(framework.offers()) == 1
    for _ in range(200):
        if len(framework.offers()) == 2:
            break
        await asyncio.sleep(0.001)
    assert len(framework.offers()) == 2


@pytest.mark.parametrize("mode, inline", [("event", 1), ("interval", 0)])
async def test_only_the_event_mode_allocates_a_change_inline(mode, inline):
    """What allocate_if_quiet does with a change on one agent (here a decline without a
    filter; the master calls it after an agent's message): event mode allocates it there and
    then, Mesos' interval mode leaves it to its timer."""
    h = CoreHarness(allocation_mode=mode)
    h.auto_settle = False
    loop = asyncio.create_task(h.core.offers.run())
    try:
        h.agent("cpus:4;mem:4096")
        framework = h.framework()
        await _turns()
        if not framework.offers():  # interval mode: the timer has not fired; as it would
            h.core.offers.allocate()
        [offer] = framework.offers()
        h.clock.advance(0.01)
        no_filter = common_pb2.Filters(refuse_seconds=0)  # back at once
        framework.call("Decline", offer_ids=[offer.offer_id], filters=no_filter)
        assert h.core.offers.allocate_if_quiet() == inline
        assert len(framework.offers()) == inline
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_filter_expiry_due_is_left_to_the_loop():
    """Filters that expire together may be on thousands of agents: the loop allocates over
    them in slices, not the agent stream's handler in one go."""
    h = CoreHarness(allocation_interval_seconds=60.0)  # no sweep due meanwhile
    h.auto_settle = False
    loop = asyncio.create_task(h.core.offers.run())
    try:
        await _filter_expiry_left_to_the_loop(h)
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def _filter_expiry_left_to_the_loop(h) -> None:
    agent, framework = h.agent("cpus:4;mem:4096"), h.framework()
    other = h.agent("cpus:4;mem:4096")
    await _turns()
    for _ in range(100):
        if len(framework.offers()) == 2:
            break
        await asyncio.sleep(0.001)
    offers = {o.agent_id: o for o in framework.offers()}
    filtered = common_pb2.Filters(refuse_seconds=1)
    framework.call("Decline", offer_ids=[offers[other.agent_id].offer_id], filters=filtered)
    h.clock.advance(2)  # the filter has expired, and no cycle has seen it yet
    no_filter = common_pb2.Filters(refuse_seconds=0)
    framework.call("Decline", offer_ids=[offers[agent.agent_id].offer_id], filters=no_filter)
    assert h.core.offers.allocate_if_quiet() == 0
    for _ in range(200):  # the loop offers both
        if len(framework.offers()) == 2:
            break
        await asyncio.sleep(0.001)
    assert {o.agent_id for o in framework.offers()} == {agent.agent_id, other.agent_id}
