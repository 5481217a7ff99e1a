"""The driver's seam to the master: a small interface, and its real gRPC implementation.

The driver never touches grpc directly. It opens an event stream with `subscribe()` and makes
unary calls with `call(method, request)`; failures come back as `SchedulerError` with a gRPC
status code. Unit tests swap in `agora.frameworks.sdk.testing.MemoryTransport` (like httpx's
MockTransport); `GrpcSchedulerTransport` talks to a real master.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator

import grpc
from google.protobuf.message import Message

from agora.common.credentials import Credentials, aio_channel
from agora.common.leader import LeaderTracker, superseded
from agora.common.rpc import REDIAL_OPTIONS
from agora.frameworks.sdk.call_stream import STREAM_CALL_BYTES, STREAMED, CallStream
from agora.frameworks.sdk.errors import TRANSIENT_CODES, OfferConflict, SchedulerError
from agora.v1 import scheduler_pb2, scheduler_pb2_grpc

# The errors are also importable from here, where they were defined before errors.py.
__all__ = [
    "METHODS",
    "TRANSIENT_CODES",
    "EventStream",
    "GrpcSchedulerTransport",
    "OfferConflict",
    "SchedulerError",
    "SchedulerTransport",
]

# The unary methods of the Scheduler service, by their gRPC names.
METHODS = frozenset(
    {
        "Accept",
        "Decline",
        "Revive",
        "Suppress",
        "Demand",
        "Kill",
        "Acknowledge",
        "Reconcile",
        "Teardown",
        "GetClusterView",
        "Hold",
        "ReleaseHold",
    }
)

# Our own reconnect backoff decides when to dial again (common/rpc.REDIAL_OPTIONS).
_CHANNEL_OPTIONS = REDIAL_OPTIONS


class EventStream(abc.ABC):
    """The events of one subscription. Iterating raises SchedulerError if the stream breaks and
    stops when the master ends it."""

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[scheduler_pb2.Event]: ...

    @abc.abstractmethod
    def cancel(self) -> None:
        """Ends the subscription from our side; safe to call more than once."""


class SchedulerTransport(abc.ABC):
    """How a driver reaches the Scheduler service."""

    @abc.abstractmethod
    def subscribe(self, request: scheduler_pb2.SubscribeRequest) -> EventStream: ...

    @abc.abstractmethod
    async def call(self, method: str, request: Message) -> Message:
        """Makes the unary call `method` (one of METHODS); raises SchedulerError on failure."""

    async def start(self) -> None:
        """Called once before the first subscribe (the real transport watches ZooKeeper)."""
        return None

    def retry_delay(self) -> float | None:
        """How soon to reconnect after the last failure, when the transport knows better than
        the driver's backoff (a standby named the leader: now); None: back off as usual."""
        return None

    @property
    def leader_changed(self) -> asyncio.Event | None:
        """Set when a new leader is known (zk://): a reconnect waiting on backoff goes now."""
        return None

    async def reset(self) -> None:
        """Drops the connection so that the next subscribe dials afresh (before a reconnect)."""
        return None

    async def close(self) -> None:
        """Releases the connection for good."""
        return None


class _GrpcEventStream(EventStream):
    def __init__(self, call: grpc.aio.UnaryStreamCall, transport: GrpcSchedulerTransport) -> None:
        self._call = call
        self._transport = transport
        self._address = transport.address  # the master this stream reaches

    async def _events(self) -> AsyncIterator[scheduler_pb2.Event]:
        tracker = self._transport.tracker
        epoch = 0  # the epoch of the leader this stream reaches (Subscribed says)
        deposed: asyncio.Task | None = None  # cuts the stream once ZooKeeper names a successor
        try:
            async for event in self._call:
                # The driver takes events one at a time.
                for one in event.batch.events if event.HasField("batch") else (event,):
                    if one.HasField("subscribed"):
                        epoch = one.subscribed.epoch
                        deposed = tracker.on_superseded(epoch, self._call.cancel)
                    if tracker.superseded(epoch):  # a deposed leader's word: drop it
                        raise self._superseded(epoch)
                    yield one
        except grpc.aio.AioRpcError as e:
            if tracker.superseded(epoch):
                raise self._superseded(epoch) from None
            self._transport.learn(e)
            raise SchedulerError.from_rpc(e) from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if tracker.superseded(epoch) and not (task and task.cancelling()):
                raise self._superseded(epoch) from None
            raise
        finally:
            if deposed is not None:
                deposed.cancel()

    def _superseded(self, epoch: int) -> SchedulerError:
        self._call.cancel()
        return SchedulerError(grpc.StatusCode.UNAVAILABLE, superseded(self._address, epoch))

    def __aiter__(self) -> AsyncIterator[scheduler_pb2.Event]:
        return self._events()

    def cancel(self) -> None:
        self._call.cancel()


class _FailedStream(EventStream):
    def __init__(self, error: SchedulerError) -> None:
        self._error = error

    async def _events(self) -> AsyncIterator[scheduler_pb2.Event]:
        raise self._error
        yield  # an async generator that raises at once

    def __aiter__(self) -> AsyncIterator[scheduler_pb2.Event]:
        return self._events()

    def cancel(self) -> None:
        pass


class GrpcSchedulerTransport(SchedulerTransport):
    """The real transport: a gRPC channel to the leading master's Scheduler service.

    `master` is any --master form: one address, a list h1:5050,h2:5050, or zk://...; a standby's
    refusal names the leader and the next dial goes there (common/leader.py)."""

    def __init__(
        self,
        master: str | LeaderTracker,
        call_timeout: float = 15.0,
        credentials: Credentials | None = None,
    ) -> None:
        self.tracker = master if isinstance(master, LeaderTracker) else LeaderTracker(master)
        self._retry_delay: float | None = None
        self._dialled = ""
        self._dialled_version = 0
        # None: AGORA_TLS_CA/CERT/KEY from the environment (plaintext when unset).
        self.credentials = Credentials.from_env() if credentials is None else credentials
        # A bound on each unary call, so a hung master cannot hang a framework's callback.
        self.call_timeout = call_timeout
        self._channel: grpc.aio.Channel | None = None
        self._stub: scheduler_pb2_grpc.SchedulerStub | None = None
        # Accept, Acknowledge, ... go on one Calls stream (call_stream.py); False once a master
        # of an earlier version answered that it does not know it.
        self._calls: CallStream | None = None
        self.streams_calls = True

    @property
    def address(self) -> str:
        """The master dialled (the leader, as far as the transport knows)."""
        return self.tracker.current() or str(self.tracker)

    def _get_stub(self, resubscribing: bool = False) -> scheduler_pb2_grpc.SchedulerStub:
        """The stub for the leader, dialled anew when it changed, or on a new subscription once
        the certificate was renewed (the calls under way keep their connection meanwhile)."""
        address = self.tracker.current()
        if not address:
            raise SchedulerError(
                grpc.StatusCode.UNAVAILABLE, f"no master of {self.tracker} is leading yet"
            )
        renewed = resubscribing and self.credentials.version != self._dialled_version
        if self._stub is None or address != self._dialled or renewed:
            if self._channel is not None:
                asyncio.ensure_future(self._channel.close())
            self._dialled, self._dialled_version = address, self.credentials.version
            self.streams_calls = True  # a new master may know Calls
            self._channel = aio_channel(address, self.credentials, _CHANNEL_OPTIONS)
            self._stub = scheduler_pb2_grpc.SchedulerStub(self._channel)
        return self._stub

    def learn(self, error: grpc.aio.AioRpcError) -> None:
        """Where the leader is, from a failed call or stream (a standby names it)."""
        self._retry_delay = self.tracker.on_error(error)

    def retry_delay(self) -> float | None:
        delay, self._retry_delay = self._retry_delay, None
        return delay

    @property
    def leader_changed(self) -> asyncio.Event:
        return self.tracker.changed

    async def start(self) -> None:
        await self.tracker.start()

    def subscribe(self, request: scheduler_pb2.SubscribeRequest) -> EventStream:
        self.tracker.changed.clear()
        try:
            stub = self._get_stub(resubscribing=True)
        except SchedulerError as e:
            return _FailedStream(e)  # no leader known yet: fails like a broken stream
        # This stream reads Event.Batch (above): under load the master sends fewer messages.
        wire = scheduler_pb2.SubscribeRequest()
        wire.CopyFrom(request)
        wire.accepts_batches = True
        return _GrpcEventStream(stub.Subscribe(wire), self)

    async def call(self, method: str, request: Message) -> Message:
        if method not in METHODS:
            raise ValueError(f"unknown Scheduler method {method!r}")
        stub = self._get_stub()
        # A call too big to share a stream message goes alone, as a unary call.
        if method in STREAMED and self.streams_calls and request.ByteSize() < STREAM_CALL_BYTES:
            stream = self._calls
            if stream is None or stream.ended is not None or stream.stub is not stub:
                if stream is not None and stream.ended is None:
                    asyncio.ensure_future(stream.close())  # its channel is gone
                stream = self._calls = CallStream(stub, self.learn)
            try:
                return await stream.call(method, request, self.call_timeout)
            except SchedulerError as e:
                if e.code != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                if stream.ended is not None:
                    # A master of an earlier version: unary calls until the next master.
                    self.streams_calls = False
                # Else this master takes the stream but not this call: it goes unary.
        rpc = getattr(stub, method)
        try:
            return await rpc(request, timeout=self.call_timeout)
        except grpc.aio.AioRpcError as e:
            self.learn(e)
            raise SchedulerError.from_rpc(e) from None

    async def reset(self) -> None:
        calls, self._calls = self._calls, None
        if calls is not None:
            await calls.close()
        channel, self._channel, self._stub = self._channel, None, None
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        await self.reset()
        await self.tracker.close()
