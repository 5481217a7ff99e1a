"""A small fake master for the agent's tests: a real grpc.aio AgentLink server on loopback.

It records every Register and StatusUpdate, acknowledges updates unless told not to, and lets
a test push any MasterMessage (RunTask, KillTask, Shutdown...) down the current stream. Beside
it, the task helpers the agent's tests share.
"""

from __future__ import annotations

import asyncio
import os

import grpc

from agora.v1 import agent_link_pb2, agent_link_pb2_grpc, common_pb2

MasterMessage = agent_link_pb2.MasterMessage


class FakeMaster(agent_link_pb2_grpc.AgentLinkServicer):
    def __init__(self, heartbeat: float = 0.5, auto_ack: bool = True) -> None:
        self.heartbeat = heartbeat
        self.auto_ack = auto_ack
        self.registrations: list[agent_link_pb2.AgentMessage.Register] = []
        self.updates: list[common_pb2.TaskStatus] = []
        self.heartbeats = 0
        self.removed: set[str] = set()  # agent ids answered with Shutdown
        self._outbox: asyncio.Queue | None = None
        self._ids = 0
        self._server: grpc.aio.Server | None = None
        self.address = ""

    async def start(self) -> str:
        self._server = grpc.aio.server()
        agent_link_pb2_grpc.add_AgentLinkServicer_to_server(self, self._server)
        port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        self.address = f"127.0.0.1:{port}"
        return self.address

    async def stop(self) -> None:
        if self._outbox is not None:
            self._outbox.put_nowait(None)
        if self._server is not None:
            await self._server.stop(0)

    @property
    def connected(self) -> bool:
        return self._outbox is not None

    async def Connect(self, request_iterator, context):
        first = await context.read()
        if first is grpc.aio.EOF or first.WhichOneof("message") != "register":
            return
        register = first.register
        self.registrations.append(register)
        agent_id = register.info.agent_id
        if agent_id in self.removed:
            await context.write(
                MasterMessage(
                    shutdown=MasterMessage.Shutdown(
                        reason="agent was removed after missing heartbeats"
                    )
                )
            )
            return
        if not agent_id:
            self._ids += 1
            agent_id = f"agent-{self._ids}"
        outbox: asyncio.Queue = asyncio.Queue()
        await context.write(
            MasterMessage(
                registered=MasterMessage.Registered(
                    agent_id=agent_id,
                    master_id="fake-master",
                    heartbeat_interval_seconds=self.heartbeat,
                )
            )
        )
        self._outbox = outbox

        async def read() -> None:
            while True:
                message = await context.read()
                if message is grpc.aio.EOF:
                    break
                kind = message.WhichOneof("message")
                if kind == "heartbeat":
                    self.heartbeats += 1
                elif kind == "status_update":
                    status = message.status_update.status
                    self.updates.append(status)
                    if self.auto_ack:
                        outbox.put_nowait(
                            self.ack_message(message.status_update.framework_id, status)
                        )
            outbox.put_nowait(None)

        async def beat() -> None:
            while True:
                await asyncio.sleep(self.heartbeat)
                outbox.put_nowait(MasterMessage(heartbeat=MasterMessage.Heartbeat()))

        reader = asyncio.create_task(read())
        beater = asyncio.create_task(beat())
        try:
            while (message := await outbox.get()) is not None:
                await context.write(message)
        finally:
            reader.cancel()
            beater.cancel()
            if self._outbox is outbox:
                self._outbox = None

    # what a test does -----------------------------------------------------------------------

    def send(self, message: agent_link_pb2.MasterMessage) -> None:
        assert self._outbox is not None, "no agent connected"
        self._outbox.put_nowait(message)

    def disconnect(self) -> None:
        """Ends the current stream, as a master restart would."""
        if self._outbox is not None:
            self._outbox.put_nowait(None)

    def run_task(
        self, framework_id: str, task: common_pb2.TaskInfo, framework_user: str = ""
    ) -> None:
        framework = common_pb2.FrameworkInfo(framework_id=framework_id, user=framework_user)
        self.send(
            MasterMessage(
                run_task=MasterMessage.RunTask(
                    framework_id=framework_id, task=task, framework=framework
                )
            )
        )

    def kill_task(self, framework_id: str, task_id: str, grace: float = 0.0) -> None:
        self.send(
            MasterMessage(
                kill_task=MasterMessage.KillTask(
                    framework_id=framework_id, task_id=task_id, grace_period_seconds=grace
                )
            )
        )

    @staticmethod
    def ack_message(framework_id: str, status: common_pb2.TaskStatus) -> MasterMessage:
        return MasterMessage(
            status_update_ack=MasterMessage.StatusUpdateAck(
                framework_id=framework_id, task_id=status.task_id, uuid=status.uuid
            )
        )

    def ack(self, status: common_pb2.TaskStatus) -> None:
        self.send(self.ack_message(status.framework_id, status))

    def states(self, task_id: str) -> list[int]:
        return [u.state for u in self.updates if u.task_id == task_id]

    def terminal(self, task_id: str) -> common_pb2.TaskStatus | None:
        for u in self.updates:
            if u.task_id == task_id and u.state in TERMINAL:
                return u
        return None


TERMINAL = {
    common_pb2.TASK_FINISHED,
    common_pb2.TASK_FAILED,
    common_pb2.TASK_KILLED,
    common_pb2.TASK_ERROR,
    common_pb2.TASK_LOST,
}


def shell_task(
    task_id: str,
    shell: str,
    ports: list[tuple[int, int]] | None = None,
    grace: float = 0.0,
    env: dict[str, str] | None = None,
) -> common_pb2.TaskInfo:
    resources = [
        common_pb2.Resource(name="cpus", type=common_pb2.Resource.SCALAR, scalar=0.1),
        common_pb2.Resource(name="mem", type=common_pb2.Resource.SCALAR, scalar=32),
    ]
    if ports:
        resources.append(
            common_pb2.Resource(
                name="ports",
                type=common_pb2.Resource.RANGES,
                ranges=[common_pb2.Range(begin=b, end=e) for b, e in ports],
            )
        )
    return common_pb2.TaskInfo(
        task_id=task_id,
        name=task_id,
        resources=resources,
        command=common_pb2.CommandInfo(shell=shell, environment=env or {}),
        kill_grace_period_seconds=grace,
    )


def cgroups_available() -> bool:
    """Whether this host lets an agent (this process's user, in its cgroups) make task cgroups;
    the probe's own directory is removed after."""
    from agora.agent.isolation import Isolator

    probe = Isolator(owner=f"probe-{os.getpid()}")
    try:
        return probe.enabled
    finally:
        probe.close()
