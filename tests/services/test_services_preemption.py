"""Preemption end to end with the services framework (issue 34, item 4): on real agents, role a's
services daemon fills the cluster with an app; role b's, guaranteed an instance's worth, puts an
app the cluster has no room for. Past the master's timeout one of a's instances is preempted
for it: b's instance runs, and a's app replaces its instance (here it waits: the cluster is full)
without counting a failure, and its status says which instance was preempted, for whom."""

from __future__ import annotations

import asyncio

from harness import agora_async, eventually_async
from services_cluster import ServiceCluster

from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.frameworks.service import ServicesDaemon
from agora.v1 import services_pb2 as S
from agora.v1 import services_pb2_grpc


def sleeper(app_id: str, instances: int) -> S.App:
    return S.App(
        id=app_id,
        cmd="exec sleep 300",
        instances=instances,
        cpus=0.5,
        mem=32,
        backoff=S.BackoffPolicy(backoff_seconds=30),  # a failure would show as DELAYED
        kill_grace_period_seconds=0.5,
    )


async def test_a_preempted_instance_is_replaced_and_reported_on_its_app(tmp_path):
    cluster = ServiceCluster(tmp_path)
    await cluster.start_master(guarantee_preemption_timeout_seconds=2.0)
    b_daemon = channel = None
    try:
        for index in range(2):
            await cluster.start_agent(index, cpus=1, mem=512)
        await cluster.start_services(role="a")
        await cluster.put(sleeper("fill", 4))  # 4 x 0.5 cpu: both agents full

        async def filled():
            status = await cluster.get("fill")
            return status if status.running == 4 else None

        await eventually_async(filled, timeout=30, message="a's app fills the cluster")
        assert cluster.master is not None
        cluster.master.core.allocator.set_quota("b", Resources.parse("cpus:0.5"), None)
        b_daemon = ServicesDaemon(
            cluster.services_config(role="b", name="services-b", state_dir=tmp_path / "b")
        )
        await b_daemon.start()
        channel = insecure_channel(b_daemon.address)
        b = services_pb2_grpc.ServicesStub(channel)
        await eventually_async(
            lambda: b_daemon.driver is not None and b_daemon.driver.connected,
            timeout=20,
            message="b's services daemon subscribed",
        )
        await b.PutApp(S.PutAppRequest(app=sleeper("urgent", 1)))

        async def b_runs():
            status = await b.GetApp(S.GetAppRequest(id="urgent"))
            return status if status.running == 1 else None

        await eventually_async(b_runs, timeout=30, message="b's instance runs by preemption")

        async def reported():
            status = await cluster.get("fill")
            return status if status.last_preemption else None

        status = await eventually_async(reported, timeout=20, message="a's app reports it")
        assert status.last_preemption.startswith("instance fill-")
        assert "preempted: role b needs cpus:0.5" in status.last_preemption
        assert "(guarantee)" in status.last_preemption
        assert status.last_preemption_at > 0
        shown = await agora_async("app", "get", "fill", "--master", cluster.master.address)
        assert f"last preemption: {status.last_preemption} (" in shown.stdout, shown.stdout
        # The preempted task is gone from the app, three run on, and the fourth waits to be
        # replaced (no room is left): not a failure, so no restart backoff.
        preempted = status.last_preemption.split()[1]
        assert preempted not in {t.task_id for t in status.tasks}
        assert status.running == 3 and status.app.instances == 4
        assert status.last_failure == "" and status.delayed_until == 0
        assert status.state == "WAITING", status.state
        # Exactly one of a's was stopped, and nothing more over the next timeout and more.
        await asyncio.sleep(3.0)
        stopped = [p.task_id for p in cluster.master.core.preemptions.history]
        assert stopped == [preempted]
        assert (await cluster.get("fill")).running == 3
    finally:
        if channel is not None:
            await channel.close()
        if b_daemon is not None:
            await b_daemon.stop()
        await cluster.stop()
