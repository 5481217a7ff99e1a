"""The master's main path over real gRPC: register, offer, launch, update, ack, decline, kill."""

from __future__ import annotations

import pytest
from harness import eventually_async
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.common import Resources
from agora.v1 import common_pb2, operator_pb2, scheduler_pb2


@pytest.fixture
async def master(tmp_path):
    m = await start_master(tmp_path / "state")
    yield m
    await m.stop(0)


@pytest.fixture
async def agent(master):
    a = FakeAgent(master.address)
    await a.connect()
    yield a
    await a.close()


@pytest.fixture
async def framework(master):
    f = FakeFramework(master.address)
    await f.subscribe()
    yield f
    await f.close()


async def test_registered_agent_resources_reach_a_subscribed_framework(master, agent, framework):
    assert agent.agent_id.startswith("agent-")
    [offer] = await framework.offers()
    assert offer.agent_id == agent.agent_id
    assert offer.framework_id == framework.framework_id
    assert offer.hostname == "host-a"
    assert Resources.from_proto(offer.resources) == agent.resources


async def test_subscribed_event_carries_ids_and_heartbeats_follow(master, framework):
    subscribed = framework.inbox.of("subscribed")[0]
    assert subscribed.framework_id.startswith("framework-")
    assert subscribed.heartbeat_interval_seconds == pytest.approx(0.2)
    assert subscribed.master_id == master.master_id
    await framework.inbox.expect("heartbeat")


async def test_accept_sends_run_task_to_the_agent_and_relays_update_and_ack(
    master, agent, framework
):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1", "cpus:1;mem:128;ports:[31000-31000]")])

    run = await agent.inbox.expect("run_task")
    assert run.framework_id == framework.framework_id
    assert run.task.task_id == "t1"
    assert run.task.agent_id == agent.agent_id
    assert run.framework.name == "test-fw"

    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    update = await framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
    assert update.status.state == common_pb2.TASK_RUNNING
    assert update.status.uuid == uuid
    assert update.status.agent_id == agent.agent_id

    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(
            **framework.ids(), agent_id=agent.agent_id, task_id="t1", uuid=uuid
        )
    )
    ack = await agent.inbox.expect("status_update_ack")
    assert (ack.framework_id, ack.task_id, ack.uuid) == (framework.framework_id, "t1", uuid)

    channel, ops = operator(master.address)
    async with channel:
        tasks = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
        assert [(t.task_id, t.state) for t in tasks] == [("t1", common_pb2.TASK_RUNNING)]
        agents = (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents
        assert agents[0].task_count == 1


async def test_decline_filter_hides_the_agent_until_revive(master, agent, framework):
    [offer] = await framework.offers()
    cycles = master.metrics.cycles()
    await framework.stub.Decline(
        scheduler_pb2.DeclineRequest(
            **framework.ids(),
            offer_ids=[offer.offer_id],
            filters=common_pb2.Filters(refuse_seconds=3600),
        )
    )
    # A cycle has run since the decline gave the agent's resources back, so "not offered"
    # below is the filter at work, not a cycle that has not happened yet.
    await eventually_async(lambda: master.metrics.cycles() > cycles, message="a cycle")
    channel, ops = operator(master.address)
    async with channel:
        state = await ops.GetState(operator_pb2.GetStateRequest())
        assert not state.agents[0].offered  # nothing outstanding: filtered, not re-offered
    n = len(framework.inbox.items)
    await framework.stub.Revive(scheduler_pb2.ReviveRequest(**framework.ids()))
    again = await framework.inbox.expect("offers", after=n)
    assert again.offers[0].agent_id == agent.agent_id
    assert again.offers[0].offer_id != offer.offer_id


async def test_a_declined_leftover_does_not_hide_the_cpus_a_finished_task_frees(
    master, agent, framework
):
    # Four tasks take all four CPUs; the framework declines the memory left for an hour.
    [offer] = await framework.offers()
    tasks = [task(f"t{i}", "cpus:1;mem:128") for i in range(4)]
    await framework.accept([offer.offer_id], tasks, refuse_seconds=0)
    for i in range(4):
        agent.status(framework.framework_id, f"t{i}", common_pb2.TASK_RUNNING)
    [leftover] = await framework.offers()
    assert Resources.from_proto(leftover.resources).scalar("cpus") == 0
    await framework.stub.Decline(
        scheduler_pb2.DeclineRequest(
            **framework.ids(),
            offer_ids=[leftover.offer_id],
            filters=common_pb2.Filters(refuse_seconds=3600),
        )
    )
    framework.used.add(leftover.offer_id)
    cycles = master.metrics.cycles()
    await eventually_async(lambda: master.metrics.cycles() > cycles, message="a cycle")
    assert await framework.offers(count=0) == []  # filtered, not offered again
    # A task ends: what it frees, with the memory refused, is offered at once (Mesos' filter
    # hides only what is contained in what was refused), not after the hour.
    agent.status(framework.framework_id, "t0", common_pb2.TASK_FINISHED)
    [fresh] = await framework.offers(timeout=10.0)
    resources = Resources.from_proto(fresh.resources)
    assert resources.scalar("cpus") == 1
    assert resources.contains(Resources.from_proto(leftover.resources))


async def test_declining_two_offers_on_one_agent_refuses_their_sum(master, agent, framework):
    [offer] = await framework.offers()
    tasks = [task(f"t{i}", "cpus:1;mem:128") for i in range(4)]
    await framework.accept([offer.offer_id], tasks, refuse_seconds=0)
    [leftover] = await framework.offers()  # the memory left, kept while a task ends
    agent.status(framework.framework_id, "t0", common_pb2.TASK_FINISHED)
    offers = await framework.offers(count=2)
    assert {o.agent_id for o in offers} == {agent.agent_id}
    await framework.stub.Decline(
        scheduler_pb2.DeclineRequest(
            **framework.ids(),
            offer_ids=[o.offer_id for o in offers],
            filters=common_pb2.Filters(refuse_seconds=3600),
        )
    )
    framework.used.update(o.offer_id for o in offers)
    cycles = master.metrics.cycles()
    await eventually_async(lambda: master.metrics.cycles() > cycles, message="a cycle")
    # Both came back, and together they are what was refused: nothing is offered again.
    assert await framework.offers(count=0) == []
    assert leftover.offer_id in {o.offer_id for o in offers}
