"""Agents through a relay (`agora relay`, a link shard), over real gRPC: they register, get
tasks and have their status updates acknowledged as if they had dialled the master; the master
holds one stream for all of them; an agent gone behind the relay, or the relay itself, is
disconnected at once and removed after the agent timeout; a refusal reaches the agent with its
status and reason; and with credentials only a principal an ACL rule names may relay, and the
agent's own principal (not the relay's) is what the master checks."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest
from master_harness import (
    AgentMessage,
    FakeAgent,
    FakeFramework,
    agent_info,
    start_master,
    task,
)
from test_master_acls import agora, creds

from agora.agent.relay import Relay, RelayConfig
from agora.common import Resources
from agora.common.errors import Reason, reason_of
from agora.common.rpc import open_channel
from agora.master import Master, MasterConfig
from agora.master.registry import ACTIVE, DISCONNECTED
from agora.v1 import (
    agent_link_pb2_grpc,
    agent_relay_pb2,
    agent_relay_pb2_grpc,
    common_pb2,
    scheduler_pb2,
)

RelayUp = agent_relay_pb2.RelayUp


@contextlib.asynccontextmanager
async def _relay(master_address: str, **overrides):
    relay = Relay(RelayConfig(master=master_address, port=0, **overrides))
    await relay.start()
    try:
        async with asyncio.timeout(10):
            await relay.connected.wait()
        yield relay
    finally:
        await relay.stop()


async def _until(predicate, timeout: float = 10.0, what: str = "the condition") -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_agents_behind_a_relay_register_run_tasks_and_get_their_updates_acknowledged():
    master = await start_master(None, agent_timeout_seconds=30.0)
    framework = None
    agents: list[FakeAgent] = []
    try:
        async with _relay(master.address) as relay:
            for name in ("host-a", "host-b", "host-c"):
                agent = FakeAgent(relay.address, hostname=name)
                await agent.connect()
                agents.append(agent)
            registry = master.core.reg.agents
            assert {a.agent_id for a in agents} == set(registry)
            assert all(registry[a.agent_id].state == ACTIVE for a in agents)
            assert relay.carried == 3

            framework = FakeFramework(master.address)
            await framework.subscribe()
            offers = await framework.offers(3)
            offer = next(o for o in offers if o.agent_id == agents[1].agent_id)
            await framework.accept([offer.offer_id], [task("t1", shell="true")])
            run = await agents[1].inbox.expect("run_task")
            assert run.task.task_id == "t1"
            assert not agents[0].inbox.of("run_task") and not agents[2].inbox.of("run_task")

            uuid = agents[1].status(framework.framework_id, "t1", common_pb2.TASK_FINISHED)
            update = await framework.inbox.expect("update", lambda u: u.status.task_id == "t1")
            assert update.status.state == common_pb2.TASK_FINISHED
            await framework.stub.Acknowledge(
                scheduler_pb2.AcknowledgeRequest(
                    **framework.ids(), agent_id=agents[1].agent_id, task_id="t1", uuid=uuid
                )
            )
            ack = await agents[1].inbox.expect("status_update_ack")
            assert ack.uuid == uuid and ack.task_id == "t1"
    finally:
        if framework is not None:
            await framework.close()
        for agent in agents:
            await agent.close()
        await master.stop(0)


async def test_an_agent_gone_behind_a_relay_is_removed_after_the_timeout_and_its_neighbour_stays():
    master = await start_master(None)  # FAST: agent timeout 1 s
    try:
        async with _relay(master.address) as relay:
            leaving, staying = FakeAgent(relay.address, hostname="a"), FakeAgent(relay.address)
            await leaving.connect()
            await staying.connect()
            agents = master.core.reg.agents
            await leaving.close()
            await _until(lambda: agents[leaving.agent_id].state == DISCONNECTED)
            await _until(lambda: leaving.agent_id not in agents, what="the removal")
            assert agents[staying.agent_id].state == ACTIVE
            await staying.close()
    finally:
        await master.stop(0)


async def test_a_relay_that_goes_ends_its_agents_streams_and_the_master_removes_them():
    master = await start_master(None)
    try:
        relay = Relay(RelayConfig(master=master.address, port=0))
        await relay.start()
        await asyncio.wait_for(relay.connected.wait(), 10)
        agent = FakeAgent(relay.address)
        await agent.connect()
        agents = master.core.reg.agents
        await relay.stop()
        await agent.inbox.wait_closed()
        assert agent.inbox.error is not None
        assert agent.inbox.error.code() == grpc.StatusCode.UNAVAILABLE
        await _until(lambda: agent.agent_id not in agents, what="the removal")
        await agent.close()
    finally:
        await master.stop(0)


async def test_a_relay_follows_a_master_that_restarts_and_its_agents_register_again(tmp_path):
    master = await start_master(tmp_path / "state", agent_timeout_seconds=30.0)
    port = master.port
    try:
        async with _relay(master.address) as relay:
            agent = FakeAgent(relay.address)
            await agent.connect()
            await master.stop(0)
            await agent.inbox.wait_closed()  # the relay ended the agent's stream
            await agent.close()
            config = MasterConfig(
                host="127.0.0.1",
                port=port,
                state_dir=tmp_path / "state",
                agent_timeout_seconds=30.0,
            )
            master = Master(config)
            await master.start()
            await _until(relay.connected.is_set, what="the relay's new stream")
            registered = await agent.connect(agent_id=agent.agent_id)
            assert registered.agent_id == agent.agent_id
            assert master.core.reg.agents[agent.agent_id].state == ACTIVE
            await agent.close()
    finally:
        await master.stop(0)


async def _refusal(address: str, first: AgentMessage) -> grpc.aio.AioRpcError:
    """What an agent that dials `address` and says `first` is refused with."""
    channel = open_channel(address)
    try:
        call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect()
        # A refusal at once may come before the write is through, which then fails with it.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.write(first)
            await call.read()
        return refused.value
    finally:
        await channel.close()


async def test_a_refusal_reaches_the_agent_behind_a_relay_with_its_status_and_reason():
    master = await start_master(None)
    try:
        async with _relay(master.address) as relay:
            info = agent_info("", "h" * 5000, Resources.parse("cpus:1;mem:64"), {})
            error = await _refusal(
                relay.address, AgentMessage(register=AgentMessage.Register(info=info))
            )
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "hostname" in error.details()
            assert reason_of(error) == Reason.INVALID_REQUEST  # the rich status came through

            beat = AgentMessage(heartbeat=AgentMessage.Heartbeat(timestamp=1.0))
            error = await _refusal(relay.address, beat)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "the first message must be Register" in error.details()
            assert not master.core.reg.agents
            # The relay's stream outlived both refusals: a good agent still gets through.
            agent = FakeAgent(relay.address)
            await agent.connect()
            await agent.close()
    finally:
        await master.stop(0)


async def test_a_relay_not_linked_to_a_master_refuses_agents_with_unavailable():
    relay = Relay(RelayConfig(master="127.0.0.1:1", port=0))  # nothing listens there
    await relay.start()
    try:
        info = agent_info("", "h1", Resources.parse("cpus:1;mem:64"), {})
        error = await _refusal(
            relay.address, AgentMessage(register=AgentMessage.Register(info=info))
        )
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "not linked to the master" in error.details()
    finally:
        await relay.stop()


# --- with credentials --------------------------------------------------------------------

ACLS = """
register_agents: [{principals: [agent-1]}]
relay_agents: [{principals: [relay-1]}]
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("certs")
    assert agora("tls", "init", str(root)).returncode == 0
    for name, kind in [("master", "master"), ("relay-1", "relay"), ("agent-1", "agent"),
                       ("agent-2", "agent")]:  # fmt: skip
        made = agora("tls", "issue", "--ca", str(root), "--name", name, "--for", kind)
        assert made.returncode == 0, made.stderr
    return root


async def _tls_master(certs: Path, acls: Path | None) -> Master:
    master = Master(MasterConfig(port=0, credentials=creds(certs, "master"), acls_path=acls))
    await master.start()
    return master


async def _carry_refusal(master: Master, certs: Path, name: str) -> grpc.aio.AioRpcError:
    """What a caller with `name`'s certificate gets for opening a Carry stream."""
    channel = open_channel(f"localhost:{master.port}", creds(certs, name))
    try:
        call = agent_relay_pb2_grpc.AgentRelayStub(channel).Carry()
        # The refusal may come before the write is through, which then fails with it.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.write(RelayUp())
            await call.read()
        return refused.value
    finally:
        await channel.close()


async def test_with_credentials_only_a_principal_an_acl_rule_names_may_relay(certs, tmp_path):
    acls = tmp_path / "acls.yaml"
    acls.write_text(ACLS)
    master = await _tls_master(certs, acls)
    try:
        error = await _carry_refusal(master, certs, "agent-1")  # an agent, not a relay
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "agent-1 may not relay agents" in error.details()
    finally:
        await master.stop(0)
    # Without an ACL file a master allows everything else, but not relaying: a relay names
    # other principals, so only a rule may allow it.
    master = await _tls_master(certs, None)
    try:
        error = await _carry_refusal(master, certs, "relay-1")
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "relay_agents rule" in error.details()
    finally:
        await master.stop(0)


async def test_the_master_checks_the_agents_own_principal_not_the_relays(certs, tmp_path):
    acls = tmp_path / "acls.yaml"
    acls.write_text(ACLS)
    master = await _tls_master(certs, acls)
    config = RelayConfig(
        master=f"localhost:{master.port}", port=0, credentials=creds(certs, "relay-1")
    )
    relay = Relay(config)
    await relay.start()
    try:
        await asyncio.wait_for(relay.connected.wait(), 10)
        info = agent_info("", "h1", Resources.parse("cpus:1;mem:64"), {})
        register = AgentMessage(register=AgentMessage.Register(info=info))
        for name, allowed in (("agent-1", True), ("agent-2", False)):
            channel = open_channel(f"localhost:{relay.port}", creds(certs, name))
            call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect()
            await call.write(register)
            if allowed:
                reply = await call.read()
                assert reply.WhichOneof("message") == "registered"
                agent_id = reply.registered.agent_id
                assert master.core.reg.agents[agent_id].principal == "agent-1"
                call.cancel()
            else:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call.read()
                assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
                assert "agent-2 may not register agent" in refused.value.details()
            await channel.close()
        assert len(master.core.reg.agents) == 1
    finally:
        await relay.stop()
        await master.stop(0)


def test_a_relay_will_not_listen_beyond_loopback_without_tls():
    done = agora("relay", "--master", "127.0.0.1:5050", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--insecure" in lines[0], done.stderr


async def test_an_agent_flooding_a_relay_is_held_back_and_loses_nothing_and_its_neighbour_stays():
    master = await start_master(None, agent_timeout_seconds=30.0)
    try:
        # Room for one message towards the master: the relay holds its agents back constantly.
        async with _relay(master.address, max_queued_up=1) as relay:
            flooder, neighbour = FakeAgent(relay.address, hostname="a"), FakeAgent(relay.address)
            await flooder.connect()
            await neighbour.connect()
            # Updates of a framework the master does not know: each is acknowledged at once.
            sent = [flooder.status("gone", f"t{i}", common_pb2.TASK_RUNNING) for i in range(300)]
            await _until(lambda: len(flooder.inbox.of("status_update_ack")) >= 300)
            assert [a.uuid for a in flooder.inbox.of("status_update_ack")] == sent  # in order
            agents = master.core.reg.agents
            assert agents[neighbour.agent_id].state == ACTIVE
            assert agents[flooder.agent_id].state == ACTIVE
            assert not neighbour.inbox.closed
            await flooder.close()
            await neighbour.close()
    finally:
        await master.stop(0)


async def _carry_as(
    address: str, principal: str, first: AgentMessage
) -> agent_relay_pb2.RelayDown.Ended:
    """Opens a Carry stream (as a relay would) with one link; returns how the master ended it."""
    channel = open_channel(address)
    try:
        call = agent_relay_pb2_grpc.AgentRelayStub(channel).Carry()
        await call.write(RelayUp(items=[RelayUp.Item(link=1, message=first, principal=principal)]))
        async with asyncio.timeout(10):
            while True:
                down = await call.read()
                for item in down.items:
                    if item.WhichOneof("what") == "ended":
                        call.cancel()
                        return item.ended
    finally:
        await channel.close()


async def test_a_master_that_authenticates_no_one_lets_no_relay_name_a_principal(tmp_path):
    info = agent_info("", "h1", Resources.parse("cpus:1;mem:64"), {})
    register = AgentMessage(register=AgentMessage.Register(info=info))
    master = await start_master(None)
    try:
        ended = await _carry_as(master.address, "agent-1", register)
        assert ended.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
        assert "authenticates no one" in ended.details
        assert not master.core.reg.agents
    finally:
        await master.stop(0)
    # With an ACL file, relaying needs its rule even where nobody is authenticated.
    acls = tmp_path / "acls.yaml"
    acls.write_text("register_agents: [{principals: [ANONYMOUS]}]\n")
    master = await start_master(None, acls_path=acls)
    try:
        channel = open_channel(master.address)
        call = agent_relay_pb2_grpc.AgentRelayStub(channel).Carry()
        # The master decides before reading anything: nothing is written, so no write races
        # the refusal (grpc then reports its own INTERNAL "Internal error from Core").
        with pytest.raises(grpc.aio.AioRpcError):
            await call.read()
        assert await call.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "relay_agents" in await call.details()
        await channel.close()
    finally:
        await master.stop(0)


async def test_a_stopping_master_takes_no_new_agent_from_a_relay():
    master = await start_master(None)
    try:
        async with _relay(master.address) as relay:
            master.core.agents.stopping = True  # as Master.stop sets it, before its grace period
            info = agent_info("", "h1", Resources.parse("cpus:1;mem:64"), {})
            first = AgentMessage(register=AgentMessage.Register(info=info))
            error = await _refusal(relay.address, first)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            assert "stopping" in error.details()
            assert not master.core.reg.agents
    finally:
        master.core.agents.stopping = False
        await master.stop(0)
