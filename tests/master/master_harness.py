"""Raw-gRPC agent and framework clients for the master's tests, and a started master.

The clients speak the wire protocol directly (no SDK, no real agent), so the tests pin down the
master's side of the contracts in notes/contracts.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import grpc

from agora.common import Resources, new_uuid
from agora.common.rpc import insecure_channel
from agora.master import Master, MasterConfig
from agora.v1 import (
    agent_link_pb2,
    agent_link_pb2_grpc,
    common_pb2,
    operator_pb2_grpc,
    scheduler_pb2,
    scheduler_pb2_grpc,
)

AgentMessage = agent_link_pb2.AgentMessage
MasterMessage = agent_link_pb2.MasterMessage
Event = scheduler_pb2.Event

FAST = dict(
    heartbeat_interval_seconds=0.2, agent_timeout_seconds=1.0, allocation_interval_seconds=0.5
)


async def start_master(state_dir: Path | None, **overrides) -> Master:
    config = MasterConfig(host="127.0.0.1", port=0, state_dir=state_dir, **{**FAST, **overrides})
    master = Master(config)
    await master.start()
    return master


class Inbox:
    """Messages received on a stream, awaited by kind with a deadline."""

    def __init__(self, kind_of) -> None:
        self.kind_of = kind_of
        self.items: list = []
        self.changed = asyncio.Condition()
        self.closed = False
        self.error: grpc.aio.AioRpcError | None = None

    async def put(self, item) -> None:
        async with self.changed:
            self.items.append(item)
            self.changed.notify_all()

    async def close(self, error=None) -> None:
        async with self.changed:
            self.closed, self.error = True, error
            self.changed.notify_all()

    def of(self, kind: str) -> list:
        return [getattr(m, kind) for m in self.items if self.kind_of(m) == kind]

    async def expect(
        self, kind: str, predicate=lambda m: True, timeout: float = 10.0, after: int = 0
    ):
        """The first `kind` message (from index `after`) matching predicate, waiting for it."""
        deadline = time.monotonic() + timeout
        async with self.changed:
            while True:
                for item in self.items[after:]:
                    if self.kind_of(item) == kind and predicate(getattr(item, kind)):
                        return getattr(item, kind)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    seen = [self.kind_of(m) for m in self.items]
                    raise AssertionError(f"no {kind} arrived in {timeout} s; got {seen}")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self.changed.wait()

    async def wait_closed(self, timeout: float = 10.0) -> None:
        async with self.changed:
            async with asyncio.timeout(timeout):
                await self.changed.wait_for(lambda: self.closed)


class FakeAgent:
    """Dials AgentLink.Connect like a real agent; heartbeats unless told to go silent."""

    def __init__(
        self,
        address: str,
        resources: str = "cpus:4;mem:4096;ports:[31000-31099]",
        hostname: str = "host-a",
        attributes: dict[str, str] | None = None,
        batches: bool = False,
    ) -> None:
        self.address = address
        # Says it reads MasterMessage.Batch (as the real agent does); a batch's messages are
        # put in the inbox one by one, and `batches_read` counts the batches.
        self.batches = batches
        self.batches_read = 0
        self.messages_read = 0  # stream messages, a batch counting one
        self.resources = Resources.parse(resources)
        self.hostname = hostname
        self.attributes = attributes or {}
        self.agent_id = ""
        self.inbox = Inbox(lambda m: m.WhichOneof("message"))
        self.heartbeating = True
        self._outbox: asyncio.Queue = asyncio.Queue()
        self._channel = None
        self._tasks: list[asyncio.Task] = []

    async def connect(
        self,
        tasks: list[agent_link_pb2.RunningTask] = (),
        agent_id: str | None = None,
        wait: bool = True,
    ):
        if agent_id is not None:
            self.agent_id = agent_id
        self.inbox = Inbox(lambda m: m.WhichOneof("message"))
        self._outbox = asyncio.Queue()
        self._channel = insecure_channel(self.address)
        stub = agent_link_pb2_grpc.AgentLinkStub(self._channel)
        info = agent_info(self.agent_id, self.hostname, self.resources, self.attributes)
        register = AgentMessage.Register(info=info, tasks=list(tasks), accepts_batches=self.batches)
        self.send(AgentMessage(register=register))
        call = stub.Connect(self._requests())
        self._tasks = [
            asyncio.create_task(self._receive(call)),
            asyncio.create_task(self._heartbeat()),
        ]
        if wait:
            registered = await self.inbox.expect("registered")
            self.agent_id = registered.agent_id
            return registered
        return None

    def send(self, message: agent_link_pb2.AgentMessage) -> None:
        self._outbox.put_nowait(message)

    async def _requests(self):
        while True:
            message = await self._outbox.get()
            if message is None:
                return
            yield message

    async def _receive(self, call) -> None:
        error = None
        try:
            async for message in call:
                self.messages_read += 1
                if message.HasField("batch"):
                    self.batches_read += 1
                    for one in message.batch.messages:
                        await self.inbox.put(one)
                else:
                    await self.inbox.put(message)
        except grpc.aio.AioRpcError as e:
            error = e
        except asyncio.CancelledError:
            pass
        await self.inbox.close(error)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            if self.heartbeating:
                self.send(AgentMessage(heartbeat=AgentMessage.Heartbeat(timestamp=time.time())))

    def status(
        self, framework_id: str, task_id: str, state: int, uuid: bytes | None = None, **fields
    ) -> bytes:
        """Sends a reliable status update; returns its uuid."""
        update = status_update(self.agent_id, framework_id, task_id, state, uuid, **fields)
        self.send(AgentMessage(status_update=update))
        return update.status.uuid

    def status_update_message(
        self, framework_id: str, task_id: str, state: int, **fields
    ) -> agent_link_pb2.AgentMessage:
        """A status update to send (in a batch, say), not sent."""
        update = status_update(self.agent_id, framework_id, task_id, state, None, **fields)
        return AgentMessage(status_update=update)

    async def close(self) -> None:
        """Drops the connection (a crashed agent, as the master sees it)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


class FakeFramework:
    """Subscribes over Scheduler.Subscribe and makes unary calls naming its stream."""

    def __init__(
        self,
        address: str,
        name: str = "test-fw",
        role: str = "*",
        failover_timeout: float = 60.0,
        batches: bool = False,
    ) -> None:
        self.address = address
        # Says it reads Event.Batch; a batch's events go in the inbox one by one.
        self.batches = batches
        self.batches_read = 0
        self.info = common_pb2.FrameworkInfo(
            name=name, role=role, failover_timeout_seconds=failover_timeout
        )
        self.framework_id = ""
        self.stream_id = ""
        self.inbox = Inbox(lambda e: e.WhichOneof("event"))
        self._channel = insecure_channel(address)
        self.stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
        self._reader: asyncio.Task | None = None
        self._call = None
        self.used: set[str] = set()  # offers this client accepted

    async def subscribe(self, framework_id: str | None = None, wait: bool = True):
        if framework_id is not None:
            self.info.framework_id = framework_id
        self.inbox = Inbox(lambda e: e.WhichOneof("event"))
        self._call = self.stub.Subscribe(
            scheduler_pb2.SubscribeRequest(framework=self.info, accepts_batches=self.batches)
        )
        self._reader = asyncio.create_task(self._receive(self._call, self.inbox))
        if not wait:
            return None
        subscribed = await self.inbox.expect("subscribed")
        self.framework_id = self.info.framework_id = subscribed.framework_id
        self.stream_id = subscribed.stream_id
        return subscribed

    async def _receive(self, call, inbox: Inbox) -> None:
        error = None
        try:
            async for event in call:
                if event.HasField("batch"):
                    self.batches_read += 1
                    for one in event.batch.events:
                        await inbox.put(one)
                else:
                    await inbox.put(event)
        except grpc.aio.AioRpcError as e:
            error = e
        except asyncio.CancelledError:
            pass
        await inbox.close(error)

    def ids(self) -> dict:
        return dict(framework_id=self.framework_id, stream_id=self.stream_id)

    async def offers(self, count: int = 1, timeout: float = 10.0) -> list[common_pb2.Offer]:
        """Waits until at least `count` live offers arrived (not used or rescinded)."""
        deadline = time.monotonic() + timeout
        while True:
            rescinded = {r.offer_id for r in self.inbox.of("rescind")}
            live = [
                o
                for batch in self.inbox.of("offers")
                for o in batch.offers
                if o.offer_id not in rescinded and o.offer_id not in self.used
            ]
            if len(live) >= count:
                return live
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"only {len(live)} offers after {timeout} s")
            n = len(self.inbox.items)
            with contextlib.suppress(AssertionError):
                await self.inbox.expect("offers", timeout=min(remaining, 1.0), after=n)

    async def accept(self, offer_ids, tasks, refuse_seconds: float | None = None):
        filters = common_pb2.Filters()
        if refuse_seconds is not None:
            filters.refuse_seconds = refuse_seconds
        response = await self.stub.Accept(
            scheduler_pb2.AcceptRequest(
                **self.ids(),
                offer_ids=list(offer_ids),
                filters=filters,
                operations=[
                    scheduler_pb2.Operation(
                        launch=scheduler_pb2.Operation.Launch(task_infos=list(tasks))
                    )
                ],
            )
        )
        self.used.update(offer_ids)
        return response

    async def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        await self._channel.close()


def agent_info(
    agent_id: str, hostname: str, resources: Resources, attributes: dict[str, str]
) -> common_pb2.AgentInfo:
    """What an agent registers with (its address: the hostname, port 5051)."""
    return common_pb2.AgentInfo(
        agent_id=agent_id,
        hostname=hostname,
        address=f"{hostname}:5051",
        resources=resources.to_proto(),
        attributes=[common_pb2.Attribute(name=k, text=v) for k, v in attributes.items()],
    )


def status_update(
    agent_id: str, framework_id: str, task_id: str, state: int, uuid: bytes | None, **fields
) -> agent_link_pb2.AgentMessage.StatusUpdate:
    """A reliable status update as an agent sends it (a new uuid unless given)."""
    status = common_pb2.TaskStatus(
        task_id=task_id,
        state=state,
        uuid=uuid or new_uuid(),
        agent_id=agent_id,
        framework_id=framework_id,
        source=common_pb2.TaskStatus.SOURCE_AGENT,
        timestamp=time.time(),
        **fields,
    )
    return AgentMessage.StatusUpdate(framework_id=framework_id, status=status)


def task(
    task_id: str, resources: str = "cpus:1;mem:128", shell: str = "sleep 30", **fields
) -> common_pb2.TaskInfo:
    return common_pb2.TaskInfo(
        task_id=task_id,
        name=task_id,
        resources=Resources.parse(resources).to_proto(),
        command=common_pb2.CommandInfo(shell=shell),
        **fields,
    )


def operator(address: str):
    channel = insecure_channel(address)
    return channel, operator_pb2_grpc.OperatorStub(channel)


async def register_held(address: str, credentials, agent_id: str = "", hostname: str = "host-1"):
    """Registers over AgentLink with `credentials` and keeps the stream open (the agent stays
    connected until `call.cancel()`): (channel, call, Registered message) or, refused,
    (None, None, the error)."""
    from agora.common.rpc import open_channel

    channel = open_channel(address, credentials)
    info = common_pb2.AgentInfo(
        agent_id=agent_id,
        hostname=hostname,
        resources=[common_pb2.Resource(name="cpus", type=common_pb2.Resource.SCALAR, scalar=1)],
    )
    hold = asyncio.Event()

    async def messages():
        yield AgentMessage(register=AgentMessage.Register(info=info))
        await hold.wait()

    call = agent_link_pb2_grpc.AgentLinkStub(channel).Connect(messages())
    try:
        return channel, call, (await call.read()).registered
    except grpc.aio.AioRpcError as e:
        await channel.close()
        return None, None, e
