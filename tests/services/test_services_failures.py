"""Instances on a lost agent are replaced elsewhere; when that agent comes back, the master has
it kill its old tasks, and the app keeps exactly its wanted instances."""

from __future__ import annotations

import asyncio

import pytest
from harness import eventually_async
from services_cluster import ServiceCluster, http_ok, web_app

from agora.agent import AgentDaemon


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    yield c
    await c.stop()


async def test_instances_of_a_lost_agent_are_replaced_on_another(cluster):
    lost = await cluster.start_agent(0)
    await cluster.start_agent(1)
    await cluster.start_services()
    await cluster.put(web_app("ha", 2))
    await cluster.healthy_endpoints("ha", 2)
    status = await cluster.get("ha")
    on_lost = {t.task_id for t in status.tasks if t.agent_id == lost.agent_id}
    assert on_lost  # spread over both agents

    await lost.stop(kill_tasks=False)  # the agent goes silent; its tasks run on, unreachable

    async def replaced():
        current = await cluster.get("ha")
        ids = {t.task_id for t in current.tasks}
        return not ids & on_lost and current.healthy == 2 and len(ids) == 2

    await eventually_async(replaced, timeout=60, message="replacements on the other agent")
    assert {t.hostname for t in (await cluster.get("ha")).tasks} == {"host-1"}
    for endpoint in await cluster.endpoints("ha"):
        assert await asyncio.to_thread(http_ok, endpoint)

    # The agent comes back: removed meanwhile, it is told to kill its tasks, and registers
    # afresh. The app neither adopts the old tasks nor loses its new ones.
    back = AgentDaemon(lost.config)
    cluster.agents[cluster.agents.index(lost)] = back
    await back.start()
    await eventually_async(
        lambda: back.agent_id and back.agent_id != lost.agent_id,
        timeout=30,
        message="the agent registered afresh",
    )
    await eventually_async(
        lambda: not back.tasks.active_runs(), timeout=30, message="old tasks killed"
    )
    current = await cluster.get("ha")
    assert len(current.tasks) == 2 and current.healthy == 2


async def test_master_restart_keeps_the_instances(cluster):
    await cluster.start_agent(0)
    await cluster.start_agent(1)
    await cluster.start_services()
    await cluster.put(web_app("steady", 2))
    await cluster.healthy_endpoints("steady", 2)
    before = {t.task_id for t in (await cluster.get("steady")).tasks}

    port = cluster.master.port
    await cluster.master.stop(0)
    from agora.master import Master, MasterConfig

    cluster.master = Master(
        MasterConfig(
            host="127.0.0.1",
            port=port,
            state_dir=cluster.root / "master",
            heartbeat_interval_seconds=0.2,
            agent_timeout_seconds=5.0,
            allocation_interval_seconds=0.5,
        )
    )
    await cluster.master.start()

    await eventually_async(
        lambda: (
            cluster.services.driver.connected
            and cluster.services.driver.master_id == cluster.master.master_id
        ),
        timeout=30,
        message="services re-subscribed",
    )
    await cluster.healthy_endpoints("steady", 2)
    # Give reconciliation its say, then check nothing was relaunched.
    await eventually_async(
        lambda: _all_agents_back(cluster), timeout=30, message="agents re-registered"
    )
    status = await cluster.get("steady")
    assert {t.task_id for t in status.tasks} == before and status.healthy == 2
    for endpoint in await cluster.endpoints("steady"):
        assert await asyncio.to_thread(http_ok, endpoint)


def _all_agents_back(cluster) -> bool:
    return all(a.master_id == cluster.master.master_id for a in cluster.agents)
