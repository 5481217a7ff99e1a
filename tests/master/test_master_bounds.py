"""Nothing a caller can create for free is kept for ever: ended tasks per framework, torn-down
frameworks and removed agents are bounded (--max-completed-tasks-per-framework,
--max-removed-frameworks, --max-removed-agents), in the master's memory and in its store, and a
restart with smaller bounds trims what the store held."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.v1 import common_pb2, operator_pb2, scheduler_pb2

BOUNDS = dict(max_completed_tasks_per_framework=3, max_removed_frameworks=2, max_removed_agents=2)


async def finish_tasks(framework: FakeFramework, agent: FakeAgent, count: int) -> None:
    [offer] = await framework.offers()
    ids = [f"t{i}" for i in range(count)]
    await framework.accept([offer.offer_id], [task(i, "cpus:0.1;mem:8") for i in ids])
    for task_id in ids:
        await agent.inbox.expect("run_task", lambda r, t=task_id: r.task.task_id == t)
        agent.status(framework.framework_id, task_id, common_pb2.TASK_FINISHED)
        await framework.inbox.expect("update", lambda u, t=task_id: u.status.task_id == t)


async def test_ended_tasks_torn_down_frameworks_and_removed_agents_are_bounded(tmp_path):
    master = await start_master(tmp_path / "state", **BOUNDS)
    agent = FakeAgent(master.address)
    await agent.connect()
    kept = FakeFramework(master.address, name="kept")
    await kept.subscribe()
    try:
        # Five tasks end; the framework's three newest are remembered.
        await finish_tasks(kept, agent, 5)
        channel, ops = operator(master.address)
        async with channel:
            listed = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
            assert sorted(t.task_id for t in listed) == ["t2", "t3", "t4"]

        # Four frameworks torn down: the two newest are remembered (and refused), the older
        # two forgotten, in memory and in the store.
        torn = []
        for i in range(4):
            framework = FakeFramework(master.address, name=f"gone-{i}")
            await framework.subscribe()
            await framework.stub.Teardown(scheduler_pb2.TeardownRequest(**framework.ids()))
            torn.append(framework.framework_id)
            await framework.close()
        assert list(master.core.reg.removed_frameworks) == torn[2:]
        assert list(master.core.store.removed("framework")) == torn[2:]
        for framework_id, remembered in ((torn[3], True), (torn[0], False)):
            again = FakeFramework(master.address, name="again")
            await again.subscribe(framework_id=framework_id, wait=not remembered)
            if remembered:  # refused: it was torn down
                await again.inbox.wait_closed()
                assert again.inbox.error.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert "torn down" in again.inbox.error.details()
            else:  # forgotten: the id is a new framework's, as after Mesos' bound
                assert again.framework_id == framework_id
                await again.stub.Teardown(scheduler_pb2.TeardownRequest(**again.ids()))
            await again.close()
        torn = torn[:3] + [torn[3], torn[0]]  # the re-used id was torn down again: newest

        # Three agents go silent and are removed: the two newest removals are remembered.
        silent = []
        for i in range(3):
            extra = FakeAgent(master.address, hostname=f"silent-{i}")
            await extra.connect()
            extra.heartbeating = False
            await extra.inbox.expect("shutdown", timeout=10)
            silent.append(extra.agent_id)
            await extra.close()
        assert list(master.core.reg.removed_agents) == silent[1:]
        assert list(master.core.reg.removed_frameworks) == torn[3:]
        assert list(master.core.store.removed("agent")) == silent[1:]
    finally:
        await kept.close()
        await agent.close()
        await master.stop(0)

    # A restart with smaller bounds trims the store to them, oldest first.
    smaller = dict(BOUNDS, max_removed_frameworks=1, max_removed_agents=1)
    master = await start_master(tmp_path / "state", **smaller)
    try:
        assert list(master.core.store.removed("framework")) == torn[4:]
        assert list(master.core.store.removed("agent")) == silent[2:]
    finally:
        await master.stop(0)


async def test_bounds_below_one_are_refused_at_start():
    with pytest.raises(ValueError, match="max_removed_agents must be at least 1, got 0"):
        await start_master(None, max_removed_agents=0)


async def test_an_ended_task_of_a_forgotten_framework_is_forgotten_too(tmp_path):
    master = await start_master(None, **dict(BOUNDS, max_removed_frameworks=1))
    agent = FakeAgent(master.address)
    await agent.connect()
    try:
        first = FakeFramework(master.address, name="first")
        await first.subscribe()
        await finish_tasks(first, agent, 2)
        await first.stub.Teardown(scheduler_pb2.TeardownRequest(**first.ids()))
        await first.close()
        channel, ops = operator(master.address)
        async with channel:
            listed = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
            assert {t.framework_id for t in listed} == {first.framework_id}
            second = FakeFramework(master.address, name="second")
            await second.subscribe()
            await second.stub.Teardown(scheduler_pb2.TeardownRequest(**second.ids()))
            await second.close()
            await asyncio.sleep(0)
            listed = (await ops.ListTasks(operator_pb2.ListTasksRequest())).tasks
            assert listed == []  # the first framework is forgotten, and its tasks with it
    except grpc.aio.AioRpcError as e:  # pragma: no cover - a refusal names what went wrong
        raise AssertionError(e.details()) from None
    finally:
        await agent.close()
        await master.stop(0)
