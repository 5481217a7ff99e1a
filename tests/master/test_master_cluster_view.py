"""Scheduler.GetClusterView: a framework reads the whole cluster's resources (Omega's shared
view), offered to it or not, and it matches what the operator sees (`agora cluster state`)."""

from __future__ import annotations

import grpc
import pytest
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.common import Resources
from agora.common.errors import Reason, reason_of
from agora.v1 import operator_pb2, scheduler_pb2


async def test_the_shared_view_shows_every_agent_and_matches_the_operators_state():
    master = await start_master(None)
    agents = [FakeAgent(master.address, hostname=f"h{i}") for i in range(2)]
    first, second = FakeFramework(master.address, "first"), FakeFramework(master.address, "second")
    try:
        for agent in agents:
            await agent.connect()
        await first.subscribe()
        offers = await first.offers(count=2)  # DRF: both agents go to the only framework
        await first.accept([offers[0].offer_id], [task("t1", "cpus:1;mem:128")], refuse_seconds=60)
        await agents[0].inbox.expect("run_task")
        await second.subscribe()
        # Settle before reading both views: what first refused on the busy agent goes to second.
        second_offers = await second.offers(count=1)
        assert {o.agent_id for o in second_offers} == {offers[0].agent_id}

        view = await second.stub.GetClusterView(scheduler_pb2.ClusterViewRequest(**second.ids()))
        by_agent = {a.agent_id: a for a in view.agents}
        assert set(by_agent) == {a.agent_id for a in agents}
        busy = by_agent[offers[0].agent_id]
        assert Resources.from_proto(busy.used) == Resources.parse("cpus:1;mem:128")
        # Every agent's books balance: free + offered + used = total.
        for row in view.agents:
            parts = [Resources.from_proto(r) for r in (row.free, row.offered, row.used)]
            assert parts[0] + parts[1] + parts[2] == Resources.from_proto(row.total), row

        channel, ops = operator(master.address)
        async with channel:
            state = await ops.GetState(operator_pb2.GetStateRequest())
        for summary in state.agents:
            row = by_agent[summary.info.agent_id]
            offered, used = (Resources.from_proto(r) for r in (row.offered, row.used))
            assert Resources.from_proto(summary.offered) == offered
            assert Resources.from_proto(summary.allocated) == offered + used
            assert (row.hostname, row.state) == (summary.info.hostname, summary.state)
    finally:
        for client in (first, second, *agents):
            await client.close()
        await master.stop(0)


async def test_only_a_subscribed_framework_may_read_the_view():
    master = await start_master(None)
    framework = FakeFramework(master.address)
    try:
        await framework.subscribe()
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await framework.stub.GetClusterView(
                scheduler_pb2.ClusterViewRequest(framework_id=framework.framework_id, stream_id="x")
            )
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert reason_of(e.value) == Reason.STREAM_STALE
    finally:
        await framework.close()
        await master.stop(0)
