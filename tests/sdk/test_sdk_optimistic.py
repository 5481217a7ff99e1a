"""The SDK's side of optimistic offers and holds, against the real master: driver.launch raises
OfferConflict when another framework took the resources first (and the framework launches on
the fresh offer that follows), and driver.hold delivers a gang's resources in one go."""

from __future__ import annotations

import asyncio

import grpc
from master_harness import FakeAgent, FakeFramework, start_master, status_update, task

from agora.common import Resources
from agora.common.errors import Reason
from agora.frameworks.sdk import Framework, OfferConflict, SchedulerError, run_async
from agora.v1 import agent_link_pb2, common_pb2

AgentMessage = agent_link_pb2.AgentMessage


async def test_a_lost_race_raises_offer_conflict_and_the_framework_replans():
    master = await start_master(None, offer_mode="optimistic", optimistic_grace_seconds=0.0)
    agent = FakeAgent(master.address, resources="cpus:4;mem:4096")
    fast = FakeFramework(master.address, "fast")
    taken = asyncio.Event()
    conflicts: list[OfferConflict] = []
    launched: list[str] = []

    class Slow(Framework):
        async def on_offers(self, driver, offers):
            if not conflicts:
                await taken.wait()  # "thinking" while another framework takes the agent
                try:
                    await driver.launch(offers, [task("slow-1", "cpus:2;mem:256")])
                except OfferConflict as e:
                    conflicts.append(e)
                return
            await driver.launch(offers, [task("slow-1", "cpus:1;mem:256")])
            launched.append("slow-1")
            driver.stop()

    try:
        await agent.connect()
        await fast.subscribe()
        slow = asyncio.create_task(run_async(Slow(), master.address, name="slow"))
        [offer] = await fast.offers()
        while len(master.core.reg.offers_of_agent(agent.agent_id)) < 2:
            await asyncio.sleep(0.01)  # the slow framework holds an offer of the same agent
        await fast.accept([offer.offer_id], [task("fast-1", "cpus:3;mem:1024")])
        taken.set()
        await asyncio.wait_for(slow, 30)
        [conflict] = conflicts
        assert isinstance(conflict, SchedulerError)
        assert conflict.code == grpc.StatusCode.ABORTED
        assert conflict.reason == Reason.OFFER_CONFLICT
        assert not conflict.transient  # nothing was launched: re-plan, do not reconcile
        assert launched == ["slow-1"]
        await agent.inbox.expect("run_task", lambda r: r.task.task_id == "slow-1")
        runs = [m.task.task_id for m in agent.inbox.of("run_task")]
        assert sorted(runs) == ["fast-1", "slow-1"]
    finally:
        await fast.close()
        await agent.close()
        await master.stop(0)


async def test_a_hold_delivers_a_gang_in_one_go_through_the_sdk():
    master = await start_master(None)
    agent = FakeAgent(master.address, resources="cpus:4;mem:4096")
    blocker = FakeFramework(master.address, "blocker")
    held: list[common_pb2.Offer] = []
    events: list[tuple[str, str]] = []
    asked = asyncio.Event()

    class Gang(Framework):
        hold_id = ""

        async def on_offers(self, driver, offers):
            if not self.hold_id:
                # One cpu is free now; the gang needs two at once.
                await driver.decline(offers, refuse_seconds=60)
                self.hold_id = await driver.hold(2, "cpus:1;mem:128", timeout_seconds=30)
                asked.set()
                return
            held.extend(offers)

        async def on_hold(self, driver, hold_id, state, message):
            events.append((hold_id, state))
            tasks = [task(f"g{i}", "cpus:1;mem:128") for i in range(2)]
            by_agent = {o.agent_id for o in held}
            assert by_agent == {agent.agent_id}
            await driver.launch(held, tasks)
            driver.stop()

    try:
        await agent.connect()
        await blocker.subscribe()
        [offer] = await blocker.offers()
        await blocker.accept([offer.offer_id], [task("b1", "cpus:3;mem:128")], refuse_seconds=60)
        gang = Gang()
        run = asyncio.create_task(run_async(gang, master.address, name="gang"))
        await asyncio.wait_for(asked.wait(), 30)
        # The blocker's task ends: its cpus go to the hold, which is then met.
        update = status_update(
            agent.agent_id, blocker.framework_id, "b1", common_pb2.TASK_FINISHED, None
        )
        agent.send(AgentMessage(status_update=update))
        await asyncio.wait_for(run, 30)
        assert events == [(gang.hold_id, "MET")]
        total = Resources()
        for offer in held:
            total = total + Resources.from_proto(offer.resources)
        assert total == Resources.parse("cpus:2;mem:256")
        for task_id in ("g0", "g1"):
            await agent.inbox.expect("run_task", lambda r, t=task_id: r.task.task_id == t)
    finally:
        await blocker.close()
        await agent.close()
        await master.stop(0)
