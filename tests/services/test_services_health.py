"""Unhealthy instances are killed and replaced, and a health-check storm takes down no more
instances at once than the upgrade strategy allows to be down."""

from __future__ import annotations

import pytest
from harness import eventually_async
from services_cluster import ServiceCluster

from agora.v1 import common_pb2, services_pb2

S = services_pb2


@pytest.fixture
async def cluster(tmp_path):
    c = ServiceCluster(tmp_path)
    await c.start_master()
    await c.start_agent(0, cpus=4)
    await c.start_agent(1, cpus=4)
    await c.start_services()
    yield c
    await c.stop()


# Ignores SIGTERM, so that a kill takes the whole grace period: long enough for a test polling
# the app to see the instances being killed.
STUBBORN = "trap '' TERM; while true; do sleep 0.1; done"


def checked_app(app_id: str, instances: int, check: str, **fields) -> S.App:
    return S.App(
        id=app_id,
        cmd=STUBBORN,
        instances=instances,
        cpus=0.1,
        mem=32,
        health_check=common_pb2.HealthCheck(
            command=common_pb2.CommandInfo(shell=check),
            grace_period_seconds=30,
            interval_seconds=0.1,
            timeout_seconds=2,
            max_consecutive_failures=2,
        ),
        backoff=S.BackoffPolicy(backoff_seconds=0.1, backoff_factor=1.0),
        kill_grace_period_seconds=1.0,
        **fields,
    )


def sandbox(cluster: ServiceCluster, task_id: str):
    for agent in cluster.agents:
        run = agent.tasks.find("", task_id)
        if run is not None:
            return run.sandbox
    raise AssertionError(f"no agent has {task_id}")


async def test_an_unhealthy_instance_is_killed_and_replaced(cluster):
    await cluster.put(checked_app("doc", 3, 'test ! -e "$AGORA_SANDBOX/sick"'))
    await cluster.healthy_endpoints("doc", 3)
    status = await cluster.get("doc")
    sick, *well = status.tasks
    (sandbox(cluster, sick.task_id) / "sick").touch()

    async def replaced():
        current = await cluster.get("doc")
        ids = {t.task_id for t in current.tasks}
        return sick.task_id not in ids and current.healthy == 3 and len(ids) == 3

    await eventually_async(replaced, timeout=60, message="the sick instance replaced")
    current = await cluster.get("doc")
    ids = {t.task_id for t in current.tasks}
    assert {t.task_id for t in well} <= ids  # the healthy ones were left alone
    # The app says what went wrong, and when: the failed check and the instance it cost.
    assert current.last_health_failure.startswith(f"task {sick.task_id}: ")
    assert current.last_failure.startswith(f"task {sick.task_id} KILLED: ")
    assert current.last_failure_at >= current.last_health_failure_at > 0


async def test_a_health_check_storm_kills_at_most_what_may_be_down(cluster, tmp_path):
    flag = tmp_path / "dependency-down"
    strategy = S.UpgradeStrategy(minimum_health_capacity=0.5, maximum_over_capacity=0.5)
    await cluster.put(
        checked_app(
            "storm", 4, 'test ! -e "$FLAG"', env={"FLAG": str(flag)}, upgrade_strategy=strategy
        )
    )
    await cluster.healthy_endpoints("storm", 4)
    first = {t.task_id for t in (await cluster.get("storm")).tasks}
    flag.touch()  # every instance fails its check at once

    most_killing = 0

    async def some_replaced():
        nonlocal most_killing
        status = await cluster.get("storm")
        most_killing = max(most_killing, sum(1 for t in status.tasks if t.killing))
        return len(first - {t.task_id for t in status.tasks}) >= 3

    await eventually_async(
        some_replaced, timeout=90, interval=0.02, message="instances replaced during the storm"
    )
    # 4 instances, at least 2 must stay healthy: at most 2 may be down, so at most 2 killed
    # at a time.
    assert 1 <= most_killing <= 2

    flag.unlink()
    await cluster.healthy_endpoints("storm", 4, timeout=90)
