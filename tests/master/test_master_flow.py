"""The master's main path over real gRPC: register, offer, launch, update, ack, decline, kill."""

from __future__ import annotations

import grpc
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


async def test_unused_part_of_an_accepted_offer_and_ended_tasks_are_offered_again(
    master, agent, framework
):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1", "cpus:1;mem:128")], refuse_seconds=0)
    await agent.inbox.expect("run_task")
    # The rest of the agent comes back as a new offer.
    [later] = await framework.offers()
    rest = Resources.from_proto(later.resources)
    assert rest.scalar("cpus") == 3 and rest.scalar("mem") == 4096 - 128

    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    await framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    # The finished task's resources are offered again.
    n = len(framework.inbox.items)
    freed = await framework.inbox.expect(
        "offers",
        lambda b: any(Resources.from_proto(o.resources).scalar("cpus") == 1 for o in b.offers),
        after=n,
    )
    assert freed


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


async def test_suppress_stops_offers_and_revive_restores_them(master, framework):
    await framework.stub.Suppress(scheduler_pb2.SuppressRequest(**framework.ids()))
    agent = FakeAgent(master.address)
    cycles = master.metrics.cycles()
    await agent.connect()
    try:
        # A cycle has run with the agent's resources free: a suppressed framework gets none.
        await eventually_async(lambda: master.metrics.cycles() > cycles, message="a cycle")
        channel, ops = operator(master.address)
        async with channel:
            frameworks = (await ops.ListFrameworks(operator_pb2.ListFrameworksRequest())).frameworks
            assert frameworks[0].suppressed
        assert not framework.inbox.of("offers")
        await framework.stub.Revive(scheduler_pb2.ReviveRequest(**framework.ids()))
        await framework.offers()
    finally:
        await agent.close()


async def test_kill_reaches_the_agent_and_unknown_task_is_lost(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1")])
    await agent.inbox.expect("run_task")
    await framework.stub.Kill(
        scheduler_pb2.KillRequest(**framework.ids(), task_id="t1", grace_period_seconds=2)
    )
    kill = await agent.inbox.expect("kill_task")
    assert (kill.task_id, kill.grace_period_seconds) == ("t1", 2)

    await framework.stub.Kill(scheduler_pb2.KillRequest(**framework.ids(), task_id="nope"))
    lost = await framework.inbox.expect("update", lambda u: u.status.task_id == "nope")
    assert lost.status.state == common_pb2.TASK_LOST
    assert not lost.status.uuid


async def test_reconcile_explicit_and_implicit(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("a"), task("b")])
    await agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "a", common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update", lambda u: u.status.task_id == "a")

    n = len(framework.inbox.items)
    await framework.stub.Reconcile(
        scheduler_pb2.ReconcileRequest(
            **framework.ids(),
            tasks=[
                scheduler_pb2.ReconcileRequest.Task(task_id="a"),
                scheduler_pb2.ReconcileRequest.Task(task_id="ghost"),
            ],
        )
    )
    a = await framework.inbox.expect("update", lambda u: u.status.task_id == "a", after=n)
    ghost = await framework.inbox.expect("update", lambda u: u.status.task_id == "ghost", after=n)
    assert a.status.state == common_pb2.TASK_RUNNING
    assert a.status.reason == "REASON_RECONCILIATION" and not a.status.uuid
    assert ghost.status.state == common_pb2.TASK_UNKNOWN

    n = len(framework.inbox.items)
    await framework.stub.Reconcile(scheduler_pb2.ReconcileRequest(**framework.ids()))
    b = await framework.inbox.expect("update", lambda u: u.status.task_id == "b", after=n)
    assert b.status.state == common_pb2.TASK_STAGING
    await framework.inbox.expect("update", lambda u: u.status.task_id == "a", after=n)


async def test_teardown_shuts_the_framework_down_on_agents(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1")])
    await agent.inbox.expect("run_task")
    await framework.stub.Teardown(scheduler_pb2.TeardownRequest(**framework.ids()))
    shutdown = await agent.inbox.expect("shutdown_framework")
    assert shutdown.framework_id == framework.framework_id
    error = await framework.inbox.expect("error")
    assert "removed" in error.message
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await framework.stub.Revive(scheduler_pb2.ReviveRequest(**framework.ids()))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # The agent's TASK_KILLED for a removed framework is acknowledged by the master itself.
    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_KILLED)
    ack = await agent.inbox.expect("status_update_ack", lambda a: a.uuid == uuid)
    assert ack.task_id == "t1"


async def test_drf_spreads_agents_over_two_frameworks(master):
    # Both frameworks wait with no resources; each agent goes to the one with the lower share.
    f1, f2 = FakeFramework(master.address, "one"), FakeFramework(master.address, "two")
    await f1.subscribe()
    await f2.subscribe()
    agents = [FakeAgent(master.address, hostname=f"h{i}") for i in range(2)]
    try:
        for a in agents:
            await a.connect()
        o1 = await f1.offers()
        o2 = await f2.offers()
        assert {o1[0].agent_id, o2[0].agent_id} == {a.agent_id for a in agents}
    finally:
        for c in (f1, f2, *agents):
            await c.close()


async def test_kill_of_a_task_that_already_finished_reports_how_it_ended(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1")])
    await agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    await framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    seen = len(framework.inbox.items)
    await framework.stub.Kill(scheduler_pb2.KillRequest(**framework.ids(), task_id="t1"))
    answer = await framework.inbox.expect("update", after=seen)
    assert (answer.status.task_id, answer.status.state) == ("t1", common_pb2.TASK_FINISHED)
    assert not agent.inbox.of("kill_task")


async def test_reconcile_answers_carry_the_last_health_verdict(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("sick"), task("unchecked")])
    await agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "sick", common_pb2.TASK_RUNNING, healthy=False)
    agent.status(framework.framework_id, "unchecked", common_pb2.TASK_RUNNING)
    for task_id in ("sick", "unchecked"):
        await framework.inbox.expect("update", lambda u, t=task_id: u.status.task_id == t)

    n = len(framework.inbox.items)
    await framework.stub.Reconcile(scheduler_pb2.ReconcileRequest(**framework.ids()))
    sick = await framework.inbox.expect("update", lambda u: u.status.task_id == "sick", after=n)
    unchecked = await framework.inbox.expect(
        "update", lambda u: u.status.task_id == "unchecked", after=n
    )
    assert sick.status.reason == "REASON_RECONCILIATION"
    assert sick.status.HasField("healthy") and sick.status.healthy is False
    # No health check reported: the answer says nothing about health, rather than "unhealthy".
    assert not unchecked.status.HasField("healthy")


async def test_a_task_id_is_reusable_only_once_its_final_update_is_acknowledged(
    master, agent, framework
):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1")], refuse_seconds=0)
    await agent.inbox.expect("run_task")
    uuid = agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    await framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    # The agent keeps the run until the ack and would ignore a relaunch: refused meanwhile.
    [offer] = await framework.offers()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await framework.accept([offer.offer_id], [task("t1")])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not acknowledged" in e.value.details()
    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(
            **framework.ids(), agent_id=agent.agent_id, task_id="t1", uuid=uuid
        )
    )
    await agent.inbox.expect("status_update_ack")
    seen = len(agent.inbox.items)
    await framework.accept([offer.offer_id], [task("t1")])
    run = await agent.inbox.expect("run_task", after=seen)
    assert run.task.task_id == "t1"


async def test_one_acknowledge_call_acknowledges_every_update_it_carries(master, agent, framework):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task(f"t{i}") for i in (1, 2, 3)], refuse_seconds=0)
    uuids = {
        "t1": agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING),
        "t2": agent.status(framework.framework_id, "t2", common_pb2.TASK_RUNNING),
        "t3": agent.status(framework.framework_id, "t3", common_pb2.TASK_FINISHED),
    }
    await framework.inbox.expect("update", lambda u: u.status.task_id == "t3")
    Ack = scheduler_pb2.Acknowledgement
    await framework.stub.Acknowledge(
        scheduler_pb2.AcknowledgeRequest(
            **framework.ids(),
            agent_id=agent.agent_id,
            task_id="t1",
            uuid=uuids["t1"],
            acknowledgements=[
                Ack(agent_id=agent.agent_id, task_id="t2", uuid=uuids["t2"]),
                Ack(agent_id=agent.agent_id, task_id="t-lost"),  # master-generated: ignored
                Ack(agent_id=agent.agent_id, task_id="t3", uuid=uuids["t3"]),
            ],
        )
    )
    for uuid in uuids.values():
        await agent.inbox.expect("status_update_ack", lambda a, u=uuid: a.uuid == u)
    acks = agent.inbox.of("status_update_ack")
    assert sorted((a.framework_id, a.task_id, a.uuid) for a in acks) == sorted(
        (framework.framework_id, task_id, uuid) for task_id, uuid in uuids.items()
    )
    # The final update of t3 is acknowledged too, so its id may be launched again.
    rest = (await framework.offers())[0]
    seen = len(agent.inbox.items)
    await framework.accept([rest.offer_id], [task("t3")])
    run = await agent.inbox.expect("run_task", after=seen)
    assert run.task.task_id == "t3"


async def test_a_stale_update_after_the_final_one_is_acked_but_not_forwarded(
    master, agent, framework
):
    """An agent that lost an ack in a machine crash resends an older update: the framework,
    which already has the task's final state, never sees the task 'running' again."""
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task("t1")])
    await agent.inbox.expect("run_task")
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
    await framework.inbox.expect("update", lambda u: u.status.state == common_pb2.TASK_FINISHED)
    seen = len(framework.inbox.items)
    stale = agent.status(framework.framework_id, "t1", common_pb2.TASK_RUNNING)
    ack = await agent.inbox.expect("status_update_ack", lambda a: a.uuid == stale)
    assert ack.task_id == "t1"
    # A duplicate of the final update still goes through (the framework may need it again).
    agent.status(framework.framework_id, "t1", common_pb2.TASK_FAILED)
    late = await framework.inbox.expect("update", after=seen)
    assert late.status.state == common_pb2.TASK_FAILED
    since = [m.update for m in framework.inbox.items[seen:] if m.HasField("update")]
    assert [u.status.state for u in since] == [common_pb2.TASK_FAILED]
