"""The master's end of an agent's stream, over real gRPC: what it sends arrives in order, a
removal ends the stream cleanly after its Shutdown, and an agent that stops reading is cut off
(the master's memory stays bounded) but kept, and registers again on a new stream.

An idle agent costs the master one coroutine: messages are written from a task made only while
some wait (master/registry.py, Session.push_to). These tests hold that design to what the old
queue-and-two-tasks one promised."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from master_harness import AgentMessage, MasterMessage, agent_info, start_master

from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.master.registry import DISCONNECTED
from agora.v1 import agent_link_pb2_grpc

RESOURCES = Resources.parse("cpus:4;mem:4096")
# Long enough that nothing here is removed for silence while the test talks to the master.
PATIENT = dict(heartbeat_interval_seconds=1.0, agent_timeout_seconds=30.0)


@contextlib.asynccontextmanager
async def _master(**overrides):
    """A master (patient with silence, as PATIENT says) and a channel to it, both closed after."""
    master = await start_master(None, **{**PATIENT, **overrides})
    channel = insecure_channel(master.address)
    try:
        yield master, channel
    finally:
        await channel.close()
        await master.stop(0)


async def _register(channel, agent_id: str = "", hostname: str = "h1"):
    """Opens a stream and registers; returns the call and the Registered message."""
    call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect()
    info = agent_info(agent_id, hostname, RESOURCES, {})
    await call.write(AgentMessage(register=AgentMessage.Register(info=info)))
    first = await call.read()
    assert first.WhichOneof("message") == "registered", first
    return call, first.registered


async def test_messages_arrive_in_the_order_the_master_sent_them():
    async with _master() as (master, channel):
        call, registered = await _register(channel)
        agent = master.core.reg.agents[registered.agent_id]
        # Sent in one go (a burst the writer drains) and then one by one (a writer each time).
        for i in range(50):
            agent.send(MasterMessage(kill_task=MasterMessage.KillTask(task_id=f"t{i}")))
        for i in range(50, 60):
            agent.send(MasterMessage(kill_task=MasterMessage.KillTask(task_id=f"t{i}")))
            await asyncio.sleep(0.01)
        got = [(await call.read()).kill_task.task_id for _ in range(60)]
        assert got == [f"t{i}" for i in range(60)]
        call.cancel()


async def test_a_removed_agent_gets_its_shutdown_and_then_a_cleanly_ended_stream():
    async with _master() as (master, channel):
        call, registered = await _register(channel)
        core = master.core
        core.agents.remove(core.reg.agents[registered.agent_id], "retired by the operator")
        message = await call.read()
        assert message.WhichOneof("message") == "shutdown"
        assert "retired by the operator" in message.shutdown.reason
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK
        assert registered.agent_id not in core.reg.agents


async def test_an_agent_that_stops_reading_is_cut_off_but_kept_and_comes_back():
    async with _master(max_send_queue=20) as (master, channel):
        call, registered = await _register(channel)  # then it never reads again
        core = master.core
        agent = core.reg.agents[registered.agent_id]
        big = "x" * 60_000  # gRPC's flow control holds the writer after a few of these
        for i in range(400):
            if not agent.connected:
                break
            agent.send(MasterMessage(kill_task=MasterMessage.KillTask(task_id=f"{i}-{big}")))
            await asyncio.sleep(0.005)
        for _ in range(200):
            if not agent.connected:
                break
            await asyncio.sleep(0.05)
        assert not agent.connected, "the master kept writing to an agent that stopped reading"
        # Disconnected, not removed: it is alive, and comes back within the agent timeout.
        assert core.reg.agents[registered.agent_id].state == DISCONNECTED
        call.cancel()
        again, back = await _register(channel, agent_id=registered.agent_id)
        assert back.agent_id == registered.agent_id
        assert core.reg.agents[registered.agent_id].connected
        again.cancel()


async def test_a_stream_that_never_registers_is_refused():
    async with _master() as (master, channel):
        call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect()
        await call.write(AgentMessage(heartbeat=AgentMessage.Heartbeat()))
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Register" in await call.details()
        call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect()
        await call.done_writing()  # ends the stream without a word
        assert await call.code() == grpc.StatusCode.INVALID_ARGUMENT
