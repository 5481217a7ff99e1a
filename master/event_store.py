"""The cluster events of a set of masters, kept in ZooKeeper so that a watcher resumes across a
failover (issue 38, part 4): the leader appends, a new leader reads them back and numbers on.

Layout: a log (common/zk_log.py) under `<path>/events`, one entry per batch of events, each
entry JSON [[index, at, topic, kind, subject, principal, {detail}], ...]. Appends are fenced
on the leader's election znode, so a deposed leader's events never land; the master delivers
an event to watchers only once its entry has landed (master/events.py), so no watcher ever saw
an event a successor does not have. The oldest entries are deleted once more than the history
(events.HISTORY) is kept.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Sequence

from kazoo.client import KazooClient

from agora.common.zk_log import Stale, ZkLog

__all__ = ["ZkEventStore"]

Row = Sequence  # (index, at, topic, kind, subject, principal, detail)


class ZkEventStore:
    """Where a leader's events land: `load` (blocking) before the master starts, then
    `append` without waiting and `landed` once an entry is in."""

    def __init__(self, zk: KazooClient, path: str, fence: str | None = None) -> None:
        self._log = ZkLog(zk, f"{path.rstrip('/')}/events", fence=fence)
        self._entries: deque[tuple[int, int]] = deque()  # (sequence, events in it), oldest first
        self._kept = 0
        self.loaded: list[Row] = []  # what `load` read

    def describe(self) -> str:
        return self._log.describe()

    def load(self) -> None:
        """Reads every event kept, oldest first, into `loaded` (blocking; after a sync, so
        that it holds all a predecessor could land). Before the master starts."""
        while True:
            try:
                found = self._log.read_after(-1, sync=True)
                break
            except Stale:  # the previous leader's trimming raced the read: read again
                time.sleep(0.05)
        for seq, data in found.entries:
            batch = [tuple(row) for row in json.loads(data)]
            self._entries.append((seq, len(batch)))
            self._kept += len(batch)
            self.loaded.extend(batch)

    def append(self, rows: Sequence[Row], done: Callable[[int | None, Exception | None], None]):
        """Sends one entry; `done(sequence, None)` or `done(None, error)` on kazoo's thread."""
        data = json.dumps(rows, separators=(",", ":"), default=str).encode()
        self._log.append_async(data, done)

    def landed(self, seq: int, count: int, keep: int) -> None:
        """On the event loop, once an entry of `count` events landed: the oldest entries go
        while the rest still hold `keep` events."""
        self._entries.append((seq, count))
        self._kept += count
        doomed = []
        while self._entries and self._kept - self._entries[0][1] >= keep:
            seq, count = self._entries.popleft()
            self._kept -= count
            doomed.append(seq)
        if doomed:
            self._log.forget(doomed)
