"""Which instances wait to be launched, kept as they change instead of found by scanning. Pure.

Finding them by scanning every instance of every job cost each offer, update and retry timer
time in proportion to all the instances ever submitted: a 1,000-instance job cost the batch
daemon more per task than the master and both agents together. Here each job with waiting
instances has two heaps: the indices of those ready now, and (not_before, index) of those in a
retry's backoff. Entries are hints, checked against the job when read: one whose instance was
launched, killed or put back into backoff since is dropped when met, so the book is told only
when an instance becomes PENDING (submitted, failed with retries left, a launch undone).
Reading costs what it returns, plus once each entry that went stale.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator

from agora.frameworks.batch import state as st
from agora.v1 import batch_pb2

_PENDING = batch_pb2.INSTANCE_PENDING


class WaitingInstances:
    """Per job id: the pending instances, lowest index first once their backoff is over."""

    def __init__(self) -> None:
        self._ready: dict[str, list[int]] = {}
        self._backoff: dict[str, list[tuple[float, int]]] = {}

    def add_job(self, job: batch_pb2.Job) -> None:
        """Every pending instance of `job` (a new job, or one loaded from the store)."""
        for instance in job.instances:
            if instance.state == _PENDING:
                self.add(job.job_id, instance.index, instance.not_before)

    def add(self, job_id: str, index: int, not_before: float = 0.0) -> None:
        """Instance `index` is pending, to be launched from `not_before` on (0: at once)."""
        if not_before > 0:
            heapq.heappush(self._backoff.setdefault(job_id, []), (not_before, index))
        else:
            heapq.heappush(self._ready.setdefault(job_id, []), index)

    def forget(self, job_id: str) -> None:
        """The job ended (or was forgotten): nothing of it waits any more."""
        self._ready.pop(job_id, None)
        self._backoff.pop(job_id, None)

    def job_ids(self) -> list[str]:
        """Jobs that may have instances waiting (ready now or in backoff)."""
        return [*self._ready, *(j for j in self._backoff if j not in self._ready)]

    def ready(self, job: batch_pb2.Job, now: float) -> Generator[int, None, None]:
        """The instances ready now, lowest index first, read lazily. Closing the iterator
        (or exhausting it) keeps what it read for next time: those launched meanwhile are
        dropped when next met."""
        self._promote(job, now)
        heap = self._ready.get(job.job_id)
        taken: list[int] = []
        try:
            while heap:
                index = heapq.heappop(heap)
                if taken and index == taken[-1]:
                    continue  # entered twice (a hint that went stale and came back)
                if self._is_ready(job, index, now):
                    taken.append(index)
                    yield index
        finally:
            if taken:
                heap = self._ready.setdefault(job.job_id, [])
                for index in taken:
                    heapq.heappush(heap, index)
            self._drop_if_empty(job.job_id)

    def has_ready(self, job: batch_pb2.Job, now: float) -> bool:
        self._promote(job, now)
        heap = self._ready.get(job.job_id)
        while heap and not self._is_ready(job, heap[0], now):
            heapq.heappop(heap)
        self._drop_if_empty(job.job_id)
        return bool(heap)

    def in_backoff(self, job: batch_pb2.Job, now: float) -> int:
        """How many of the job's pending instances wait out a retry's backoff at `now`."""
        self._promote(job, now)
        heap = self._backoff.get(job.job_id)
        if not heap:
            return 0
        return len(
            {index for not_before, index in heap if self._in_backoff(job, not_before, index)}
        )

    def next_retry_at(self, job: batch_pb2.Job, now: float) -> float | None:
        """When the next instance in backoff is due (after `now`: those due by then count as
        ready), if any."""
        self._promote(job, now)
        heap = self._backoff.get(job.job_id)
        while heap and not self._in_backoff(job, *heap[0]):
            heapq.heappop(heap)
        self._drop_if_empty(job.job_id)
        return heap[0][0] if heap else None

    def _promote(self, job: batch_pb2.Job, now: float) -> None:
        """Moves the instances whose backoff is over to the ready heap."""
        heap = self._backoff.get(job.job_id)
        while heap and heap[0][0] <= now:
            not_before, index = heapq.heappop(heap)
            if self._in_backoff(job, not_before, index):
                heapq.heappush(self._ready.setdefault(job.job_id, []), index)

    def _drop_if_empty(self, job_id: str) -> None:
        if not self._ready.get(job_id, True):
            del self._ready[job_id]
        if not self._backoff.get(job_id, True):
            del self._backoff[job_id]

    _is_ready = staticmethod(st.is_ready)

    @staticmethod
    def _in_backoff(job: batch_pb2.Job, not_before: float, index: int) -> bool:
        instance = job.instances[index]
        return instance.state == _PENDING and instance.not_before == not_before
