"""A Scheduler transport that stamps each event as it is read off the stream.

The driver hands events to the framework one at a time; an event queued behind a slow callback
would look late. Timing at the read, in the framework's process, is the earliest point a
framework can know of an event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from agora.common.credentials import Credentials
from agora.experiments.load.recorder import Recorder
from agora.frameworks.sdk import EventStream, GrpcSchedulerTransport
from agora.v1 import scheduler_pb2


class _TimedStream(EventStream):
    def __init__(self, inner: EventStream, recorder: Recorder, name: str) -> None:
        self._inner = inner
        self._recorder = recorder
        self._name = name

    async def _events(self) -> AsyncIterator[scheduler_pb2.Event]:
        async for event in self._inner:
            kind = event.WhichOneof("event")
            if kind == "offers":
                self._recorder.offers(self._name, event.offers.offers)
            elif kind == "update":
                self._recorder.update(self._name, event.update.status)
            elif kind == "subscribed":
                self._recorder.subscribed(self._name)
            yield event

    def __aiter__(self) -> AsyncIterator[scheduler_pb2.Event]:
        return self._events()

    def cancel(self) -> None:
        self._inner.cancel()


class TimedTransport(GrpcSchedulerTransport):
    """GrpcSchedulerTransport whose event streams report to `recorder` as events arrive."""

    def __init__(
        self, address: str, recorder: Recorder, name: str, credentials: Credentials | None = None
    ) -> None:
        super().__init__(address, credentials=credentials)
        self.recorder = recorder
        self.name = name

    def subscribe(self, request: scheduler_pb2.SubscribeRequest) -> EventStream:
        return _TimedStream(super().subscribe(request), self.recorder, self.name)
