"""Driver.cluster_view() against the real master: a framework reads every agent's resources,
including agents it has not been offered."""

from __future__ import annotations

import asyncio

from master_harness import FakeAgent, start_master

from agora.common import Resources
from agora.frameworks.sdk import Framework, run_async


async def test_a_framework_reads_the_whole_cluster_through_the_sdk():
    master = await start_master(None)
    agents = [
        FakeAgent(master.address, resources="cpus:2;mem:512", hostname=f"h{i}") for i in (0, 1)
    ]
    views = []

    class Planner(Framework):
        async def on_subscribed(self, driver, framework_id):
            await driver.suppress()  # wants no offers: it only looks
            views.append(await driver.cluster_view())
            driver.stop()

    try:
        for agent in agents:
            await agent.connect()
        await asyncio.wait_for(run_async(Planner(), master.address, name="planner"), 30)
        [view] = views
        assert sorted(a.hostname for a in view.agents) == ["h0", "h1"]
        for row in view.agents:
            assert row.state == "ACTIVE"
            assert Resources.from_proto(row.total) == Resources.parse("cpus:2;mem:512")
            # Offered to the planner at its subscription, or free once it suppressed: either
            # way the parts add up to the agent, and nothing is used.
            free, offered = Resources.from_proto(row.free), Resources.from_proto(row.offered)
            assert free + offered == Resources.from_proto(row.total)
            assert not Resources.from_proto(row.used)
    finally:
        for agent in agents:
            await agent.close()
        await master.stop(0)
