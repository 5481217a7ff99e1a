"""The AgentLink protocol checks, run against the real agent and the emulated one alike.

Both face the same fake master (tests/agent_fake_master.py) over real gRPC on loopback: the real
agent runs real processes, the emulated one only pretends to for the duration the task
declares (`sleep N`). Whatever the master can observe must be the same.
"""

from __future__ import annotations

import grpc
import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually_async

from agora.common import Resources, attributes_from_proto
from agora.common.rpc import CHANNEL_OPTIONS
from agora.experiments.emulated import AgentSpec, EmulatedAgent, constant
from agora.v1 import agent_link_pb2_grpc, common_pb2

FW = "fw-1"
S = common_pb2
RESOURCES = "cpus:2;mem:1024;disk:2048;ports:[31000-31009]"
ATTRIBUTES = {"rack": "r1", "zone": "z1"}


class RealKind:
    """The agent daemon, on its own work dir."""

    def __init__(self, master: FakeMaster, tmp_path) -> None:
        self.master, self.tmp_path, self.running = master, tmp_path, []

    async def start(self, update_backoff: float = 0.2, update_backoff_max: float = 1.0):
        from agora.agent import AgentConfig, AgentDaemon

        daemon = AgentDaemon(
            AgentConfig(
                master=self.master.address,
                port=0,
                work_dir=self.tmp_path / "agent",
                resources=Resources.parse(RESOURCES),
                attributes=ATTRIBUTES,
                hostname="host-a",
                reconnect_backoff_initial_seconds=0.05,
                reconnect_backoff_max_seconds=0.5,
                update_backoff_initial_seconds=update_backoff,
                update_backoff_max_seconds=update_backoff_max,
            )
        )
        await daemon.start()
        self.running.append(daemon)
        return daemon

    async def stop_all(self) -> None:
        for daemon in self.running:
            await daemon.stop(kill_tasks=True)


class EmulatedKind:
    """One emulated agent on its own channel."""

    def __init__(self, master: FakeMaster, tmp_path) -> None:
        self.master, self.running, self.channels = master, [], []

    async def start(self, update_backoff: float = 0.2, update_backoff_max: float = 1.0):
        channel = grpc.aio.insecure_channel(self.master.address, options=CHANNEL_OPTIONS)
        self.channels.append(channel)
        agent = EmulatedAgent(
            AgentSpec(
                resources=Resources.parse(RESOURCES),
                attributes=ATTRIBUTES,
                hostname="host-a",
                reconnect_backoff_initial=0.05,
                reconnect_backoff_max=0.5,
                update_backoff_initial=update_backoff,
                update_backoff_max=update_backoff_max,
            ),
            channel,
            default_duration=constant(0.1),
        )
        agent.start()
        self.running.append(agent)
        return agent

    async def stop_all(self) -> None:
        for agent in self.running:
            await agent.stop()
        for channel in self.channels:
            await channel.close()


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3)
    await m.start()
    yield m
    await m.stop()


@pytest.fixture(params=["real", "emulated"])
async def kind(request, master, tmp_path):
    helper = (RealKind if request.param == "real" else EmulatedKind)(master, tmp_path)
    yield helper
    await helper.stop_all()


async def registered(master: FakeMaster, count: int = 1):
    await eventually_async(
        lambda: len(master.registrations) >= count and master.connected,
        timeout=20,
        message=f"{count} registration(s)",
    )
    return master.registrations[count - 1]


async def terminal(master: FakeMaster, task_id: str) -> S.TaskStatus:
    return await eventually_async(
        lambda: master.terminal(task_id), timeout=30, message=f"terminal update of {task_id}"
    )


async def test_registers_with_resources_and_attributes_then_heartbeats(master, kind):
    await kind.start()
    reg = await registered(master)
    assert reg.info.agent_id == ""
    assert Resources.from_proto(reg.info.resources) == Resources.parse(RESOURCES)
    assert attributes_from_proto(reg.info.attributes) == ATTRIBUTES
    assert reg.info.hostname == "host-a"
    assert list(reg.tasks) == []
    await eventually_async(lambda: master.heartbeats >= 2, message="heartbeats")


async def test_run_reports_starting_running_finished_in_order(master, kind):
    await kind.start()
    await registered(master)
    master.run_task(FW, shell_task("t1", "sleep 0.2"))
    final = await terminal(master, "t1")
    assert master.states("t1") == [S.TASK_STARTING, S.TASK_RUNNING, S.TASK_FINISHED]
    assert final.exit_code == 0 and final.message == "exited with code 0"
    updates = [u for u in master.updates if u.task_id == "t1"]
    assert len({u.uuid for u in updates}) == 3 and all(len(u.uuid) == 16 for u in updates)
    assert all(
        u.agent_id == "agent-1"
        and u.framework_id == FW
        and u.source == S.TaskStatus.SOURCE_AGENT
        and u.timestamp > 0
        for u in updates
    )


async def test_unacknowledged_update_is_resent_and_an_ack_stops_it(master, kind):
    master.auto_ack = False
    await kind.start()
    await registered(master)
    master.run_task(FW, shell_task("r", "sleep 0.1"))
    # STARTING is resent until acknowledged; nothing after it is sent meanwhile.
    await eventually_async(
        lambda: master.states("r").count(S.TASK_STARTING) >= 3, message="STARTING resent"
    )
    assert set(master.states("r")) == {S.TASK_STARTING}
    starting = [u for u in master.updates if u.task_id == "r"]
    assert len({u.uuid for u in starting}) == 1
    master.ack(starting[0])
    running = await eventually_async(
        lambda: next((u for u in master.updates if u.state == S.TASK_RUNNING), None)
    )
    master.ack(running)
    finished = await eventually_async(
        lambda: next((u for u in master.updates if u.state == S.TASK_FINISHED), None)
    )
    master.ack(finished)
    # Once all is acknowledged nothing more is sent: wait for resends that would have come
    # (several backoff periods, counted in heartbeats) rather than for the clock.
    seen, beats = len(master.updates), master.heartbeats
    await eventually_async(lambda: master.heartbeats >= beats + 8, message="heartbeats")
    assert len(master.updates) == seen


async def test_kill_ends_a_running_task_killed(master, kind):
    await kind.start()
    await registered(master)
    master.run_task(FW, shell_task("k", "sleep 100", grace=0.5))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("k"))
    master.kill_task(FW, "k")
    final = await terminal(master, "k")
    assert final.state == S.TASK_KILLED and final.uuid
    assert master.states("k") == [S.TASK_STARTING, S.TASK_RUNNING, S.TASK_KILLED]


async def test_kill_of_an_unknown_task_reports_it_lost(master, kind):
    await kind.start()
    await registered(master)
    master.kill_task(FW, "ghost")
    final = await terminal(master, "ghost")
    assert final.state == S.TASK_LOST and final.uuid


async def test_reregisters_with_its_id_and_tasks_and_resends_at_once(master, kind):
    master.auto_ack = False
    await kind.start(update_backoff=30.0, update_backoff_max=30.0)
    await registered(master)
    master.run_task(FW, shell_task("x", "sleep 100"))
    await eventually_async(lambda: master.states("x") == [S.TASK_STARTING])
    master.disconnect()
    reg = await registered(master, 2)
    assert reg.info.agent_id == "agent-1"
    assert [(t.task.task_id, t.framework_id) for t in reg.tasks] == [("x", FW)]
    # With a 30 s backoff only the re-registration explains a second STARTING.
    await eventually_async(lambda: master.states("x") == [S.TASK_STARTING] * 2)


async def test_removed_agent_drops_its_tasks_and_registers_afresh(master, kind):
    await kind.start()
    await registered(master)
    master.run_task(FW, shell_task("doomed", "sleep 100"))
    await eventually_async(lambda: S.TASK_RUNNING in master.states("doomed"))
    master.removed.add("agent-1")
    master.disconnect()
    reg = await registered(master, 3)
    assert master.registrations[1].info.agent_id == "agent-1"
    assert reg.info.agent_id == "" and list(reg.tasks) == []
    assert S.TASK_KILLED not in master.states("doomed")


class SilentMaster(agent_link_pb2_grpc.AgentLinkServicer):
    """Takes the Register and then says nothing, like a wedged master."""

    def __init__(self) -> None:
        self.connects = 0

    async def Connect(self, request_iterator, context):
        self.connects += 1
        async for _ in request_iterator:
            pass


async def test_emulated_agent_dials_again_when_the_master_falls_silent():
    servicer = SilentMaster()
    server = grpc.aio.server()
    agent_link_pb2_grpc.add_AgentLinkServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=CHANNEL_OPTIONS)
    agent = EmulatedAgent(
        AgentSpec(
            resources=Resources.parse(RESOURCES),
            heartbeat_interval=0.1,
            reconnect_backoff_initial=0.05,
        ),
        channel,
        default_duration=constant(0.1),
    )
    runner = agent.start()
    try:
        # Each silent stream is dropped after the 3 s floor and dialled again; the agent's
        # task lives on (a cancelled call must not end it).
        await eventually_async(
            lambda: servicer.connects >= 2, timeout=30, message="a second Connect"
        )
        assert not runner.done()
    finally:
        await agent.stop()
        await channel.close()
        await server.stop(0)
