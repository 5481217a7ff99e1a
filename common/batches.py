"""Batching protobuf messages into one gRPC message, within its size limit (pure).

Each gRPC stream message costs both ends about as much as its content (grpc.aio's per-message
work), so under load what waits to be sent goes in one: a relay and the master carry many
agents' messages in one stream message each way (agent_relay.proto), and an agent, the master
and a framework put what their stream has queued in one Batch (agent_link.proto,
scheduler.proto; `Batcher`). What waits goes in the next message, but never more than
BATCH_BYTES of it: gRPC refuses a message over the receiver's limit (64 MiB, common/rpc.py),
which would cut the stream (of every agent carried on it, for a relay). A relay's item too big
to be sent even alone is set apart for the caller to refuse, so one agent's oversized message
ends that agent's link only.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agora.v1 import agent_link_pb2, scheduler_pb2

__all__ = [
    "BATCH_BYTES",
    "ITEM_LIMIT",
    "MAX_BATCH_ITEMS",
    "SOLO_BYTES",
    "Batcher",
    "hold_after",
    "agent_batches",
    "event_batches",
    "master_batches",
    "next_batch",
]

BATCH_BYTES = 4 * 1024 * 1024
# The receivers' limit is 64 MiB; a batch's framing and one item's envelope fit in the rest.
ITEM_LIMIT = 64 * 1024 * 1024 - 64 * 1024
# Messages in one Batch: enough to make the per-message cost vanish, few enough that the
# receiver's loop is not held long by one.
MAX_BATCH_ITEMS = 512
# A message this big goes alone and ends a batch: the per-message cost is small beside its own,
# and a big message is usually a slice of a large offer round (master/offer_cycle.py), which
# must reach the framework slice by slice, the first at once, not merged back into one.
SOLO_BYTES = 64 * 1024
# After a message that carried n > 2 items, the stream holds its next write for (n - 2) steps,
# at most HOLD_MAX: see hold_after.
HOLD_STEP = 0.001
HOLD_MAX = 0.004
# A stream that took nothing for this long is quiet: its next lone message goes at once, with
# no turn of the loop for others to join (Batcher.settle).
QUIET_SECONDS = 0.005


def hold_after(items: int) -> float:
    """How long a stream waits before its next write, after one that carried `items` messages.

    A batch of three or more is a sign of load: messages are coming faster than the stream
    sends them one by one, and every stream message costs both ends about as much as its
    content. Holding the next write a little lets the next batch gather more, so the cost per
    message falls as the load grows (one task an Accept on emulated agents: about a quarter
    less CPU a task; docs/experiments.md). One or two at a time, the common case of a quiet
    cluster (an update; an acknowledgement with the next launch), hold nothing, so an idle
    stream still sends each message at once. The hold grows with the batch and stops at
    HOLD_MAX, which bounds what it adds to a message's latency per hop.
    """
    return min(HOLD_MAX, max(0, items - 2) * HOLD_STEP)


def next_batch(
    items: list, budget: int = BATCH_BYTES, limit: int = ITEM_LIMIT
) -> tuple[list, list]:
    """Takes from the front of `items` (in place) what goes in the next message: items in order
    up to `budget` bytes (at least one), and apart, any over `limit` met on the way."""
    batch: list = []
    oversized: list = []
    size = taken = 0
    for item in items:
        n = item.ByteSize()
        if n > limit:
            oversized.append(item)
        elif batch and size + n > budget:
            break
        else:
            batch.append(item)
            size += n + 8  # the repeated field's tag and length
        taken += 1
    del items[:taken]
    return batch, oversized


@dataclass
class Batcher:
    """What a stream sends next: the first message waiting, or while `enabled` (the peer said it
    reads batches) every message waiting, up to `budget` bytes and MAX_BATCH_ITEMS, wrapped in
    one by `wrap`; a message over SOLO_BYTES always goes alone. A batch is what queued while
    the stream was busy, and what the callbacks ready when the writer wakes send (the writers
    let the loop turn once, a few us, before they take); after a batch of three or more the
    next write also waits hold_after(n), at most HOLD_MAX, for more to gather. So an idle
    stream sends each message at once and a loaded one sends fewer."""

    wrap: Callable[[list], Any]
    enabled: bool = False
    budget: int = BATCH_BYTES
    # Messages that always go alone (and end a batch), whatever their size.
    alone: Callable[[Any], bool] | None = None
    clock: Callable[[], float] = time.monotonic
    # A lone message on a stream quiet for QUIET_SECONDS goes at once (settle).
    quiet_alone: bool = False
    # When the next write may go, after the last batch's hold (clock time).
    hold_until: float = field(default=0.0, repr=False)
    # When the writer last took (clock time): see settle.
    last_take: float = field(default=-math.inf, repr=False)

    def wait_before_next(self) -> float:
        """Seconds the next batch still waits for (0: none)."""
        return max(0.0, self.hold_until - self.clock())

    async def settle(self, first: Any, queued: int = 1) -> None:
        """Before a writer takes: if `first` may start a batch, lets the loop turn once (and
        sits out the hold of a big last batch), so what the callbacks ready now send joins it.
        One that goes alone (a slice of offers, say) is written at once: meanwhile the offer
        cycle would make its next slice. No turn either, which would add a tenth of a
        millisecond to an offer's latency, when the batch is there already (`queued`: a
        task's end and the offer of its resources, sent in one pass), or, with `quiet_alone`,
        when a lone message comes to a quiet stream (a task ended on an idle agent): under
        load a stream is never quiet, and what comes while a write is under way joins the
        next batch in any case."""
        if self.enabled and (self.alone is None or not self.alone(first)):
            hold = self.wait_before_next()
            if hold or (queued < 2 and not self._quiet()):
                await asyncio.sleep(hold)

    def _quiet(self) -> bool:
        return self.quiet_alone and self.clock() - self.last_take >= QUIET_SECONDS

    def take(self, pending: deque) -> Any:
        """Pops the next message to send from the front of `pending` (not empty)."""
        message, count = self._take(pending)
        if self.enabled:
            now = self.last_take = self.clock()
            self.hold_until = now + hold_after(count) if count > 2 else 0.0
        return message

    def _take(self, pending: deque) -> tuple[Any, int]:
        first = pending.popleft()
        if not self.enabled or not pending:
            return first, 1
        alone = self.alone
        if alone is not None and alone(first):
            return first, 1
        size = first.ByteSize()
        if size > SOLO_BYTES:
            return first, 1
        items = [first]
        while pending and len(items) < MAX_BATCH_ITEMS:
            if alone is not None and alone(pending[0]):
                break
            n = pending[0].ByteSize()
            if n > SOLO_BYTES or size + n > self.budget:
                break  # it goes next, alone (the caller's limits keep it legal)
            items.append(pending.popleft())
            size += n + 8  # the repeated field's tag and length
        return (first if len(items) == 1 else self.wrap(items)), len(items)


def agent_batches() -> Batcher:
    """For an agent's stream to the master: AgentMessage.Batch, once Registered allows it. A
    task's end on a quiet agent goes at once: the offer of its resources waits for it."""
    return Batcher(_agent_batch, quiet_alone=True)


def master_batches() -> Batcher:
    """For the master's stream to an agent that reads MasterMessage.Batch."""
    return Batcher(_master_batch, enabled=True)


def event_batches() -> Batcher:
    """For the master's stream to a framework that reads Event.Batch. An event of many offers
    goes alone: the offer cycle puts up to 500 in an event and sends a large round's events as
    it makes them, the first at once (master/offer_cycle.py); merged, the first offers would
    wait for the rest. A few offers (resources freed by a task that ended) batch with the
    updates around them. SUBSCRIBED and HOLD go alone too."""
    return Batcher(_event_batch, enabled=True, alone=_event_alone)


# An OFFERS event with more offers than this goes alone (a slice of a large round).
FEW_OFFERS = 32


def _event_alone(event: scheduler_pb2.Event) -> bool:
    kind = event.WhichOneof("event")
    if kind == "offers":
        return len(event.offers.offers) > FEW_OFFERS
    return kind in ("hold", "subscribed")


def _agent_batch(items: list) -> agent_link_pb2.AgentMessage:
    return agent_link_pb2.AgentMessage(batch=agent_link_pb2.AgentMessage.Batch(messages=items))


def _master_batch(items: list) -> agent_link_pb2.MasterMessage:
    return agent_link_pb2.MasterMessage(batch=agent_link_pb2.MasterMessage.Batch(messages=items))


def _event_batch(items: list) -> scheduler_pb2.Event:
    return scheduler_pb2.Event(batch=scheduler_pb2.Event.Batch(events=items))
