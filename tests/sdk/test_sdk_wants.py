"""Offers sized by demand from the SDK: `Driver.revive(wants)` and `Driver.want(...)` against the
real master over gRPC, with raw-gRPC agents; and the mirror that keeps `want` quiet."""

from __future__ import annotations

import asyncio

from harness import eventually_async
from master_harness import FakeAgent, start_master

from agora.common import Resources
from agora.frameworks.sdk import Driver, Framework, TaskSpec, fit
from agora.frameworks.sdk.driver import framework_info
from agora.frameworks.sdk.transport import GrpcSchedulerTransport
from agora.frameworks.sdk.wants import WantsMirror
from agora.v1 import common_pb2

TIMEOUT = 20.0
TASK = Resources.parse("cpus:1;mem:128")


def test_the_mirror_takes_launches_off_what_was_told():
    mirror = WantsMirror()
    assert not mirror.differs(None)
    mirror.told(Resources.parse("cpus:3;mem:384"))
    task = common_pb2.TaskInfo(resources=TASK.to_proto())
    mirror.launched([task, task])
    assert not mirror.differs(TASK)  # a queue that only drained: nothing to say
    assert mirror.differs(Resources.parse("cpus:2;mem:256"))  # a retry came back
    assert mirror.differs(None)
    mirror.launched([task])
    assert mirror.total == {}


async def test_a_framework_wanting_one_task_is_offered_one_of_four_agents(tmp_path):
    master = await start_master(tmp_path / "state")
    agents = [FakeAgent(master.address, "cpus:4;mem:4096", hostname=f"h{i}") for i in range(4)]
    for agent in agents:
        await agent.connect()

    class OneTask(Framework):
        def __init__(self) -> None:
            self.offered: list[common_pb2.Offer] = []

        async def on_offers(self, driver, offers):
            self.offered.extend(offers)

    fw = OneTask()
    driver = Driver(fw, GrpcSchedulerTransport(master.address), framework_info("wants"))
    run = asyncio.create_task(driver.run())
    try:
        # Without wants, every agent is offered. Give them back, then ask for one task's worth.
        await eventually_async(lambda: len(fw.offered) == 4, timeout=TIMEOUT)
        await driver.suppress()
        await driver.decline(fw.offered, refuse_seconds=0)
        fw.offered.clear()
        await driver.revive(TASK)
        await eventually_async(lambda: fw.offered, timeout=TIMEOUT)
        await asyncio.sleep(0.3)  # anything more would have come by now
        assert len(fw.offered) == 1
        [offer] = fw.offered
        # It launches there: the want is spent, and the mirror agrees with the master.
        [placement] = fit([offer], [TaskSpec("t1", cpus=1, mem=128, command="true")]).placements
        fw.offered.clear()
        await driver.launch(placement.offers, placement.tasks)
        await driver.want(Resources())  # nothing more waits: the same as the master's count
        assert not driver._wants.differs(Resources())
        # More work: 8 cpus' worth is two whole agents. Not the one it launched on, whose
        # leftover the Accept refused for the default 5 s.
        await driver.want(Resources.parse("cpus:8;mem:256"))
        await eventually_async(lambda: len(fw.offered) >= 2, timeout=TIMEOUT)
        await asyncio.sleep(0.3)
        assert len(fw.offered) == 2
        assert offer.agent_id not in {o.agent_id for o in fw.offered}
        # A plain revive lifts the limit: every agent with room.
        await driver.decline(fw.offered, refuse_seconds=0)
        fw.offered.clear()
        await driver.revive()
        await eventually_async(lambda: len(fw.offered) == 4, timeout=TIMEOUT)
    finally:
        driver.stop()
        await asyncio.wait_for(run, TIMEOUT)
        for agent in agents:
            await agent.close()
        await master.stop(0)
