"""The carried fleet's links (experiments/emulated/carrier.py) end as a relayed agent's stream
ends, whatever ends them: a reader never waits on a link nothing will end."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agora.agent.relay import RelayCounts, Uplink
from agora.experiments.emulated.carrier import CarriedCall
from agora.v1 import agent_link_pb2, agent_relay_pb2

AgentMessage, MasterMessage = agent_link_pb2.AgentMessage, agent_link_pb2.MasterMessage
RelayDown = agent_relay_pb2.RelayDown


class FakeCall:
    """The Carry stream's writing end: records what the carrier sent up."""

    def __init__(self) -> None:
        self.sent: list = []

    async def write(self, message) -> None:
        self.sent.append(message)

    def cancel(self) -> None:
        pass


async def agent_requests(stop: asyncio.Event):
    yield AgentMessage(register=AgentMessage.Register(version="test"))
    await stop.wait()


def master_says(up: Uplink, link: int, n: int) -> None:
    for _ in range(n):
        up.deliver(RelayDown.Item(link=link, message=MasterMessage(shutdown_framework={})))


async def test_a_link_that_stopped_reading_is_cut_and_its_reader_told():
    up = Uplink(FakeCall(), max_up=100, max_down_per_link=2, counts=RelayCounts())
    stop = asyncio.Event()
    call = CarriedCall(up, agent_requests(stop), "fleet-a")
    await asyncio.sleep(0.05)  # the pump opens the link with the Register
    (item,) = up.items or up.call.sent[0].items
    assert item.principal == "fleet-a" and item.message.HasField("register")
    master_says(up, item.link, 3)  # the third finds two unread: the link is cut
    await asyncio.sleep(0)
    for _ in range(2):  # what was queued before the cut is still read
        assert (await asyncio.wait_for(call.read(), 1)).HasField("shutdown_framework")
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await asyncio.wait_for(call.read(), 1)  # then the end, not a wait forever
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    stop.set()


async def test_a_link_opened_after_its_stream_broke_ends_at_once():
    up = Uplink(FakeCall(), max_up=100, max_down_per_link=10, counts=RelayCounts())
    stop = asyncio.Event()
    call = CarriedCall(up, agent_requests(stop))
    up.end_all("the stream broke")  # before the pump has run
    with pytest.raises(grpc.aio.AioRpcError) as ended:
        await asyncio.wait_for(call.read(), 1)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not up.links
    stop.set()


async def test_a_cancelled_link_reads_cancelled_and_tells_the_master_it_closed():
    up = Uplink(FakeCall(), max_up=100, max_down_per_link=10, counts=RelayCounts())
    stop = asyncio.Event()
    call = CarriedCall(up, agent_requests(stop))
    await asyncio.sleep(0.05)
    reader = asyncio.create_task(call.read())
    await asyncio.sleep(0)
    call.cancel()  # as the agent does when its master falls silent
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(reader, 1)
    await asyncio.sleep(0.05)
    sent = [i for m in up.call.sent for i in m.items] + up.items
    assert [i.WhichOneof("what") for i in sent] == ["message", "closed"]
