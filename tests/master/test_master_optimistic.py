"""Optimistic offers through the real master over gRPC: two frameworks offered the same agent,
both Accept; one wins, the other gets ABORTED (OFFER_CONFLICT) naming the resources, nothing is
double-booked and the books balance in what the operator sees."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from master_harness import FakeAgent, FakeFramework, operator, start_master, task

from agora.common import Resources
from agora.common.errors import Reason, reason_of
from agora.v1 import common_pb2, operator_pb2, scheduler_pb2


async def test_conflicting_accepts_one_wins_one_is_aborted_and_nothing_is_double_booked():
    master = await start_master(None, offer_mode="optimistic", optimistic_grace_seconds=0.0)
    agent = FakeAgent(master.address, resources="cpus:4;mem:4096")
    first, second = FakeFramework(master.address, "first"), FakeFramework(master.address, "second")
    try:
        await agent.connect()
        await first.subscribe()
        await second.subscribe()
        [offer_1] = await first.offers()
        [offer_2] = await second.offers()
        # The same resources, offered to both at once.
        assert offer_1.agent_id == offer_2.agent_id == agent.agent_id
        assert offer_1.resources == offer_2.resources
        # Both accept at once, each for 3 of the 4 cpus: only one can have them.
        results = await asyncio.gather(
            first.accept([offer_1.offer_id], [task("t1", "cpus:3;mem:1024")]),
            second.accept([offer_2.offer_id], [task("t2", "cpus:3;mem:1024")]),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert len(errors) == 1, results
        [error] = errors
        assert error.code() == grpc.StatusCode.ABORTED
        assert reason_of(error) == Reason.OFFER_CONFLICT
        assert "re-plan with fresh offers" in (error.details() or "")
        loser = second if results[1] is error else first
        winner = first if loser is second else second
        # The loser's offer was rescinded, and it is offered what is left.
        await loser.inbox.expect("rescind")
        [rest] = await loser.offers()
        assert Resources.from_proto(rest.resources) == Resources.parse("cpus:1;mem:3072")
        run = await agent.inbox.expect("run_task")
        assert run.framework_id == winner.framework_id
        await asyncio.sleep(0.1)
        assert len(agent.inbox.of("run_task")) == 1  # the loser launched nothing

        channel, ops = operator(master.address)
        async with channel:
            state = await ops.GetState(operator_pb2.GetStateRequest())
        [summary] = state.agents
        # Allocated is what tasks use (the loser's fresh offer holds nothing).
        assert Resources.from_proto(summary.allocated) == Resources.parse("cpus:3;mem:1024")
        assert len(state.tasks) == 1 and state.tasks[0].framework_id == winner.framework_id
        view = await winner.stub.GetClusterView(scheduler_pb2.ClusterViewRequest(**winner.ids()))
        [row] = view.agents
        free, used = Resources.from_proto(row.free), Resources.from_proto(row.used)
        assert free + used == Resources.from_proto(row.total)
        assert master.core.counts.accepts_aborted == 1
    finally:
        for client in (first, second, agent):
            await client.close()
        await master.stop(0)


async def test_the_master_refuses_an_unknown_offer_mode():
    with pytest.raises(ValueError, match="offer_mode must be one of pessimistic, optimistic"):
        await start_master(None, offer_mode="eager")


async def test_a_hold_that_cannot_be_met_expires_on_the_masters_tick():
    master = await start_master(None)
    agent = FakeAgent(master.address, resources="cpus:4;mem:4096")
    busy, gang = FakeFramework(master.address, "busy"), FakeFramework(master.address, "gang")
    try:
        await agent.connect()
        await busy.subscribe()
        [offer] = await busy.offers()
        await busy.accept([offer.offer_id], [task("b", "cpus:3;mem:128")], refuse_seconds=60)
        await gang.subscribe()
        [rest] = await gang.offers()  # the free cpu: declined, so the hold may collect it
        await gang.stub.Decline(
            scheduler_pb2.DeclineRequest(
                **gang.ids(),
                offer_ids=[rest.offer_id],
                filters=common_pb2.Filters(refuse_seconds=60),
            )
        )
        reply = await gang.stub.Hold(
            scheduler_pb2.HoldRequest(
                **gang.ids(),
                count=2,
                resources=Resources.parse("cpus:1;mem:64").to_proto(),
                timeout_seconds=1.0,
            )
        )
        ended = await gang.inbox.expect("hold", timeout=10)
        assert (ended.hold_id, ended.state) == (reply.hold_id, scheduler_pb2.HOLD_EXPIRED)
        assert "1 of 2" in ended.message  # it had taken the one free cpu, now released
        assert master.core.allocator.free(agent.agent_id).scalar("cpus") == 1
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await gang.stub.ReleaseHold(
                scheduler_pb2.ReleaseHoldRequest(**gang.ids(), hold_id=reply.hold_id)
            )
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert reason_of(e.value) == Reason.HOLD_UNKNOWN
    finally:
        for client in (busy, gang, agent):
            await client.close()
        await master.stop(0)
