"""Batches on the agent link and the framework stream, over real gRPC: what waits to be sent
goes in one message to a peer that said it reads them (and only to one), nothing is lost or
reordered, and a batch from an agent is handled message by message (common/batches.py)."""

from __future__ import annotations

import asyncio

import pytest
from master_harness import FakeAgent, FakeFramework, start_master, task

from agora.frameworks.sdk import GrpcSchedulerTransport
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

AgentMessage = agent_link_pb2.AgentMessage
MasterMessage = agent_link_pb2.MasterMessage


@pytest.fixture
async def master():
    m = await start_master(None, heartbeat_interval_seconds=1.0, agent_timeout_seconds=30.0)
    yield m
    await m.stop(0)


async def _agent(master, batches: bool) -> FakeAgent:
    agent = FakeAgent(master.address, batches=batches)
    await agent.connect()
    return agent


@pytest.mark.parametrize("batches", [True, False])
async def test_a_burst_reaches_the_agent_in_order_batched_only_if_it_reads_batches(master, batches):
    agent = await _agent(master, batches)
    try:
        registered = agent.inbox.of("registered")[0]
        assert registered.accepts_batches  # the master says it reads the agent's batches
        core_agent = master.core.reg.agents[agent.agent_id]
        for i in range(300):  # in one go: the writer finds them all waiting
            core_agent.send(MasterMessage(kill_task=MasterMessage.KillTask(task_id=f"t{i}")))
        await agent.inbox.expect("kill_task", lambda k: k.task_id == "t299")
        assert [k.task_id for k in agent.inbox.of("kill_task")] == [f"t{i}" for i in range(300)]
        if batches:
            assert 1 <= agent.batches_read < 300
        else:
            assert agent.batches_read == 0  # an agent of an earlier version reads one by one
    finally:
        await agent.close()


async def test_what_callbacks_ready_in_the_same_turn_send_goes_in_one_message(master):
    """The writer lets the loop turn once before it takes: messages sent by the callbacks
    ready now (the rest of a batch being handled) join the first, a few us later."""
    agent = await _agent(master, batches=True)
    try:
        core_agent = master.core.reg.agents[agent.agent_id]
        loop = asyncio.get_running_loop()

        def send(task_id: str) -> None:
            core_agent.send(MasterMessage(kill_task=MasterMessage.KillTask(task_id=task_id)))

        send("k0")  # starts the writer; the next three come from callbacks after it
        for i in range(1, 4):
            loop.call_soon(send, f"k{i}")
        await agent.inbox.expect("kill_task", lambda k: k.task_id == "k3")
        assert [k.task_id for k in agent.inbox.of("kill_task")] == ["k0", "k1", "k2", "k3"]
        assert agent.messages_read == 2  # Registered, then one batch of the four
    finally:
        await agent.close()


async def _launch(master, agent: FakeAgent, framework: FakeFramework, count: int) -> list[str]:
    [offer] = await framework.offers()
    ids = [f"t{i}" for i in range(count)]
    await framework.accept([offer.offer_id], [task(i, "cpus:0.01;mem:16") for i in ids])
    await agent.inbox.expect("run_task", lambda r: r.task.task_id == ids[-1])
    return ids


async def test_a_batch_of_updates_from_an_agent_reaches_the_framework_and_each_is_acked(master):
    agent = await _agent(master, batches=True)
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        ids = await _launch(master, agent, framework, 20)
        # RunTasks sent together reach the agent as they were sent.
        assert [r.task.task_id for r in agent.inbox.of("run_task")] == ids
        updates = [
            agent.status_update_message(framework.framework_id, i, common_pb2.TASK_RUNNING)
            for i in ids
        ]
        beat = AgentMessage(heartbeat=AgentMessage.Heartbeat(timestamp=1.0))
        agent.send(AgentMessage(batch=AgentMessage.Batch(messages=[*updates[:10], beat])))
        agent.send(AgentMessage(batch=AgentMessage.Batch(messages=updates[10:])))
        await framework.inbox.expect("update", lambda u: u.status.task_id == ids[-1])
        got = [u.status.task_id for u in framework.inbox.of("update")]
        assert got == ids
        assert framework.batches_read == 0  # it did not say it reads batches
        acks = [
            scheduler_pb2.Acknowledgement(
                agent_id=agent.agent_id, task_id=u.status.task_id, uuid=u.status.uuid
            )
            for u in framework.inbox.of("update")
        ]
        await framework.stub.Acknowledge(
            scheduler_pb2.AcknowledgeRequest(**framework.ids(), acknowledgements=acks)
        )
        await agent.inbox.expect("status_update_ack", lambda a: a.task_id == ids[-1])
        assert [a.task_id for a in agent.inbox.of("status_update_ack")] == ids
        found = [master.core.reg.find_task(framework.framework_id, i) for i in ids]
        assert {t.state for t in found if t is not None} == {common_pb2.TASK_RUNNING}
    finally:
        await framework.close()
        await agent.close()


async def test_a_batch_inside_a_batch_is_ignored_and_the_link_stays(master):
    agent = await _agent(master, batches=True)
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        [t0, t1] = await _launch(master, agent, framework, 2)
        fid = framework.framework_id
        inner = AgentMessage(
            batch=AgentMessage.Batch(
                messages=[agent.status_update_message(fid, t0, common_pb2.TASK_FAILED)]
            )
        )
        agent.send(AgentMessage(batch=AgentMessage.Batch(messages=[inner])))
        agent.send(agent.status_update_message(fid, t1, common_pb2.TASK_RUNNING))
        await framework.inbox.expect("update", lambda u: u.status.task_id == t1)
        assert [u.status.task_id for u in framework.inbox.of("update")] == [t1]
        assert master.core.reg.agents[agent.agent_id].connected
    finally:
        await framework.close()
        await agent.close()


async def test_a_framework_that_reads_batches_gets_a_burst_of_updates_in_fewer_messages(master):
    agent = await _agent(master, batches=True)
    framework = FakeFramework(master.address, batches=True)
    await framework.subscribe()
    try:
        ids = await _launch(master, agent, framework, 100)
        fid = framework.framework_id
        updates = [agent.status_update_message(fid, i, common_pb2.TASK_RUNNING) for i in ids]
        agent.send(AgentMessage(batch=AgentMessage.Batch(messages=updates)))
        await framework.inbox.expect("update", lambda u: u.status.task_id == ids[-1])
        assert [u.status.task_id for u in framework.inbox.of("update")] == ids
        assert 1 <= framework.batches_read < 100
    finally:
        await framework.close()
        await agent.close()


async def test_the_sdk_transport_asks_for_batches_and_hands_out_single_events(master):
    """The SDK's driver takes events one at a time: its gRPC transport unwraps batches."""
    agent = await _agent(master, batches=True)
    framework = FakeFramework(master.address)  # to launch; the transport only listens
    await framework.subscribe()
    transport = GrpcSchedulerTransport(master.address)
    await transport.start()
    request = scheduler_pb2.SubscribeRequest(
        framework=common_pb2.FrameworkInfo(framework_id=framework.framework_id, name="test-fw")
    )
    try:
        ids = await _launch(master, agent, framework, 50)
        await framework.close()  # the transport's stream takes the framework over
        stream = transport.subscribe(request)
        assert not request.accepts_batches  # the caller's request is left as it was
        events = aiter(stream)
        first = await anext(events)
        assert first.WhichOneof("event") == "subscribed"
        # The transport said it reads batches, so the master may send them.
        assert master.core.reg.frameworks[framework.framework_id].session.batcher is not None
        fid = framework.framework_id
        updates = [agent.status_update_message(fid, i, common_pb2.TASK_RUNNING) for i in ids]
        agent.send(AgentMessage(batch=AgentMessage.Batch(messages=updates)))
        got: list[str] = []
        async with asyncio.timeout(10):
            while len(got) < len(ids):
                event = await anext(events)
                kind = event.WhichOneof("event")
                assert kind != "batch"
                if kind == "update":
                    got.append(event.update.status.task_id)
        assert got == ids
        stream.cancel()
    finally:
        await transport.close()
        await agent.close()
