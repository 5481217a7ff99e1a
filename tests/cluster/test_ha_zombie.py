"""Issue 38, part 1: no zombie leader. The leading master is paused (SIGSTOP) for longer than
its ZooKeeper session while an Accept is on its way to it; a successor is elected; the old
leader is resumed (SIGCONT). Whatever its ZooKeeper client has or has not noticed yet, it must
answer no Accept, send no offer and no RunTask after the successor's election.

The framework and the agent here are raw gRPC clients dialling the old leader's address (not
the master set), so that they keep their streams to it across the election: the real agent and
SDK leave a superseded leader on their own (tested below), which would hide what the master
does. Two masters on the session's ZooKeeper; the first reaches it through a proxy, so that its
link can also be cut while it is paused.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import grpc
import pytest
from e2e_framework import Recorder, running
from ha import MasterSet, ZkProxy
from harness import eventually_async
from master_harness import FakeAgent, FakeFramework, task

from agora.frameworks.sdk import TaskSpec, new_task_id
from agora.v1 import common_pb2, scheduler_pb2

pytestmark = pytest.mark.e2e


def timed(inbox) -> list[tuple[float, str]]:
    """From now on, (wall time, kind) of every message the inbox receives."""
    arrivals: list[tuple[float, str]] = []
    put = inbox.put

    async def put_timed(item) -> None:
        arrivals.append((time.time(), inbox.kind_of(item)))
        await put(item)

    inbox.put = put_timed
    return arrivals


async def successor_elected_at(ms: MasterSet) -> float:
    """When the master other than the first was elected (waiting for the election)."""

    def elected() -> float:
        rows = ms.roster()
        if rows and rows[0]["leading"] and rows[0]["address"] == ms.addresses[1]:
            return rows[0]["elected_at"] or 0.0
        return 0.0

    deadline = time.monotonic() + 30
    while not (at := await asyncio.to_thread(elected)):
        assert time.monotonic() < deadline, "no successor was elected"
        await asyncio.sleep(0.1)
    return at


async def accept_one(fw: FakeFramework, offer: common_pb2.Offer, name: str):
    """Accepts `offer` with one small task; the answer, or the error that came instead."""
    request = scheduler_pb2.AcceptRequest(
        **fw.ids(),
        offer_ids=[offer.offer_id],
        filters=common_pb2.Filters(refuse_seconds=0),
        operations=[
            scheduler_pb2.Operation(
                launch=scheduler_pb2.Operation.Launch(
                    task_infos=[task(name, resources="cpus:0.1;mem:16", shell="true")]
                )
            )
        ],
    )
    fw.used.add(offer.offer_id)
    try:
        return await fw.stub.Accept(request, timeout=30)
    except grpc.aio.AioRpcError as e:
        return e


@pytest.mark.parametrize("cut", [False, True], ids=["paused", "paused-and-cut-off"])
async def test_a_paused_leader_resumed_after_its_successor_was_elected_does_nothing(
    tmp_path, zookeeper, cut
):
    proxy = ZkProxy(zookeeper.address)
    ms = MasterSet(tmp_path, zookeeper.address, n=2)
    agent = fw = None
    try:
        ms.start_master(0, zk_url=ms.url.replace(zookeeper.address, proxy.address))
        assert (await asyncio.to_thread(ms.leader_index)) == 0
        ms.start_master(1)
        old = ms.masters[0]
        assert old is not None and old.proc is not None
        agent = FakeAgent(ms.addresses[0], resources="cpus:64;mem:65536", hostname="127.0.0.1")
        await agent.connect()
        fw = FakeFramework(ms.addresses[0], name="zombie-probe")
        await fw.subscribe()
        # Offers and launches flowing: each offer is accepted with one task, the rest of the
        # agent comes straight back (refuse 0) in the next offer.
        for i in range(3):
            offer = (await fw.offers(1))[-1]
            answer = await accept_one(fw, offer, f"before-{i}")
            assert not isinstance(answer, grpc.RpcError), answer
        await agent.inbox.expect("run_task", lambda r: r.task.task_id == "before-2")
        offer = (await fw.offers(1))[-1]
        framework_arrivals, agent_arrivals = timed(fw.inbox), timed(agent.inbox)

        os.kill(old.proc.pid, signal.SIGSTOP)
        if cut:
            proxy.cut()
        # On its way while the leader is paused: it can only be answered after the resume.
        in_flight = asyncio.create_task(accept_one(fw, offer, "in-flight"))
        elected_at = await successor_elected_at(ms)
        await asyncio.sleep(0.3)
        os.kill(old.proc.pid, signal.SIGCONT)

        answer = await in_flight
        # Refused as a standby refuses (NOT_LEADER), or cut as the process re-executed itself:
        # either way UNAVAILABLE, and the client looks for the leader.
        assert isinstance(answer, grpc.RpcError), f"the deposed leader answered {answer}"
        assert answer.code() == grpc.StatusCode.UNAVAILABLE, answer
        await eventually_async(
            lambda: "stepping down" in old.log_path.read_text(),
            timeout=30,
            message="the old leader stepped down",
        )
        await asyncio.sleep(0.5)  # anything it sent would have arrived by now
        late = [kind for at, kind in framework_arrivals if at > elected_at]
        assert not late, f"the framework heard {late} from the deposed leader"
        late_runs = [kind for at, kind in agent_arrivals if at > elected_at]
        assert not late_runs, f"the agent heard {late_runs} from the deposed leader"
        assert not [r for r in agent.inbox.of("run_task") if r.task.task_id == "in-flight"]
    finally:
        if cut:
            proxy.heal()
        for client in (fw, agent):
            if client is not None:
                await client.close()
        ms.stop()
        proxy.close()


async def test_a_real_agent_and_framework_leave_a_paused_leader_once_a_successor_is_elected(
    tmp_path, zookeeper
):
    """The clients' side of the fence: told by ZooKeeper that a leader of a higher epoch was
    elected, the agent cuts its stream to the old one (which, paused, would keep it open until
    keepalives fail) and follows the new one; so does the framework (whose driver also notices
    the silence; tests/sdk/test_sdk_epochs.py checks its epoch rule alone)."""
    ms = MasterSet(tmp_path, zookeeper.address, n=2)
    try:
        ms.start_master(0)
        assert (await asyncio.to_thread(ms.leader_index)) == 0
        ms.start_master(1)
        agent = ms.start_agent(0)
        async with running(Recorder(), master=ms.url, name="follows", failover_timeout=60) as fw:
            task_id = new_task_id("z")
            await fw.launch(
                TaskSpec(name=task_id, task_id=task_id, cpus=0.1, mem=32, command="sleep 600")
            )
            await eventually_async(
                lambda: any(u.state == common_pb2.TASK_RUNNING for u in fw.updates), timeout=30
            )
            framework_id = fw.framework_ids[0]
            old = ms.masters[0]
            assert old is not None and old.proc is not None
            os.kill(old.proc.pid, signal.SIGSTOP)
            try:
                await successor_elected_at(ms)
                await eventually_async(
                    lambda: fw.framework_ids.count(framework_id) >= 2,
                    timeout=30,
                    message="the framework resubscribed to the successor",
                )
                await eventually_async(
                    lambda: "ZooKeeper names a leader elected after" in agent.log_path.read_text(),
                    timeout=30,
                    message="the agent left the old leader",
                )
            finally:
                os.kill(old.proc.pid, signal.SIGCONT)
    finally:
        ms.stop()
