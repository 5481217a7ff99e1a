"""One role's jobs of a trace waiting for offers, planned by the batch framework's own code.

The simulator's frameworks and the cross-check's real SDK framework both keep their waiting
jobs here, so the two place tasks by the same decisions: jobs in the batch framework's
"priority" queue order (frameworks/batch/queue.py), tasks into a round of offers by its
planner (frameworks/batch/placement.py, which spreads a job over the agents offered and
stops at the first task that fits nowhere). Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from agora.common import UNRESERVED, Resources
from agora.experiments.load import DURATION_LABEL
from agora.experiments.simulate.trace import Job
from agora.frameworks.batch.placement import Group, Plan, Want, plan
from agora.frameworks.batch.queue import QueuedJob, order
from agora.frameworks.sdk import TaskSpec
from agora.v1 import common_pb2

__all__ = ["Placed", "TraceQueue", "WaitingJob", "scalars", "shape_of"]


def shape_of(job: Job, count: int = 1) -> Resources:
    """What `count` tasks of the job use together."""
    return scalars({name: amount * count for name, amount in job.resources.items()})


def scalars(amounts: dict[str, float]) -> Resources:
    """Unreserved scalar resources, by name."""
    return Resources({(name, UNRESERVED): amount for name, amount in amounts.items()})


@dataclass
class WaitingJob:
    job: Job
    sequence: int
    left: int  # tasks not launched yet
    next_index: int = 0  # the index the next task launched gets

    @property
    def queued(self) -> QueuedJob:
        return QueuedJob(self.job.job, self.sequence, self.job.priority, self.job.duration)


@dataclass(frozen=True)
class Placed:
    """A plan's tasks of one job on one agent."""

    job: Job
    agent_id: str
    count: int
    sequence: int  # the job's place in the queue, kept if its tasks must wait again


class TraceQueue:
    def __init__(self, role: str) -> None:
        self.role = role
        self.jobs: dict[str, WaitingJob] = {}
        self._sequence = 0
        # demand() and smallest(), kept as jobs come, launch and go: a revive asks for both
        # with every job that arrives, and at 100,000 agents thousands wait at a time.
        self._demand: dict[str, int] = {}  # resource -> thousandths, over the tasks waiting
        self._least = {"cpus": _Least(), "mem": _Least()}

    def __bool__(self) -> bool:
        return bool(self.jobs)

    def arrive(self, job: Job) -> None:
        self._sequence += 1
        self._add(WaitingJob(job, self._sequence, job.tasks))

    def _add(self, waiting: WaitingJob) -> None:
        job = waiting.job
        self.jobs[job.job] = waiting
        self._count(job, waiting.left)
        for name, least in self._least.items():
            least.add(job.resources.get(name, 0.0))

    def _count(self, job: Job, tasks: int) -> None:
        demand = self._demand
        for name, amount in job.resources.items():
            # Per task to a thousandth, as a launch's TaskSpec rounds what it takes off.
            demand[name] = demand.get(name, 0) + round(round(amount, 3) * 1000) * tasks

    def _remove(self, job: Job) -> None:
        del self.jobs[job.job]
        for name, least in self._least.items():
            least.remove(job.resources.get(name, 0.0))

    def demand(self) -> dict[str, float]:
        """What the waiting tasks ask for together, per resource (to a thousandth)."""
        return {name: amount / 1000 for name, amount in self._demand.items() if amount > 0}

    def smallest(self) -> tuple[float, float]:
        """The fewest cpus and mem (MB) any waiting task asks for: an offer with less of
        either fits no waiting task (cheaper to tell than a plan)."""
        return self._least["cpus"].value(), self._least["mem"].value()

    def fits_some(self, resources: Resources) -> bool:
        """Whether `resources` hold one task of some waiting job (cpus and mem): if not, the
        batch framework refuses the offer for its --unfit-refuse."""
        cpus, mem = resources.scalar("cpus") + 1e-9, resources.scalar("mem") + 1e-9
        for w in self.jobs.values():
            res = w.job.resources
            if res.get("cpus", 0.0) <= cpus and res.get("mem", 0.0) <= mem:
                return True
        return False

    def plan(self, offers: Sequence[common_pb2.Offer]) -> Plan:
        """The batch framework's plan of the waiting jobs into these offers (all of one
        round: the caller holds them while it decides)."""
        waiting = order((w.queued for w in self.jobs.values()), "priority")
        groups = [self._group(self.jobs[q.job_id]) for q in waiting]
        return plan(offers, groups, role=self.role)

    def _group(self, waiting: WaitingJob) -> Group:
        return Group(waiting.job.job, _wants(waiting))

    def take(self, result: Plan) -> list[Placed]:
        """Books the plan's tasks as launched; returns them by job and agent."""
        placed: list[Placed] = []
        for launch in result.launches:
            counts: dict[str, int] = {}
            for want in launch.wants:
                counts[want.job_id] = counts.get(want.job_id, 0) + 1
            for job_id, count in counts.items():
                waiting = self.jobs[job_id]
                waiting.left -= count
                waiting.next_index += count
                self._count(waiting.job, -count)
                placed.append(Placed(waiting.job, launch.agent_id, count, waiting.sequence))
                if waiting.left <= 0:
                    self._remove(waiting.job)
        return placed

    def give_back(self, placed: Placed) -> None:
        """Tasks that were planned but not launched (an optimistic offer's conflict) wait
        again, in their job's place in the queue."""
        job = placed.job
        waiting = self.jobs.get(job.job)
        if waiting is None:
            self._add(WaitingJob(job, placed.sequence, placed.count, job.tasks))
            return
        waiting.left += placed.count
        self._count(job, placed.count)


class _Least:
    """The least of a multiset of amounts, kept as amounts come and go (a heap whose entries
    no longer counted are dropped when they reach the top)."""

    def __init__(self) -> None:
        self._counts: dict[float, int] = {}
        self._heap: list[float] = []

    def add(self, amount: float) -> None:
        n = self._counts.get(amount, 0)
        self._counts[amount] = n + 1
        if n == 0:
            heapq.heappush(self._heap, amount)

    def remove(self, amount: float) -> None:
        n = self._counts[amount] - 1
        if n:
            self._counts[amount] = n
        else:
            del self._counts[amount]

    def value(self) -> float:
        """The least amount counted (inf when none)."""
        heap, counts = self._heap, self._counts
        while heap and heap[0] not in counts:
            heapq.heappop(heap)
        return heap[0] if heap else float("inf")


def _wants(waiting: WaitingJob) -> Iterator[Want]:
    """The job's waiting tasks as the planner reads them: lazily, no further than it needs."""
    job = waiting.job
    resources = job.resources
    labels = {DURATION_LABEL: f"{job.duration:.6f}"}
    command = f"sleep {job.duration:.3f}"
    for i in range(waiting.next_index, waiting.next_index + waiting.left):
        spec = TaskSpec(
            job.job,
            cpus=resources.get("cpus", 0.0),
            mem=resources.get("mem", 0.0),
            disk=resources.get("disk", 0.0),
            gpus=resources.get("gpus", 0.0),
            command=command,
            task_id=f"{job.job}.{i}",
            labels=labels,
        )
        yield Want(job.job, i, spec)
