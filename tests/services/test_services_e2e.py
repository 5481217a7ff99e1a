"""The service framework end to end: a real master, agents running real `python3 -m http.server`
tasks with agent-side HTTP health checks, and the Services API over gRPC on loopback."""

from __future__ import annotations

import asyncio
import math
import os
import signal

import grpc
import pytest
from harness import eventually_async
from services_cluster import ServiceCluster, http_ok, web_app

from agora.v1 import services_pb2

S = services_pb2


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    yield c
    await c.stop()


async def two_agents(cluster: ServiceCluster) -> None:
    await cluster.start_agent(0)
    await cluster.start_agent(1)
    await cluster.start_services()


def task_pid(cluster: ServiceCluster, task_id: str) -> int:
    for agent in cluster.agents:
        run = agent.tasks.find("", task_id)
        if run is not None and run.wrapper is not None:
            return run.wrapper.task_pid
    raise AssertionError(f"no agent runs {task_id}")


async def test_three_http_servers_answer_and_a_killed_one_is_replaced(cluster):
    await two_agents(cluster)
    reply = await cluster.put(web_app("web", 3))
    assert reply.created and reply.app.version

    endpoints = await cluster.healthy_endpoints("web", 3)
    for endpoint in endpoints:
        assert await asyncio.to_thread(http_ok, endpoint)
    status = await cluster.get("web")
    assert (status.state, status.healthy, status.running) == ("RUNNING", 3, 3)
    assert {t.hostname for t in status.tasks} == {"host-0", "host-1"}  # spread

    victim = status.tasks[0]
    os.kill(task_pid(cluster, victim.task_id), signal.SIGKILL)

    async def replaced():
        reply = await cluster.stub.GetEndpoints(S.GetEndpointsRequest(app_id="web"))
        ids = {e.task_id for e in reply.endpoints}
        return victim.task_id not in ids and len(ids) == 3 and reply

    reply = await eventually_async(replaced, timeout=60, message="a replacement")
    assert {t.task_id for t in (await cluster.get("web")).tasks} == {
        e.task_id for e in reply.endpoints
    }
    for e in reply.endpoints:
        assert await asyncio.to_thread(http_ok, f"{e.host}:{e.ports[0]}")


async def test_unique_hostname_places_two_and_says_why_the_third_waits(cluster):
    await two_agents(cluster)
    app = web_app("uniq", 3, constraints=[S.Constraint(field="hostname", operator="UNIQUE")])
    await cluster.put(app)
    await cluster.healthy_endpoints("uniq", 2)

    async def waiting():
        status = await cluster.get("uniq")
        return status if status.waiting_reason and status.unplaceable else None

    status = await eventually_async(waiting, timeout=30, message="a waiting reason")
    assert status.running == 2 and status.state == "WAITING"
    assert "1 instance(s) cannot be placed" in status.waiting_reason
    assert "[hostname, UNIQUE]" in status.waiting_reason
    assert "host-0" in status.waiting_reason and "host-1" in status.waiting_reason
    assert sorted(t.hostname for t in status.tasks) == ["host-0", "host-1"]

    # A third agent ends the wait.
    await cluster.start_agent(2)
    await cluster.healthy_endpoints("uniq", 3)
    assert (await cluster.get("uniq")).waiting_reason == ""


async def test_rolling_update_never_drops_below_minimum_health_capacity(cluster):
    await two_agents(cluster)
    strategy = S.UpgradeStrategy(minimum_health_capacity=0.5, maximum_over_capacity=0)
    await cluster.put(web_app("roll", 3, upgrade_strategy=strategy))
    await cluster.healthy_endpoints("roll", 3)
    first = await cluster.get("roll")
    old_ids = {t.task_id for t in first.tasks}

    seen: list[int] = []
    stream = cluster.stub.WatchEndpoints(S.WatchEndpointsRequest(app_id="roll"))

    async def record():
        async for endpoints in stream:
            seen.append(len(endpoints.endpoints))

    recorder = asyncio.create_task(record())
    await eventually_async(lambda: seen, message="the first watch message")

    update = web_app("roll", 3, upgrade_strategy=strategy, env={"RELEASE": "2"})
    reply = await cluster.put(update)
    assert not reply.created and reply.deploying
    assert reply.app.version != first.app.version

    async def rolled():
        status = await cluster.get("roll")
        ids = {t.task_id for t in status.tasks}
        return (
            status.healthy == 3
            and not ids & old_ids
            and not status.deployments
            and all(t.version == reply.app.version for t in status.tasks)
        )

    await eventually_async(rolled, timeout=90, message="all instances replaced")
    stream.cancel()
    await asyncio.gather(recorder, return_exceptions=True)

    floor = math.ceil(3 * 0.5)
    assert min(seen) >= floor, seen
    assert len(seen) > 2  # endpoints did change along the way
    for endpoint in await cluster.endpoints("roll"):
        assert await asyncio.to_thread(http_ok, endpoint)


async def test_scale_up_and_down_keeps_the_oldest(cluster):
    await two_agents(cluster)
    await cluster.put(web_app("sc", 1))
    await cluster.healthy_endpoints("sc", 1)
    oldest = (await cluster.get("sc")).tasks[0].task_id

    await cluster.stub.ScaleApp(S.ScaleAppRequest(id="sc", instances=3))
    await cluster.healthy_endpoints("sc", 3)
    await cluster.stub.ScaleApp(S.ScaleAppRequest(id="sc", instances=1))

    async def scaled_down():
        status = await cluster.get("sc")
        return [t.task_id for t in status.tasks] == [oldest] and status.healthy == 1

    await eventually_async(scaled_down, timeout=30, message="scaled down to the oldest")

    await cluster.stub.ScaleApp(S.ScaleAppRequest(id="sc", instances=0))
    await eventually_async(
        lambda: _state(cluster, "sc", "SUSPENDED"), timeout=30, message="suspended"
    )


async def _state(cluster, app_id, state):
    return (await cluster.get(app_id)).state == state


async def test_daemon_restart_keeps_the_app_and_adopts_its_tasks(cluster):
    await two_agents(cluster)
    await cluster.put(web_app("keep", 2))
    await cluster.healthy_endpoints("keep", 2)
    before = {t.task_id for t in (await cluster.get("keep")).tasks}

    await cluster.stop_services()
    await cluster.start_services()
    status = await cluster.get("keep")
    assert status.app.id == "keep" and {t.task_id for t in status.tasks} == before
    endpoints = await cluster.healthy_endpoints("keep", 2)
    assert {t.task_id for t in (await cluster.get("keep")).tasks} == before  # not relaunched
    for endpoint in endpoints:
        assert await asyncio.to_thread(http_ok, endpoint)


async def test_delete_kills_the_instances(cluster):
    await two_agents(cluster)
    await cluster.put(web_app("gone", 2))
    await cluster.healthy_endpoints("gone", 2)
    pids = [task_pid(cluster, t.task_id) for t in (await cluster.get("gone")).tasks]
    await cluster.stub.DeleteApp(S.DeleteAppRequest(id="gone"))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.get("gone")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND

    def all_dead():
        for pid in pids:
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                pass
        return True

    await eventually_async(all_dead, timeout=30, message="instances killed")


async def test_an_app_no_agent_can_host_says_so(cluster):
    await two_agents(cluster)
    app = web_app(
        "nowhere", 2, constraints=[S.Constraint(field="rack", operator="CLUSTER", value="r9")]
    )
    await cluster.put(app)

    async def reason():
        status = await cluster.get("nowhere")
        return status if status.unplaceable else None

    status = await eventually_async(reason, timeout=30, message="unplaceable")
    assert "[rack, CLUSTER, r9]" in status.waiting_reason
    assert "2 instance(s) cannot be placed" in status.waiting_reason
    assert status.running == 0 and status.state == "WAITING"


async def test_a_drained_agents_instance_moves_to_another_agent_before_it_is_stopped(cluster):
    from agora.common.rpc import insecure_channel
    from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc

    await two_agents(cluster)
    await cluster.put(web_app("web", 1))
    [endpoint] = await cluster.healthy_endpoints("web", 1)
    [old] = (await cluster.get("web")).tasks
    async with insecure_channel(cluster.master.address) as channel:
        operator = operator_pb2_grpc.OperatorStub(channel)
        reply = await operator.DrainAgent(operator_pb2.DrainAgentRequest(agent_id=old.agent_id))
        assert (reply.tasks, reply.deadline) == (1, 0.0)  # no deadline: nothing is forced

        async def moved():
            status = await cluster.get("web")
            running = [t for t in status.tasks if t.state == common_pb2.TASK_RUNNING]
            on_drained = [t for t in running if t.agent_id == old.agent_id]
            return status if status.healthy == 1 and running and not on_drained else None

        status = await eventually_async(moved, timeout=60, message="the instance moved")
        [new] = [t for t in status.tasks if t.state == common_pb2.TASK_RUNNING]
        assert new.agent_id != old.agent_id and new.task_id != old.task_id
        agents = (await operator.ListAgents(operator_pb2.ListAgentsRequest())).agents
        drained = next(a for a in agents if a.info.agent_id == old.agent_id)
        assert (drained.state, drained.task_count) == ("DRAINING", 0)
    assert await asyncio.to_thread(http_ok, (await cluster.endpoints("web"))[0])
