"""An in-memory SchedulerTransport for unit tests of framework logic (like httpx.MockTransport).

The test plays the master: it waits for the driver to subscribe, pushes events into the stream,
breaks it, and reads the unary calls the driver made::

    transport = MemoryTransport()
    driver = Driver(MyFramework(), transport, framework_info("test"))
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"))
    method, request = await transport.next_call()

Every call succeeds with an empty response unless `handler` (method, request) -> response
raises SchedulerError or `fail_next()` queued a failure. Waits use timeouts, never sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence

import grpc
from google.protobuf.message import Message

from agora.common import Resources
from agora.frameworks.sdk.errors import SchedulerError
from agora.frameworks.sdk.transport import METHODS, EventStream, SchedulerTransport
from agora.v1 import common_pb2, scheduler_pb2

Handler = Callable[[str, Message], Message | None]

_END = object()


class MemoryStream(EventStream):
    """One subscription's stream, fed by the test."""

    def __init__(self, request: scheduler_pb2.SubscribeRequest) -> None:
        self.request = request
        self.cancelled = asyncio.Event()
        self._queue: asyncio.Queue = asyncio.Queue()

    def send(self, *events: scheduler_pb2.Event) -> None:
        for event in events:
            self._queue.put_nowait(event)

    def end(self) -> None:
        """The master closes the stream normally."""
        self._queue.put_nowait(_END)

    def fail(self, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, message: str = "") -> None:
        """The stream breaks with a gRPC status (UNAVAILABLE: the connection is gone)."""
        self._queue.put_nowait(SchedulerError(code, message or "connection lost"))

    async def _events(self) -> AsyncIterator[scheduler_pb2.Event]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, SchedulerError):
                raise item
            yield item

    def __aiter__(self) -> AsyncIterator[scheduler_pb2.Event]:
        return self._events()

    def cancel(self) -> None:
        self.cancelled.set()


class MemoryTransport(SchedulerTransport):
    """Records subscriptions and calls; answers calls with `handler` or empty responses."""

    def __init__(self, handler: Handler | None = None, timeout: float = 10.0) -> None:
        self.handler = handler
        self.timeout = timeout
        self.streams: list[MemoryStream] = []
        self.calls: list[tuple[str, Message]] = []
        self.resets = 0
        self.closed = False
        self._new_streams: asyncio.Queue[MemoryStream] = asyncio.Queue()
        self._new_calls: asyncio.Queue[tuple[str, Message]] = asyncio.Queue()
        self._failures: list[tuple[str, SchedulerError]] = []

    def subscribe(self, request: scheduler_pb2.SubscribeRequest) -> EventStream:
        stream = MemoryStream(request)
        self.streams.append(stream)
        self._new_streams.put_nowait(stream)
        return stream

    async def call(self, method: str, request: Message) -> Message:
        if method not in METHODS:
            raise ValueError(f"unknown Scheduler method {method!r}")
        self.calls.append((method, request))
        self._new_calls.put_nowait((method, request))
        for i, (name, error) in enumerate(self._failures):
            if name == method:
                del self._failures[i]
                raise error
        response = self.handler(method, request) if self.handler else None
        return response or getattr(scheduler_pb2, f"{method}Response")()

    def fail_next(
        self, method: str, code: grpc.StatusCode, message: str, reason: str | None = None
    ) -> None:
        """The next `method` call fails with this status (and the master's `reason`)."""
        self._failures.append((method, SchedulerError(code, message, reason)))

    async def reset(self) -> None:
        self.resets += 1

    async def close(self) -> None:
        self.closed = True

    async def next_stream(self) -> MemoryStream:
        """The next subscription the driver opens."""
        return await asyncio.wait_for(self._new_streams.get(), self.timeout)

    async def next_call(self, method: str | None = None) -> tuple[str, Message]:
        """The next unary call (of `method`, skipping others when given)."""
        async with asyncio.timeout(self.timeout):
            while True:
                name, request = await self._new_calls.get()
                if method is None or name == method:
                    return name, request

    def calls_of(self, method: str) -> list[Message]:
        return [request for name, request in self.calls if name == method]


# --- event builders: terse master events for tests ----------------------------------------


def subscribed(
    framework_id: str, stream_id: str = "stream-1", heartbeat_interval: float = 15.0
) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(
        subscribed=scheduler_pb2.Event.Subscribed(
            framework_id=framework_id,
            stream_id=stream_id,
            heartbeat_interval_seconds=heartbeat_interval,
            master_id="master-test",
        )
    )


def make_offer(
    offer_id: str, agent_id: str, resources: str | Resources, framework_id: str = ""
) -> common_pb2.Offer:
    if isinstance(resources, str):
        resources = Resources.parse(resources)
    return common_pb2.Offer(
        offer_id=offer_id,
        agent_id=agent_id,
        framework_id=framework_id,
        hostname=f"{agent_id}.local",
        resources=resources.to_proto(),
    )


def offers_event(*offers: common_pb2.Offer | Sequence[common_pb2.Offer]) -> scheduler_pb2.Event:
    flat: list[common_pb2.Offer] = []
    for item in offers:
        flat.extend([item] if isinstance(item, common_pb2.Offer) else item)
    return scheduler_pb2.Event(offers=scheduler_pb2.Event.Offers(offers=flat))


def update_event(
    task_id: str,
    state: common_pb2.TaskState,
    *,
    uuid: bytes = b"",
    agent_id: str = "agent-1",
    message: str = "",
) -> scheduler_pb2.Event:
    status = common_pb2.TaskStatus(
        task_id=task_id,
        state=state,
        uuid=uuid,
        agent_id=agent_id,
        message=message,
        source=common_pb2.TaskStatus.SOURCE_AGENT if uuid else common_pb2.TaskStatus.SOURCE_MASTER,
    )
    return scheduler_pb2.Event(update=scheduler_pb2.Event.Update(status=status))


def rescind_event(offer_id: str) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(rescind=scheduler_pb2.Event.Rescind(offer_id=offer_id))


def failure_event(agent_id: str) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(failure=scheduler_pb2.Event.Failure(agent_id=agent_id))


def error_event(message: str) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(error=scheduler_pb2.Event.Error(message=message))


def heartbeat_event() -> scheduler_pb2.Event:
    return scheduler_pb2.Event(heartbeat=scheduler_pb2.Event.Heartbeat())
