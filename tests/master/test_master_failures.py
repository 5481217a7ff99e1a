"""Failures the master must survive: silent agents, framework failover, a master restart."""

from __future__ import annotations

import grpc
import pytest
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.v1 import agent_link_pb2, common_pb2, operator_pb2, scheduler_pb2


async def launch_one(framework: FakeFramework, agent: FakeAgent, task_id: str = "t1"):
    [offer] = await framework.offers()
    await framework.accept([offer.offer_id], [task(task_id)], refuse_seconds=0)
    await agent.inbox.expect("run_task", lambda r: r.task.task_id == task_id)
    agent.status(framework.framework_id, task_id, common_pb2.TASK_RUNNING)
    await framework.inbox.expect("update", lambda u: u.status.task_id == task_id)
    return offer


async def test_silent_agent_is_removed_with_rescind_lost_and_failure(tmp_path):
    master = await start_master(tmp_path / "state")
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        await launch_one(framework, agent)
        [rest] = await framework.offers()  # the unused part, outstanding
        agent.heartbeating = False  # the stream stays open but the agent says nothing

        rescind = await framework.inbox.expect("rescind")
        assert rescind.offer_id == rest.offer_id
        lost = await framework.inbox.expect(
            "update", lambda u: u.status.state == common_pb2.TASK_LOST
        )
        assert lost.status.task_id == "t1"
        assert lost.status.reason == "REASON_AGENT_REMOVED"
        assert lost.status.source == common_pb2.TaskStatus.SOURCE_MASTER
        assert not lost.status.uuid
        failure = await framework.inbox.expect("failure")
        assert failure.agent_id == agent.agent_id
        shutdown = await agent.inbox.expect("shutdown")
        assert "removed" in shutdown.reason

        channel, ops = operator(master.address)
        async with channel:
            assert not (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents
            [t1] = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
            assert t1.state == common_pb2.TASK_LOST
    finally:
        await framework.close()
        await agent.close()
        await master.stop(0)


async def test_removed_agent_coming_back_is_shut_down_and_may_register_afresh(tmp_path):
    master = await start_master(tmp_path / "state")
    agent = FakeAgent(master.address)
    await agent.connect()
    old_id = agent.agent_id
    try:
        await agent.close()  # stream broken and not back within the agent timeout
        channel, ops = operator(master.address)
        async with channel:

            async def agents():
                return (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents

            from harness import eventually_async

            await eventually_async(lambda: _empty(agents()), timeout=10, message="removal")
        await agent.connect(agent_id=old_id, wait=False)
        shutdown = await agent.inbox.expect("shutdown")
        assert "removed" in shutdown.reason
        await agent.inbox.wait_closed()
        await agent.close()
        registered = await agent.connect(agent_id="")
        assert registered.agent_id != old_id
    finally:
        await agent.close()
        await master.stop(0)


async def _empty(coro) -> bool:
    return not await coro


async def test_framework_gone_past_failover_timeout_is_torn_down(tmp_path):
    master = await start_master(tmp_path / "state")
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address, failover_timeout=0.3)
    await framework.subscribe()
    try:
        await launch_one(framework, agent)
        await framework.close()
        shutdown = await agent.inbox.expect("shutdown_framework")
        assert shutdown.framework_id == framework.framework_id
        again = FakeFramework(master.address)
        await again.subscribe(framework_id=framework.framework_id, wait=False)
        await again.inbox.wait_closed()
        assert again.inbox.error.code() == grpc.StatusCode.FAILED_PRECONDITION
        await again.close()
    finally:
        await agent.close()
        await master.stop(0)


async def test_master_restart_recovers_framework_agent_and_running_task(tmp_path):
    state = tmp_path / "state"
    master = await start_master(state)
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    await launch_one(framework, agent)
    framework_id, agent_id = framework.framework_id, agent.agent_id
    await framework.close()
    await agent.close()
    await master.stop(0)

    master = await start_master(state)
    framework = FakeFramework(master.address)
    agent = FakeAgent(master.address)
    try:
        # The framework comes back first: the master knows its id from the state store.
        subscribed = await framework.subscribe(framework_id=framework_id)
        assert subscribed.framework_id == framework_id
        # Reconciling a task whose agent has not re-registered yet gets no answer (not UNKNOWN).
        await framework.stub.Reconcile(
            scheduler_pb2.ReconcileRequest(
                **framework.ids(),
                tasks=[scheduler_pb2.ReconcileRequest.Task(task_id="t1", agent_id=agent_id)],
            )
        )
        # Nor is a kill of it answered TASK_LOST: the framework is told to retry.
        for named in (agent_id, ""):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await framework.stub.Kill(
                    scheduler_pb2.KillRequest(**framework.ids(), task_id="t1", agent_id=named)
                )
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        running = agent_link_pb2.RunningTask(
            framework_id=framework_id, task=task("t1"), state=common_pb2.TASK_RUNNING
        )
        running.task.agent_id = agent_id
        registered = await agent.connect(tasks=[running], agent_id=agent_id)
        assert registered.agent_id == agent_id
        channel, ops = operator(master.address)
        async with channel:
            [t1] = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
            assert (t1.task_id, t1.agent_id, t1.state) == ("t1", agent_id, common_pb2.TASK_RUNNING)
            [summary] = (await ops.ListFrameworks(operator_pb2.ListFrameworksRequest())).frameworks
            assert summary.connected and summary.task_count == 1
        assert not [u for u in framework.inbox.of("update") if u.status.task_id == "t1"]
        # The task's resources stay in use: the offer is for the rest of the agent only.
        [offer] = await framework.offers()
        assert {(r.name, r.scalar) for r in offer.resources if r.name == "cpus"} == {("cpus", 3)}
        # The task finishes after the restart and its update reaches the framework.
        agent.status(framework_id, "t1", common_pb2.TASK_FINISHED)
        done = await framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
        assert done.status.state == common_pb2.TASK_FINISHED
    finally:
        await framework.close()
        await agent.close()
        await master.stop(0)
