"""Coalesced acknowledgements: one Acknowledge call carries every ack queued meanwhile.

Under load, status updates arrive in bursts (three per task: STARTING, RUNNING, the end), and a
unary call per update costs the master more than the acknowledgement itself. The batcher keeps
at most one call in flight: the first ack goes out at once (no timer, so no added latency when
idle), and acks queued while a call is in flight all go out together in the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import structlog

from agora.v1 import common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

# Bounds one call's message (about 100 bytes an ack) and the master's time on it, so that a
# huge backlog cannot hold up the master's event loop (heartbeats, offers) in one go.
MAX_ACKS_PER_CALL = 1000

SendAcks = Callable[[Sequence[common_pb2.TaskStatus]], Awaitable[None]]


def acknowledge_request(
    framework_id: str, stream_id: str, statuses: Sequence[common_pb2.TaskStatus]
) -> scheduler_pb2.AcknowledgeRequest:
    """One AcknowledgeRequest for `statuses` (at least one). The first goes in the singular
    fields, so a single ack is the same request as before batching existed, and a master that
    does not know the list still applies one per call; the rest go in `acknowledgements`."""
    first, *rest = statuses
    return scheduler_pb2.AcknowledgeRequest(
        framework_id=framework_id,
        stream_id=stream_id,
        agent_id=first.agent_id,
        task_id=first.task_id,
        uuid=first.uuid,
        acknowledgements=[
            scheduler_pb2.Acknowledgement(agent_id=s.agent_id, task_id=s.task_id, uuid=s.uuid)
            for s in rest
        ],
    )


class AckBatcher:
    """Queues acks and sends them with `send(statuses)`, one call at a time, in order.

    `send` handles (and logs) the failures it expects; the batcher only keeps going.
    """

    def __init__(self, send: SendAcks, max_per_call: int = MAX_ACKS_PER_CALL) -> None:
        if max_per_call < 1:
            raise ValueError("max_per_call must be at least 1")
        self._send = send
        self.max_per_call = max_per_call
        self._queue: list[common_pb2.TaskStatus] = []
        self._flusher: asyncio.Task | None = None

    def add(self, status: common_pb2.TaskStatus) -> None:
        self._queue.append(status)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def drain(self) -> None:
        """Returns once every queued ack has been sent (or its call has failed)."""
        while self._flusher is not None and not self._flusher.done():
            # wait(), not await: a cancelled caller must not cancel the flusher.
            await asyncio.wait({self._flusher})

    def discard(self) -> int:
        """Forgets queued acks and cancels a call in flight (its stream is gone, so it cannot
        succeed; the agents resend those updates). Returns how many queued acks were dropped."""
        dropped, self._queue = len(self._queue), []
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
        return dropped

    async def _flush(self) -> None:
        while self._queue:
            batch = self._queue[: self.max_per_call]
            del self._queue[: self.max_per_call]
            try:
                await self._send(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                # Not expected (send handles call failures), but a bug must not strand the
                # acks queued behind this batch.
                log.exception("sending acknowledgements failed", count=len(batch))
