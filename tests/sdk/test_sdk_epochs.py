"""The SDK's side of the fence (issue 38): once ZooKeeper names a leader elected after the one a
subscription reaches, nothing more is taken from that stream; it ends UNAVAILABLE, and the
driver subscribes again to the new leader."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agora.common.leader import LeaderTracker
from agora.frameworks.sdk.errors import SchedulerError
from agora.frameworks.sdk.transport import GrpcSchedulerTransport, _GrpcEventStream
from agora.v1 import scheduler_pb2

Event = scheduler_pb2.Event


class FakeCall:
    """A Subscribe call whose events the test sends one by one."""

    def __init__(self) -> None:
        self.events: asyncio.Queue = asyncio.Queue()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.events.put_nowait(None)

    def __aiter__(self):
        return self

    async def __anext__(self):
        event = await self.events.get()
        if event is None:
            raise asyncio.CancelledError()
        return event


def subscribed(epoch: int) -> Event:
    return Event(subscribed=Event.Subscribed(framework_id="f", master_id="m", epoch=epoch))


def heartbeat() -> Event:
    return Event(heartbeat=Event.Heartbeat())


@pytest.fixture
def transport():
    tracker = LeaderTracker("zk://127.0.0.1:2181/agora")
    tracker._set_leader("10.0.0.1:5050", 7)
    return GrpcSchedulerTransport(tracker)


async def test_a_stream_is_cut_as_soon_as_zookeeper_names_a_later_leader(transport):
    call = FakeCall()
    events = aiter(_GrpcEventStream(call, transport))
    call.events.put_nowait(subscribed(7))
    assert (await anext(events)).subscribed.epoch == 7
    call.events.put_nowait(heartbeat())
    assert (await anext(events)).HasField("heartbeat")
    reading = asyncio.ensure_future(anext(events))
    await asyncio.sleep(0.01)
    transport.tracker._set_leader("10.0.0.2:5050", 9)  # the old leader is paused: no event
    with pytest.raises(SchedulerError) as e:
        await asyncio.wait_for(reading, 5)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
    assert "ZooKeeper names a leader elected after the master at 10.0.0.1:5050" in e.value.message
    assert call.cancelled


async def test_an_event_arriving_from_a_superseded_leader_is_dropped(transport):
    call = FakeCall()
    events = aiter(_GrpcEventStream(call, transport))
    call.events.put_nowait(subscribed(7))
    await anext(events)
    transport.tracker._zk_epoch = 8  # learned before the next event arrives
    call.events.put_nowait(Event(offers=Event.Offers()))
    with pytest.raises(SchedulerError):
        await anext(events)


async def test_a_master_alone_or_the_current_leader_is_never_superseded(transport):
    tracker = transport.tracker
    assert not tracker.superseded(7) and tracker.superseded(6)
    assert not tracker.superseded(0)  # epoch 0: a master without ZooKeeper
    # ZooKeeper's election data recreated (numbers start again): its word is the truth, so a
    # stream to its new, lower-numbered leader is not taken for a deposed one.
    tracker._set_leader("10.0.0.3:5050", 2)
    assert not tracker.superseded(2) and tracker.superseded(1)
