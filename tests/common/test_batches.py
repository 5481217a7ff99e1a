"""next_batch and Batcher: what a relay, the master, an agent or a framework stream puts in one
stream message (common/batches.py), and drain_queue, an agent's outgoing stream (common/rpc.py).
"""

from __future__ import annotations

import asyncio
from collections import deque

import pytest

from agora.common.batches import (
    HOLD_MAX,
    HOLD_STEP,
    MAX_BATCH_ITEMS,
    QUIET_SECONDS,
    SOLO_BYTES,
    Batcher,
    event_batches,
    hold_after,
    next_batch,
)
from agora.common.rpc import drain_queue
from agora.v1 import agent_link_pb2, agent_relay_pb2, common_pb2, scheduler_pb2

Item = agent_relay_pb2.RelayUp.Item
AgentMessage = agent_link_pb2.AgentMessage
Event = scheduler_pb2.Event


def _item(link: int, size: int) -> Item:
    """An item of about `size` bytes (a Register whose hostname fills it)."""
    register = AgentMessage.Register()
    register.info.hostname = "h" * size
    return Item(link=link, message=AgentMessage(register=register))


def test_items_go_in_order_up_to_the_byte_budget_and_the_rest_wait():
    items = [_item(i, 1000) for i in range(1, 11)]
    batch, oversized = next_batch(items, budget=3500, limit=10_000)
    assert [i.link for i in batch] == [1, 2, 3]
    assert oversized == []
    assert [i.link for i in items] == [4, 5, 6, 7, 8, 9, 10]  # taken from the front, in place
    assert sum(i.ByteSize() for i in batch) <= 3500


def test_one_item_over_the_budget_still_goes_alone():
    items = [_item(1, 5000), _item(2, 10)]
    batch, _ = next_batch(items, budget=1000, limit=10_000)
    assert [i.link for i in batch] == [1]
    assert [i.link for i in items] == [2]


def test_an_item_too_big_to_send_is_set_apart_and_the_others_still_go():
    items = [_item(1, 10), _item(2, 50_000), _item(3, 10)]
    batch, oversized = next_batch(items, budget=100_000, limit=20_000)
    assert [i.link for i in batch] == [1, 3]
    assert [i.link for i in oversized] == [2]
    assert items == []


def test_nothing_waiting_makes_an_empty_batch():
    assert next_batch([]) == ([], [])


def _update(task_id: str, size: int = 0) -> AgentMessage:
    message = AgentMessage()
    message.status_update.status.task_id = task_id
    message.status_update.status.message = "m" * size
    return message


def _wrap(items: list) -> AgentMessage:
    return AgentMessage(batch=AgentMessage.Batch(messages=items))


def _ids(message: AgentMessage) -> list[str]:
    if message.HasField("batch"):
        return [m.status_update.status.task_id for m in message.batch.messages]
    return [message.status_update.status.task_id]


def test_a_disabled_batcher_sends_one_message_at_a_time():
    pending = deque(_update(f"t{i}") for i in range(3))
    batcher = Batcher(_wrap)
    assert [_ids(batcher.take(pending)) for _ in range(3)] == [["t0"], ["t1"], ["t2"]]


def test_an_enabled_batcher_sends_what_waits_in_one_message_in_order():
    pending = deque(_update(f"t{i}") for i in range(5))
    batch = Batcher(_wrap, enabled=True).take(pending)
    assert batch.HasField("batch")
    assert _ids(batch) == ["t0", "t1", "t2", "t3", "t4"]
    assert not pending


def test_a_lone_message_is_sent_as_itself():
    pending = deque([_update("t0")])
    message = Batcher(_wrap, enabled=True).take(pending)
    assert not message.HasField("batch")
    assert _ids(message) == ["t0"]


def test_a_batch_stops_at_its_byte_budget_and_at_its_item_cap():
    pending = deque(_update(f"t{i}", 1000) for i in range(10))
    batcher = Batcher(_wrap, enabled=True, budget=3500)
    first = batcher.take(pending)
    assert _ids(first) == ["t0", "t1", "t2"]
    assert len(pending) == 7
    # One message over the budget still goes, alone.
    pending = deque([_update("big", 5000), _update("small")])
    assert _ids(batcher.take(pending)) == ["big"]
    pending = deque(_update(f"t{i}") for i in range(MAX_BATCH_ITEMS + 5))
    assert len(_ids(Batcher(_wrap, enabled=True).take(pending))) == MAX_BATCH_ITEMS
    assert len(pending) == 5


def test_a_big_message_goes_alone_and_ends_a_batch():
    """Slices of a large offer round reach the framework slice by slice."""
    big = SOLO_BYTES + 10
    pending = deque([_update("a"), _update("b"), _update("slice-1", big), _update("slice-2", big)])
    batcher = Batcher(_wrap, enabled=True)
    sent = [_ids(batcher.take(pending)) for _ in range(3)]
    assert sent == [["a", "b"], ["slice-1"], ["slice-2"]]


async def test_drain_queue_batches_what_queued_and_ends_after_what_came_before_none():
    outbox: asyncio.Queue = asyncio.Queue()
    batcher = Batcher(_wrap, enabled=True)
    for i in range(4):
        outbox.put_nowait(_update(f"t{i}"))
    outbox.put_nowait(None)
    outbox.put_nowait(_update("after the end"))
    sent = [_ids(m) async for m in drain_queue(outbox, batcher)]
    assert sent == [["t0", "t1", "t2", "t3"]]


async def test_drain_queue_sends_singly_until_its_batcher_is_enabled():
    outbox: asyncio.Queue = asyncio.Queue()
    batcher = Batcher(_wrap)
    stream = drain_queue(outbox, batcher)
    outbox.put_nowait(_update("register"))
    outbox.put_nowait(_update("t0"))
    assert _ids(await anext(stream)) == ["register"]
    assert _ids(await anext(stream)) == ["t0"]
    batcher.enabled = True  # the master said it reads batches
    for i in range(1, 4):
        outbox.put_nowait(_update(f"t{i}"))
    assert _ids(await anext(stream)) == ["t1", "t2", "t3"]
    outbox.put_nowait(None)
    assert [m async for m in stream] == []


def test_big_offers_events_and_subscribed_go_alone_and_updates_batch_around_them():
    def update(task_id: str) -> Event:
        return Event(update=Event.Update(status=common_pb2.TaskStatus(task_id=task_id)))

    def offers(count: int) -> Event:
        return Event(offers=Event.Offers(offers=[common_pb2.Offer()] * count))

    subscribed = Event(subscribed=Event.Subscribed(framework_id="f"))
    pending = deque([subscribed, update("t1"), update("t2"), offers(500), update("t3")])
    batcher = event_batches()
    sent = [batcher.take(pending) for _ in range(4)]
    assert [e.WhichOneof("event") for e in sent] == ["subscribed", "batch", "offers", "update"]
    assert [e.update.status.task_id for e in sent[1].batch.events] == ["t1", "t2"]
    # A few offers (a task ended, its resources came back) batch with the updates.
    pending = deque([update("t4"), offers(1), update("t5")])
    [a, b, c] = batcher.take(pending).batch.events
    assert [a.WhichOneof("event"), b.WhichOneof("event"), c.WhichOneof("event")] == [
        "update",
        "offers",
        "update",
    ]


def test_one_or_two_messages_hold_nothing_and_bigger_batches_hold_more_up_to_a_bound():
    assert hold_after(1) == hold_after(2) == 0
    assert hold_after(3) == HOLD_STEP and hold_after(4) == 2 * HOLD_STEP
    assert hold_after(MAX_BATCH_ITEMS) == HOLD_MAX


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_after_a_big_batch_the_next_write_waits_and_a_quiet_stream_never_does():
    clock = _Clock()
    batcher = Batcher(_wrap, enabled=True, clock=clock)
    pending = deque(_update(f"t{i}") for i in range(2))
    batcher.take(pending)
    assert batcher.wait_before_next() == 0  # two at a time: no sign of load
    pending = deque(_update(f"t{i}") for i in range(6))
    assert len(_ids(batcher.take(pending))) == 6
    assert batcher.wait_before_next() == pytest.approx(hold_after(6))
    clock.now += hold_after(6) / 2
    assert batcher.wait_before_next() == pytest.approx(hold_after(6) / 2)
    clock.now += hold_after(6)
    assert batcher.wait_before_next() == 0
    # A single message after that holds nothing for the next one.
    batcher.take(deque([_update("alone")]))
    assert batcher.wait_before_next() == 0


def test_a_disabled_batcher_never_holds():
    batcher = Batcher(_wrap, clock=_Clock())
    pending = deque(_update(f"t{i}") for i in range(6))
    for _ in range(6):
        batcher.take(pending)
    assert batcher.wait_before_next() == 0


async def test_drain_queue_holds_its_next_write_after_a_big_batch_so_more_gather():
    outbox: asyncio.Queue = asyncio.Queue()
    stream = drain_queue(outbox, Batcher(_wrap, enabled=True))
    for i in range(4):
        outbox.put_nowait(_update(f"a{i}"))
    assert _ids(await anext(stream)) == ["a0", "a1", "a2", "a3"]

    async def trickle() -> None:
        # One message at a time, well within the hold of the batch of four.
        for i in range(3):
            outbox.put_nowait(_update(f"b{i}"))
            await asyncio.sleep(0)

    await asyncio.gather(trickle(), _expect_batch(stream, ["b0", "b1", "b2"]))
    outbox.put_nowait(None)


async def _expect_batch(stream, ids: list[str]) -> None:
    assert _ids(await anext(stream)) == ids


async def _in_same_turn(stream, outbox: asyncio.Queue, ids: list[str]) -> list[list[str]]:
    """Puts `ids` in the outbox, the first now and the others from callbacks of this turn of
    the loop, and returns the stream messages they went in."""
    loop = asyncio.get_running_loop()
    outbox.put_nowait(_update(ids[0]))
    for i in ids[1:]:
        loop.call_soon(outbox.put_nowait, _update(i))
    sent: list[list[str]] = []
    while sum(map(len, sent)) < len(ids):
        sent.append(_ids(await anext(stream)))
    return sent


async def test_an_agent_s_lone_message_on_a_quiet_stream_goes_at_once():
    """A task's end on an idle agent is not held a turn for others to join (the offer of its
    resources waits for it); on a stream that sent a moment ago it is, as before."""
    clock = _Clock()
    outbox: asyncio.Queue = asyncio.Queue()
    batcher = Batcher(_wrap, enabled=True, clock=clock, quiet_alone=True)
    stream = drain_queue(outbox, batcher)
    assert await _in_same_turn(stream, outbox, ["a", "b", "c"]) == [["a"], ["b", "c"]]
    clock.now += QUIET_SECONDS / 2  # busy: the callbacks' messages join the first
    assert await _in_same_turn(stream, outbox, ["d", "e", "f"]) == [["d", "e", "f"]]
    clock.now += 2 * QUIET_SECONDS
    assert await _in_same_turn(stream, outbox, ["g", "h"]) == [["g"], ["h"]]
    outbox.put_nowait(None)


async def test_without_quiet_alone_a_lone_message_waits_a_turn_for_others():
    outbox: asyncio.Queue = asyncio.Queue()
    stream = drain_queue(outbox, Batcher(_wrap, enabled=True, clock=_Clock()))
    assert await _in_same_turn(stream, outbox, ["a", "b", "c"]) == [["a", "b", "c"]]
    outbox.put_nowait(None)


async def test_settle_gives_no_turn_when_a_batch_is_waiting_already():
    """The master's writer: a task's end and the offer of its resources, queued in one pass,
    go at once; a lone message lets the loop turn once first."""
    batcher = Batcher(_wrap, enabled=True, clock=_Clock())
    turned = []
    asyncio.get_running_loop().call_soon(turned.append, True)
    await batcher.settle(_update("end"), queued=2)
    assert turned == []
    await batcher.settle(_update("end"), queued=1)
    assert turned == [True]
