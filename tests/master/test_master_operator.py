"""Operator calls: weights and quota survive a restart, draining, explanations, offer timeout."""

from __future__ import annotations

import math

import grpc
import pytest
from master_harness import FakeAgent, FakeFramework, operator, start_master

from agora.common import Resources
from agora.v1 import operator_pb2, scheduler_pb2


async def test_weight_and_quota_persist_across_a_restart(tmp_path):
    state = tmp_path / "state"
    master = await start_master(state)
    channel, ops = operator(master.address)
    async with channel:
        await ops.UpdateWeight(operator_pb2.UpdateWeightRequest(role="analytics", weight=3))
        await ops.SetQuota(
            operator_pb2.SetQuotaRequest(
                role="analytics",
                quota=operator_pb2.Quota(guarantee=Resources.parse("cpus:2;mem:512").to_proto()),
            )
        )
    await master.stop(0)

    master = await start_master(state)
    try:
        channel, ops = operator(master.address)
        async with channel:
            reply = await ops.ListRoles(operator_pb2.ListRolesRequest())
            roles = {r.role: r for r in reply.roles}
            assert roles["analytics"].weight == 3
            assert Resources.from_proto(roles["analytics"].quota.guarantee) == Resources.parse(
                "cpus:2;mem:512"
            )
    finally:
        await master.stop(0)


async def test_drained_agent_gets_no_new_offers(tmp_path):
    master = await start_master(None)
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        [offer] = await framework.offers()
        channel, ops = operator(master.address)
        async with channel:
            await ops.DrainAgent(operator_pb2.DrainAgentRequest(agent_id=agent.agent_id))
            rescind = await framework.inbox.expect("rescind")
            assert rescind.offer_id == offer.offer_id
            [summary] = (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents
            assert summary.state == "DRAINING"
            n = len(framework.inbox.items)
            await framework.stub.Revive(scheduler_pb2.ReviveRequest(**framework.ids()))
            explained = await ops.ExplainOffers(
                operator_pb2.ExplainOffersRequest(framework="test-fw")
            )
            assert explained.framework_id == framework.framework_id
            assert not [e for e in framework.inbox.items[n:] if e.WhichOneof("event") == "offers"]
            # Undrained, the agent's resources are offered again.
            await ops.UndrainAgent(operator_pb2.UndrainAgentRequest(agent_id=agent.agent_id))
            again = await framework.inbox.expect("offers", after=n)
            assert again.offers[0].agent_id == agent.agent_id
            [summary] = (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents
            assert summary.state == "ACTIVE"
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await ops.UndrainAgent(operator_pb2.UndrainAgentRequest(agent_id="agent-nope"))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            # A deadline that is no number of seconds is refused, saying what to give.
            for bad in (-1.0, math.nan, 1e12):
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await ops.DrainAgent(
                        operator_pb2.DrainAgentRequest(
                            agent_id=agent.agent_id, deadline_seconds=bad
                        )
                    )
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "give seconds from 0 (no deadline)" in e.value.details()
            [summary] = (await ops.ListAgents(operator_pb2.ListAgentsRequest())).agents
            assert summary.state == "ACTIVE"  # and nothing was drained
    finally:
        await framework.close()
        await agent.close()
        await master.stop(0)


async def test_explain_names_suppression(tmp_path):
    master = await start_master(None)
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        await framework.stub.Suppress(scheduler_pb2.SuppressRequest(**framework.ids()))
        channel, ops = operator(master.address)
        async with channel:
            explained = await ops.ExplainOffers(
                operator_pb2.ExplainOffersRequest(framework=framework.framework_id)
            )
        assert any("suppress" in reason for reason in explained.reasons)
    finally:
        await framework.close()
        await master.stop(0)


async def test_unanswered_offers_are_rescinded_after_the_offer_timeout(tmp_path):
    master = await start_master(None, offer_timeout_seconds=0.3)
    agent = FakeAgent(master.address)
    await agent.connect()
    framework = FakeFramework(master.address)
    await framework.subscribe()
    try:
        [offer] = await framework.offers()
        rescind = await framework.inbox.expect("rescind")
        assert rescind.offer_id == offer.offer_id
        # The resources come straight back (no filter) in a new offer.
        again = await framework.offers()
        assert again[0].offer_id != offer.offer_id
        assert again[0].agent_id == agent.agent_id
    finally:
        await framework.close()
        await agent.close()
        await master.stop(0)


async def test_get_state_totals_and_health(tmp_path):
    master = await start_master(None)
    agents = [
        FakeAgent(master.address, hostname=f"h{i}", resources="cpus:2;mem:1024") for i in range(2)
    ]
    try:
        for a in agents:
            await a.connect()
        channel, ops = operator(master.address)
        async with channel:
            state = await ops.GetState(operator_pb2.GetStateRequest())
        assert state.master_id == master.master_id
        assert Resources.from_proto(state.total) == Resources.parse("cpus:4;mem:2048")
        assert {a.info.hostname for a in state.agents} == {"h0", "h1"}
        assert all(a.state == "ACTIVE" for a in state.agents)
    finally:
        for a in agents:
            await a.close()
        await master.stop(0)


async def test_list_roles_shows_frameworks_allocation_and_quota(tmp_path):
    master = await start_master(None)
    agent = FakeAgent(master.address, resources="cpus:4;mem:1024")
    await agent.connect()
    framework = FakeFramework(master.address, role="analytics")
    await framework.subscribe()
    try:
        await framework.offers()
        channel, ops = operator(master.address)
        async with channel:
            quota = operator_pb2.Quota(
                guarantee=Resources.parse("cpus:1").to_proto(),
                limit=Resources.parse("cpus:4;mem:1024").to_proto(),
            )
            await ops.SetQuota(operator_pb2.SetQuotaRequest(role="analytics", quota=quota))
            reply = await ops.ListRoles(operator_pb2.ListRolesRequest())
        analytics = {r.role: r for r in reply.roles}["analytics"]
        assert list(analytics.framework_ids) == [framework.framework_id]
        # The whole agent is on offer to the role's only framework.
        assert Resources.from_proto(analytics.allocated) == Resources.parse("cpus:4;mem:1024")
        assert analytics.dominant_share == 1.0
        assert Resources.from_proto(analytics.quota.guarantee) == Resources.parse("cpus:1")
        assert Resources.from_proto(analytics.quota.limit) == Resources.parse("cpus:4;mem:1024")
    finally:
        await framework.close()
        await agent.close()
        await master.stop(0)


async def test_why_no_offers_names_the_framework_sitting_on_unanswered_offers(tmp_path):
    master = await start_master(None, offer_timeout_seconds=120.0)
    agent = FakeAgent(master.address, resources="cpus:2;mem:1024")
    await agent.connect()
    hoarder = FakeFramework(master.address, name="hoarder")
    await hoarder.subscribe()
    waiting = FakeFramework(master.address, name="waiting")
    try:
        await hoarder.offers()  # it takes the whole agent and never answers
        await waiting.subscribe()
        channel, ops = operator(master.address)
        async with channel:
            explained = await ops.ExplainOffers(
                operator_pb2.ExplainOffersRequest(framework="waiting")
            )
        said = "\n".join(explained.reasons)
        assert f"hoarder ({hoarder.framework_id}) holds cpus:2" in said, said
        assert "unanswered offers on 1 agent(s)" in said
        assert "the offer timeout (120 s) returns them" in said
    finally:
        await waiting.close()
        await hoarder.close()
        await agent.close()
        await master.stop(0)
