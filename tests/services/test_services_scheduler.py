"""ServiceScheduler against the SDK's in-memory transport, with a clock the test moves: what it
launches, declines, kills and reports, decision by decision."""

from __future__ import annotations

import asyncio

import pytest
from harness import eventually_async

from agora.common import Resources
from agora.frameworks.sdk import Driver, framework_info
from agora.frameworks.sdk.testing import MemoryTransport, make_offer, offers_event, subscribed
from agora.frameworks.service.scheduler import ServiceScheduler
from agora.frameworks.service.store import ServiceStore
from agora.v1 import common_pb2, services_pb2

S = services_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def world():
    clock = Clock()
    store = ServiceStore(None)
    scheduler = ServiceScheduler(store, clock=clock, launch_timeout=60)
    transport = MemoryTransport()
    driver = Driver(scheduler, transport, framework_info("services"))
    running = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"))
    await eventually_async(
        lambda: scheduler.driver is not None and driver.connected, message="subscribed"
    )
    yield scheduler, transport, stream, clock
    driver.stop()
    await running
    store.close()


def app(app_id="web", instances=2, **fields) -> S.App:
    return S.App(id=app_id, cmd="sleep 100", instances=instances, cpus=1, mem=128, **fields)


def update(
    task_id: str, state: int, agent_id: str = "a1", healthy: bool | None = None, uuid: bytes = b""
) -> common_pb2.TaskStatus:
    status = common_pb2.TaskStatus(task_id=task_id, state=state, agent_id=agent_id, uuid=uuid)
    if healthy is not None:
        status.healthy = healthy
    return status


async def offer_round(transport, stream, *offers):
    before = len(transport.calls)
    stream.send(offers_event(*offers))
    await eventually_async(lambda: len(transport.calls) > before, message="a reply to offers")
    await asyncio.sleep(0)
    return transport.calls[before:]


async def test_launches_spread_over_agents_with_ports_and_the_app_env(world):
    scheduler, transport, stream, _ = world
    await scheduler.put_app(app(ports=1, env={"A": "1"}))
    calls = await offer_round(
        transport,
        stream,
        make_offer("o1", "a1", "cpus:4;mem:1024;ports:[31000-31009]"),
        make_offer("o2", "a2", "cpus:4;mem:1024;ports:[32000-32009]"),
    )
    accepts = [r for m, r in calls if m == "Accept"]
    assert len(accepts) == 2  # one instance on each agent
    for accept in accepts:
        [task] = accept.operations[0].launch.task_infos
        assert task.command.shell == "sleep 100"
        assert task.command.environment["A"] == "1"
        assert task.command.environment["AGORA_APP_ID"] == "web"
        assert task.labels["app"] == "web"
    instances = scheduler.instances_of("web")
    assert sorted(len(i.ports) for i in instances) == [1, 1]
    assert {i.agent_id for i in instances} == {"a1", "a2"}
    # Stored before the launch went out.
    assert {i.task_id for i in scheduler.store.instances()} == {i.task_id for i in instances}


async def test_failed_instance_waits_for_its_backoff_then_is_replaced(world):
    scheduler, transport, stream, clock = world
    await scheduler.put_app(app(instances=1, backoff=S.BackoffPolicy(backoff_seconds=10)))
    await offer_round(transport, stream, make_offer("o1", "a1", "cpus:4;mem:1024"))
    [first] = scheduler.instances_of("web")
    await scheduler.on_update(scheduler.driver, update(first.task_id, common_pb2.TASK_FAILED))
    assert scheduler.instances_of("web") == []
    await scheduler.converge()
    status = scheduler.status("web")
    assert status.state == "DELAYED" and status.delayed_until == pytest.approx(1010)
    assert "restart backoff after 1 failure(s)" in status.waiting_reason

    calls = await offer_round(transport, stream, make_offer("o2", "a1", "cpus:4;mem:1024"))
    assert [m for m, _ in calls] == ["Decline"]  # still backing off
    clock.now += 11
    await scheduler.converge()
    calls = await offer_round(transport, stream, make_offer("o3", "a1", "cpus:4;mem:1024"))
    assert "Accept" in [m for m, _ in calls]


async def test_an_instance_stopped_by_the_cluster_is_replaced_at_once_not_backed_off(world):
    scheduler, transport, stream, clock = world
    await scheduler.put_app(app(instances=1, backoff=S.BackoffPolicy(backoff_seconds=10)))
    await offer_round(transport, stream, make_offer("o1", "a1", "cpus:4;mem:1024"))
    for reason in ("REASON_PREEMPTED", "REASON_AGENT_DRAINED"):
        [first] = scheduler.instances_of("web")
        preempted = update(first.task_id, common_pb2.TASK_KILLED)
        preempted.reason = reason
        await scheduler.on_update(scheduler.driver, preempted)
        await scheduler.converge()
        assert scheduler.apps["web"].backoff.failures == 0  # not the instance's failure
        assert scheduler.status("web").state != "DELAYED"
        offer = make_offer(f"o-{reason}", "a1", "cpus:4;mem:1024")
        calls = await offer_round(transport, stream, offer)
        assert "Accept" in [m for m, _ in calls]  # replaced at once


async def test_an_unplaced_instance_is_told_to_the_master_with_its_apps_priority(world):
    scheduler, transport, stream, clock = world
    await scheduler.put_app(app(instances=2, priority=3))  # 1 cpu, 128 MB each
    # Room for one instance: it launches with the app's priority, and the other is demanded.
    calls = await offer_round(transport, stream, make_offer("o1", "a1", "cpus:1;mem:1024"))
    await eventually_async(lambda: any(m == "Demand" for m, _ in transport.calls))
    [accept] = [r for m, r in calls if m == "Accept"]
    [launched] = accept.operations[0].launch.task_infos
    assert launched.priority == 3
    [demand] = [r for m, r in transport.calls if m == "Demand"]
    assert demand.priority == 3
    assert Resources.from_proto(demand.unmet) == Resources.parse("cpus:1;mem:128")
    # The next round, still short of room: the same demand, which the driver does not resend.
    await offer_round(transport, stream, make_offer("o2", "a1", "cpus:0.5;mem:1024"))
    assert [m for m, _ in transport.calls].count("Demand") == 1


async def test_an_instance_that_never_runs_is_killed_after_the_launch_timeout(world):
    scheduler, transport, stream, clock = world
    await scheduler.put_app(app(instances=1))
    await offer_round(transport, stream, make_offer("o1", "a1", "cpus:4;mem:1024"))
    [stuck] = scheduler.instances_of("web")
    clock.now += 30
    await scheduler.converge()
    assert not transport.calls_of("Kill")
    clock.now += 31
    await scheduler.converge()
    [kill] = transport.calls_of("Kill")
    assert kill.task_id == stuck.task_id
    assert "not running 60s after launch" in scheduler.status("web").tasks[0].message


async def test_a_task_no_app_owns_is_killed(world):
    scheduler, transport, stream, _ = world
    await scheduler.on_update(scheduler.driver, update("stray-1", common_pb2.TASK_RUNNING))
    [kill] = transport.calls_of("Kill")
    assert kill.task_id == "stray-1"


async def test_health_changes_drive_endpoints_and_watchers(world):
    scheduler, transport, stream, _ = world
    check = common_pb2.HealthCheck(tcp=common_pb2.TcpCheck(port_index=0))
    await scheduler.put_app(app(instances=1, ports=1, health_check=check))
    await offer_round(transport, stream, make_offer("o1", "a1", "cpus:4;mem:1024;ports:[5-9]"))
    [instance] = scheduler.instances_of("web")
    queue = scheduler.watch("web")
    assert len(queue.get_nowait().endpoints) == 0
    await scheduler.on_update(scheduler.driver, update(instance.task_id, common_pb2.TASK_RUNNING))
    assert len(scheduler.endpoints("web").endpoints) == 0  # running, health not known yet
    await scheduler.on_update(
        scheduler.driver, update(instance.task_id, common_pb2.TASK_RUNNING, healthy=True)
    )
    endpoints = queue.get_nowait()
    assert [(e.task_id, list(e.ports)) for e in endpoints.endpoints] == [(instance.task_id, [5])]
    await scheduler.on_update(
        scheduler.driver, update(instance.task_id, common_pb2.TASK_RUNNING, healthy=False)
    )
    assert len(queue.get_nowait().endpoints) == 0
    await scheduler.delete_app("web")
    assert queue.get_nowait() is None  # the watch ends with the app


async def test_restart_reloads_apps_and_instances_with_their_health(tmp_path):
    store = ServiceStore(tmp_path / "s.sqlite3")
    scheduler = ServiceScheduler(store)
    await scheduler.put_app(app(instances=1))
    from agora.frameworks.service.instances import Instance

    instance = Instance(
        "web-1",
        "web",
        scheduler.apps["web"].app.version,
        "a1",
        "h1",
        "10.0.0.1",
        [8080],
        {},
        1.0,
        has_check=True,
        state=common_pb2.TASK_RUNNING,
        healthy=True,
    )
    store.put_instance(instance)
    store.set_framework_id("fw-9")
    store.close()

    again = ServiceScheduler(ServiceStore(tmp_path / "s.sqlite3"))
    assert again.store.framework_id() == "fw-9"
    assert list(again.apps) == ["web"]
    [endpoint] = again.endpoints("web").endpoints
    assert (endpoint.host, list(endpoint.ports)) == ("10.0.0.1", [8080])
    again.store.close()


async def test_backoff_starts_over_once_an_instance_has_served_a_while(world):
    scheduler, transport, stream, clock = world
    await scheduler.put_app(app(instances=2))
    await offer_round(transport, stream, make_offer("o1", "a1", "cpus:4;mem:1024"))
    first, second = scheduler.instances_of("web")
    await scheduler.on_update(scheduler.driver, update(first.task_id, common_pb2.TASK_RUNNING))
    await scheduler.on_update(scheduler.driver, update(second.task_id, common_pb2.TASK_FAILED))
    backoff = scheduler.apps["web"].backoff
    assert backoff.failures == 1
    clock.now += 10
    await scheduler.converge()
    assert backoff.failures == 1  # serving, but not for long enough yet
    clock.now += 25
    await scheduler.converge()
    assert backoff.failures == 0


async def test_old_instances_holding_unique_places_are_a_wait_not_unplaceable(world):
    from agora.common import Resources
    from agora.frameworks.sdk.constraints import AgentFacts
    from agora.frameworks.service.placement import AgentSlot

    scheduler, transport, stream, _ = world
    scheduler.catalog = [
        AgentSlot(AgentFacts(a, f"{a}.local"), Resources.parse("cpus:4;mem:1024"))
        for a in ("a1", "a2")
    ]
    unique = [S.Constraint(field="hostname", operator="UNIQUE")]
    await scheduler.put_app(app(constraints=unique))
    await offer_round(
        transport,
        stream,
        make_offer("o1", "a1", "cpus:4;mem:1024"),
        make_offer("o2", "a2", "cpus:4;mem:1024"),
    )
    for instance in scheduler.instances_of("web"):
        await scheduler.on_update(
            scheduler.driver, update(instance.task_id, common_pb2.TASK_RUNNING)
        )
    await scheduler.put_app(app(constraints=unique, env={"V": "2"}))
    await scheduler.converge()
    status = scheduler.status("web")
    assert not status.unplaceable and status.state == "DEPLOYING"
    assert status.waiting_reason.startswith("2 instance(s) wait for old instances to be replaced")
    assert "[hostname, UNIQUE]" in status.waiting_reason
