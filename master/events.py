"""The cluster's events, for operators and tools that follow them (Operator.WatchEvents,
`agora cluster events --follow`), and the audit log of operators' changes.

Mesos' operator API has SUBSCRIBE and Nomad `/v1/event/stream`: tools follow what happens
instead of polling 13 unary calls. Every change worth following is published here once, where
the master makes it, and kept in a bounded history (HISTORY events) so that a watcher that
reconnects resumes after the last index it saw, without gaps or duplicates, within that
history. A master alone keeps its history in memory: an index carries its start time in its
high 32 bits, and resuming from another start, or from before the history, starts with
HISTORY_LOST, the honest answer; the watcher reads the state again. A set of masters keeps the
history in ZooKeeper (master/event_store.py) and a new leader numbers on from the last index
its predecessor landed, so a watcher resumes across a failover as across a reconnect.

Watchers read through bounded queues: one that stops reading is cut rather than let the
master's memory grow (it reconnects with its last index).

Operators' changes (weights, quota, drains, kills, teardowns, ACL reloads) are also written,
one JSON line each (who, what, when, from where, the outcome), to `--audit-log FILE`, and
published under the topic "audit".
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agora.v1 import operator_pb2

if TYPE_CHECKING:
    from agora.master.event_store import ZkEventStore

log = structlog.get_logger(__name__)

__all__ = ["HISTORY", "EventLog", "Watcher"]

HISTORY = 10_000  # events kept for watchers that resume
WATCHER_QUEUE = 10_000  # events waiting for one watcher before it is cut
SEND_BATCH = 2_000  # events in one ZooKeeper entry at most (a few hundred KB of JSON)
RETRY_SECONDS = 0.2  # before sending again a batch ZooKeeper did not take
ClusterEvent = operator_pb2.ClusterEvent


class Watcher:
    """One stream's view: the events to send, or None once it fell behind and was cut."""

    def __init__(self, topics: Iterable[str]) -> None:
        self.topics = frozenset(topics)
        self.queue: asyncio.Queue[ClusterEvent | None] = asyncio.Queue()
        self.cut = False

    def wants(self, topic: str) -> bool:
        return not self.topics or topic in self.topics or topic == "stream"

    def offer(self, event: ClusterEvent) -> None:
        if self.cut or not self.wants(event.topic):
            return
        if self.queue.qsize() >= WATCHER_QUEUE:
            self.cut = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(event)


class Kept:
    """One event as the history keeps it: plain values, made into a ClusterEvent only for a
    watcher. Every task state passes here (the status-update path), and most masters have no
    watcher: a protobuf with a map for each cost 2.9 us, this 0.6 us."""

    __slots__ = ("index", "at", "topic", "kind", "subject", "principal", "detail")

    def __init__(self, index, at, topic, kind, subject, principal, detail) -> None:
        self.index, self.at, self.topic, self.kind = index, at, topic, kind
        self.subject, self.principal, self.detail = subject, principal, detail

    def to_proto(self) -> ClusterEvent:
        return ClusterEvent(
            index=self.index,
            at=self.at,
            topic=self.topic,
            kind=self.kind,
            subject=self.subject,
            principal=self.principal,
            detail={k: str(v) for k, v in self.detail.items() if v is not None and v != ""},
        )


class EventLog:
    """Events of one master's leadership; `generation` is the high half of every index.

    With a `store` (a set of masters: master/event_store.py) the events are kept in ZooKeeper
    and numbered across leaders (generation 0: plain indices that a successor continues). An
    event then reaches watchers and the history only once its batch has landed there: the
    batches go one at a time (a failed one is sent again before anything after it), each
    taking what was published meanwhile, so the order is the publishing order and no watcher
    ever sees an event a successor would not have."""

    def __init__(
        self,
        generation: int = 0,
        clock: Callable[[], float] = time.time,
        audit_path: Path | None = None,
        store: ZkEventStore | None = None,
    ) -> None:
        self.generation = 0 if store is not None else generation or int(clock())
        self._clock = clock
        self._count = 0
        self.history: deque[Kept] = deque(maxlen=HISTORY)
        self.watchers: set[Watcher] = set()
        self.audit_path = audit_path
        self._store = store
        self._durable = 0  # the last index landed in the store
        self._unsent: list[Kept] = []  # published, not yet sent to the store
        self._sending: list[Kept] | None = None  # the batch on its way
        self._loop: asyncio.AbstractEventLoop | None = None
        if store is not None:
            for row in store.loaded:
                # A batch sent again after a lost answer may have landed twice: once is kept.
                if not self.history or row[0] > self.history[-1].index:
                    self.history.append(Kept(*row))
            store.loaded = []
            self._count = self._durable = self.history[-1].index if self.history else 0

    @property
    def last_index(self) -> int:
        """The last index watchers may have seen (with a store: the last landed)."""
        if self._store is not None:
            return self._durable
        return (self.generation << 32) | self._count

    def publish(
        self,
        topic: str,
        kind: str,
        subject: str = "",
        principal: str = "",
        **detail: object,
    ) -> Kept:
        self._count += 1
        index = (self.generation << 32) | self._count
        kept = Kept(index, self._clock(), topic, kind, subject, principal, detail)
        if self._store is not None:
            self._unsent.append(kept)
            if self._sending is None:
                self._send()
            return kept
        self._deliver([kept])
        return kept

    def _deliver(self, events: list[Kept]) -> None:
        self.history.extend(events)
        if self.watchers:
            for kept in events:
                event = kept.to_proto()
                for watcher in self.watchers:
                    watcher.offer(event)

    def _send(self) -> None:
        """Sends what was published since the last batch as one entry (at most SEND_BATCH)."""
        assert self._store is not None
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        batch, self._unsent = self._unsent[:SEND_BATCH], self._unsent[SEND_BATCH:]
        self._sending = batch
        rows = [[e.index, e.at, e.topic, e.kind, e.subject, e.principal, e.detail] for e in batch]
        loop = self._loop

        def done(seq: int | None, error: Exception | None) -> None:  # kazoo's thread
            loop.call_soon_threadsafe(self._sent, seq, error)

        try:
            self._store.append(rows, done)
        except ValueError:  # more than one entry holds: half now, the rest after
            if len(batch) == 1:
                log.error("an event too large to keep is dropped", kind=batch[0].kind)
                self._sending = None
                if self._unsent:
                    self._send()
                return
            half = len(batch) // 2
            self._unsent[:0] = batch
            self._unsent, rest = self._unsent[:half], self._unsent[half:]
            self._send()
            self._unsent.extend(rest)
        except Exception as e:  # noqa: BLE001 - the client is closing: as a failed append
            loop.call_soon(self._sent, None, e)

    def _sent(self, seq: int | None, error: Exception | None) -> None:
        batch, self._sending = self._sending or [], None
        assert self._store is not None
        if seq is None:
            from agora.common.zk_log import LogFenced  # kazoo: only a set's masters load it

            if isinstance(error, LogFenced):
                return  # no longer the leader: nothing of ours lands any more
            log.warning("events not stored in ZooKeeper; trying again", error=str(error))
            self._unsent[:0] = batch
            self._sending = []  # nothing else goes before the retry
            assert self._loop is not None
            self._loop.call_later(RETRY_SECONDS, self._retry)
            return
        self._store.landed(seq, len(batch), HISTORY)
        self._durable = batch[-1].index
        self._deliver(batch)
        if self._unsent:
            self._send()

    def _retry(self) -> None:
        self._sending = None
        if self._unsent:
            self._send()

    def audit(
        self, principal: str, action: str, target: str, peer: str, outcome: str, **detail: object
    ) -> None:
        """An operator's change: an audit event, and a line in --audit-log."""
        event = self.publish(
            "audit", action, target, principal, peer=peer, outcome=outcome, **detail
        )
        if self.audit_path is None:
            return
        line = {
            "at": event.at,
            "index": event.index,
            "principal": principal or "(anonymous)",
            "action": action,
            "target": target,
            "peer": peer,
            "outcome": outcome,
            **{
                k: str(v)
                for k, v in event.detail.items()
                if k not in ("peer", "outcome") and v is not None and v != ""
            },
        }
        try:
            with self.audit_path.open("a") as f:
                f.write(json.dumps(line, sort_keys=True) + "\n")
        except OSError as e:  # the change is made: say the audit line is lost, loudly
            log.error("audit log not written", path=str(self.audit_path), error=str(e))

    def watch(self, since: int, topics: Iterable[str]) -> tuple[Watcher, list[ClusterEvent]]:
        """A new watcher, and what to send it first: the kept events after `since` (all kept
        with 0; HISTORY_LOST first when `since` is of another generation or too old), then
        CAUGHT_UP. It is registered now: nothing published from here on is missed."""
        watcher = Watcher(topics)
        first: list[ClusterEvent] = []
        generation = since >> 32
        oldest = self.history[0].index if self.history else self.last_index + 1
        beyond = since > self.last_index  # kept nowhere: the store was reset
        if since and (generation != self.generation or since + 1 < oldest or beyond):
            why = (
                "another master published it (a failover or a restart)"
                if generation != self.generation or beyond
                else f"it is older than the {HISTORY} events kept"
            )
            first.append(self._stream_event("HISTORY_LOST", since=since, reason=why))
            since = 0
        first += [e.to_proto() for e in self.history if e.index > since and watcher.wants(e.topic)]
        first.append(self._stream_event("CAUGHT_UP", last_index=self.last_index))
        self.watchers.add(watcher)
        return watcher, first

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)

    def _stream_event(self, kind: str, **detail: object) -> ClusterEvent:
        """An event of the stream itself: not kept, index of the last event published."""
        return ClusterEvent(
            index=self.last_index,
            at=self._clock(),
            topic="stream",
            kind=kind,
            detail={k: str(v) for k, v in detail.items()},
        )
