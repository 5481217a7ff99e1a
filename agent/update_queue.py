"""Per-task ordered streams of reliable status updates: pure bookkeeping, no I/O, no clock.

As in Mesos' status update manager, only the oldest unacknowledged update of a task is in
flight: the next one is sent once the master forwards the framework's acknowledgement. The master
therefore sees each task's states strictly in order and never a stale one after a newer one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from agora.v1 import common_pb2

StreamKey = tuple[str, str]  # (framework_id, task_id)


@dataclass
class UpdateStream:
    """The unacknowledged updates of one task, oldest first, and when to send the head."""

    framework_id: str
    task_id: str
    updates: deque[common_pb2.TaskStatus] = field(default_factory=deque)
    # None: the head has not been sent since it became the head (or since a reconnect): due now.
    next_attempt: float | None = None
    backoff: float = 0.0

    def head(self) -> common_pb2.TaskStatus | None:
        return self.updates[0] if self.updates else None

    def due(self, now: float) -> bool:
        return bool(self.updates) and (self.next_attempt is None or now >= self.next_attempt)


class UpdateQueue:
    """All tasks' streams; the caller supplies `now` and sends what `due` returns."""

    def __init__(self, initial_backoff: float = 0.5, max_backoff: float = 10.0) -> None:
        if initial_backoff <= 0 or max_backoff < initial_backoff:
            raise ValueError("need 0 < initial_backoff <= max_backoff")
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._streams: dict[StreamKey, UpdateStream] = {}

    def add(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        key = (framework_id, status.task_id)
        stream = self._streams.get(key)
        if stream is None:
            stream = self._streams[key] = UpdateStream(framework_id, status.task_id)
        stream.updates.append(status)

    def ack(self, framework_id: str, task_id: str, uuid: bytes) -> common_pb2.TaskStatus | None:
        """Drops the update with this uuid; returns it, or None for an unknown (duplicate) ack."""
        stream = self._streams.get((framework_id, task_id))
        if stream is None or not uuid:
            return None
        for i, status in enumerate(stream.updates):
            if status.uuid == uuid:
                del stream.updates[i]
                if i == 0:
                    # The next update goes out at once, with a fresh backoff.
                    stream.next_attempt = None
                    stream.backoff = 0.0
                if not stream.updates:
                    del self._streams[(framework_id, task_id)]
                return status
        return None

    def due(self, now: float) -> list[tuple[str, common_pb2.TaskStatus]]:
        """The head of every stream whose (re)send time has come, as (framework_id, status)."""
        return [(s.framework_id, s.updates[0]) for s in self._streams.values() if s.due(now)]

    def due_head(self, framework_id: str, task_id: str, now: float) -> common_pb2.TaskStatus | None:
        """The head of one task's stream if its (re)send time has come, else None."""
        stream = self._streams.get((framework_id, task_id))
        return stream.updates[0] if stream is not None and stream.due(now) else None

    def mark_sent(self, framework_id: str, task_id: str, now: float) -> None:
        """Schedules the next resend of the head: 0.5 s, 1 s, 2 s ... capped."""
        stream = self._streams.get((framework_id, task_id))
        if stream is None:
            return
        stream.backoff = (
            self.initial_backoff
            if stream.backoff == 0.0
            else min(stream.backoff * 2, self.max_backoff)
        )
        stream.next_attempt = now + stream.backoff

    def next_attempt(self, framework_id: str, task_id: str) -> float:
        """When the head of this (sent) stream is due again; inf for no stream."""
        stream = self._streams.get((framework_id, task_id))
        if stream is None or stream.next_attempt is None:
            return float("inf")
        return stream.next_attempt

    def reset(self) -> None:
        """After (re-)registering: every head is due at once, with a fresh backoff."""
        for stream in self._streams.values():
            stream.next_attempt = None
            stream.backoff = 0.0

    def next_due(self) -> float | None:
        """The earliest scheduled resend, or None when nothing is pending or all are due now."""
        times = [
            s.next_attempt
            for s in self._streams.values()
            if s.updates and s.next_attempt is not None
        ]
        return min(times) if times else None

    def pending_count(self) -> int:
        """Updates not yet acknowledged, over every task."""
        return sum(len(s.updates) for s in self._streams.values())

    def pending(self, framework_id: str, task_id: str) -> list[common_pb2.TaskStatus]:
        stream = self._streams.get((framework_id, task_id))
        return list(stream.updates) if stream else []

    def all_pending(self) -> list[tuple[str, common_pb2.TaskStatus]]:
        return [(s.framework_id, u) for s in self._streams.values() for u in s.updates]

    def drop_all(self) -> None:
        self._streams.clear()

    def __len__(self) -> int:
        return sum(len(s.updates) for s in self._streams.values())
