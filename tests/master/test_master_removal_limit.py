"""--agent-removal-rate-limit (Mesos' --agent_removal_rate_limit): when many agents fall silent
at once, the master removes at most N per period; the others wait, and one that speaks again
stays."""

from __future__ import annotations

import asyncio

import pytest
from harness import eventually_async
from master_harness import FakeAgent, start_master

from agora.master.removal_limit import RemovalLimit, parse_rate


def test_rates_parse_like_mesos_and_bad_ones_say_what_to_write():
    assert parse_rate("1/10mins") == (1, 600.0)
    assert parse_rate("100/30s") == (100, 30.0)
    assert parse_rate("5/m") == (5, 60.0)
    for bad in ("0/1m", "1/10", "x/1m", "1/2 weeks", ""):
        with pytest.raises(ValueError, match="write N/PERIOD"):
            parse_rate(bad)


def test_at_most_n_removals_in_any_window():
    limit = RemovalLimit(2, 10.0)
    assert [limit.allow(t) for t in (0.0, 1.0, 2.0, 9.9)] == [True, True, False, False]
    assert limit.next_allowed(9.9) == 10.0
    assert limit.allow(10.0) and not limit.allow(10.5) and limit.allow(11.0)


async def test_silent_agents_are_removed_one_per_period_and_one_that_speaks_again_stays():
    master = await start_master(None, agent_removal_rate_limit=(1, 3600.0))
    agents = [FakeAgent(master.address, hostname=f"h{i}") for i in range(3)]
    try:
        for agent in agents:
            await agent.connect()
            agent.heartbeating = False  # all three fall silent at once (agent timeout 1 s)
        core = master.core
        await eventually_async(
            lambda: len(core.reg.removed_agents) == 1, timeout=10, message="one removal"
        )
        for _ in range(10):  # several checks later (every 0.2 s), still only that one
            await asyncio.sleep(0.2)
        assert len(core.reg.removed_agents) == 1
        waiting = [a for a in agents if a.agent_id in core.reg.agents]
        assert len(waiting) == 2 and all(
            core.reg.agents[a.agent_id].removal_deferred for a in waiting
        )
        waiting[0].heartbeating = True  # it speaks again: it is not silent any more
        await eventually_async(
            lambda: not core.reg.agents[waiting[0].agent_id].removal_deferred,
            timeout=10,
            message="the agent heard from again",
        )
        for _ in range(10):
            await asyncio.sleep(0.2)
        assert waiting[0].agent_id in core.reg.agents  # it stays: it is no longer silent
        assert core.reg.agents[waiting[1].agent_id].removal_deferred  # the other still waits
    finally:
        for agent in agents:
            await agent.close()
        await master.stop(0)
