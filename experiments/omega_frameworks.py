"""The job schedulers of `agora experiment omega`: SDK frameworks that decide one job at a time.

Each `JobScheduler` gets jobs by Poisson arrivals (a `JobStream`) into a FIFO queue and runs one
decision loop, as Omega's schedulers do: take the first job and the offers in hand (a snapshot),
place the job's waiting tasks on them (`fit`), *think* for the stream's decision time while
holding those offers, then commit: one Accept per agent. In pessimistic mode the offers are
this framework's alone while it thinks; in optimistic mode others may take the same resources
first, and the commit conflicts (ABORTED, or the offer is rescinded meanwhile): nothing was
launched there, the thinking was wasted, and the job's remaining tasks are decided again with
fresh offers. Every decision, attempt and job goes into the `Ledger` (omega_stats.py).

Offers are held only while they may serve: the unused ones of a decision go back at once (with
a short filter when nothing of the job fitted them), or are kept for the next job for at most
`keep_seconds`; with no job queued everything goes back and the framework suppresses offers,
reviving when the next job arrives. No offer is held past a couple of decisions, so none
reaches the master's offer timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from agora.common.task_states import TERMINAL_STATES
from agora.experiments.load import DURATION_LABEL
from agora.experiments.omega_stats import CONFLICT, LAUNCHED, REFUSED, Decision, Ledger
from agora.frameworks.sdk import Driver, Framework, SchedulerError, TaskSpec, fit, new_task_id
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

RESCINDED = "RESCINDED"  # the reason of a conflict found by a rescind, before any Accept
UNKNOWN = "unknown"  # an Accept that failed on the way (recorded as refused)


def is_conflict(error: SchedulerError) -> bool:
    """The master's "someone else was first" (the SDK's OfferConflict is one of these)."""
    return error.code == grpc.StatusCode.ABORTED


@dataclass(frozen=True)
class JobStream:
    """A framework's workload: Poisson job arrivals of `tasks_min`..`tasks_max` tasks (uniform)
    of one shape, exponential task durations, and the time each decision takes."""

    name: str
    jobs_per_second: float
    tasks_min: int
    tasks_max: int
    cpus: float
    mem: float
    mean_duration: float
    decision_seconds: float
    seed: int = 1

    @property
    def mean_tasks(self) -> float:
        return (self.tasks_min + self.tasks_max) / 2


@dataclass
class Job:
    job_id: str
    submitted: float
    waiting: list[TaskSpec]  # tasks not launched yet


@dataclass
class _Held:
    offer: common_pb2.Offer
    since: float


class Background:
    """Tasks a framework started, logged if they fail, cancelled by `close()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "omega framework task failed", framework=self.name, error=repr(task.exception())
            )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class JobScheduler(Framework):
    def __init__(
        self,
        stream: JobStream,
        ledger: Ledger,
        *,
        keep_seconds: float = 5.0,
        unusable_refuse_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.ledger = ledger
        self.keep_seconds = keep_seconds
        self.unusable_refuse_seconds = unusable_refuse_seconds
        self.clock = clock
        # Arrivals draw from a generator of their own, so the arrival times do not depend on
        # the jobs' shapes: runs with the same seed see the same jobs at the same times.
        self.arrival_rng = random.Random(stream.seed)
        self.rng = random.Random(stream.seed * 7919 + 1)
        self.driver: Driver | None = None
        self.queue: deque[Job] = deque()
        self.pool: dict[str, _Held] = {}  # offers in hand, by id
        self._rescinded: set[str] = set()  # offers of the pool rescinded since taken
        self.running: dict[str, float] = {}  # task id -> cpus
        self.arriving = True
        self._jobs = 0
        self._wake = asyncio.Event()
        self._suppressed = False
        self._interest = asyncio.Lock()
        self._background = Background(stream.name)
        self._started = False

    # the workload ----------------------------------------------------------------------------

    def _job(self, now: float) -> Job:
        s = self.stream
        self._jobs += 1
        job_id = f"{s.name}-job-{self._jobs}"
        specs = []
        for _ in range(self.rng.randint(s.tasks_min, s.tasks_max)):
            duration = self.rng.expovariate(1.0 / s.mean_duration)
            specs.append(
                TaskSpec(
                    s.name,
                    cpus=s.cpus,
                    mem=s.mem,
                    command=f"sleep {duration:.3f}",
                    task_id=new_task_id(s.name),
                    labels={DURATION_LABEL: f"{duration:.6f}"},
                )
            )
        return Job(job_id, now, specs)

    def submit(self) -> Job:
        job = self._job(self.clock())
        self.ledger.submitted(self.stream.name, job.job_id, len(job.waiting), job.submitted)
        self.queue.append(job)
        self._wake.set()
        return job

    async def _arrivals(self) -> None:
        rate = self.stream.jobs_per_second
        due = self.clock()
        while self.arriving:
            # On a schedule, not sleep after sleep: late wake-ups do not add up.
            due += self.arrival_rng.expovariate(rate)
            await asyncio.sleep(max(0.0, due - self.clock()))
            if self.arriving:
                self.submit()

    def stop_arrivals(self) -> None:
        self.arriving = False

    def busy_cpus(self) -> float:
        return sum(self.running.values())

    # callbacks -------------------------------------------------------------------------------

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        self.driver = driver
        if not self._started:
            self._started = True
            self._background.spawn(self._arrivals())
            self._background.spawn(self._decide_loop(driver))

    async def on_offers(self, driver: Driver, offers) -> None:
        now = self.clock()
        for offer in offers:
            self.pool[offer.offer_id] = _Held(offer, now)
        self._wake.set()

    async def on_rescind(self, driver: Driver, offer_id: str) -> None:
        if self.pool.pop(offer_id, None) is not None:
            self._rescinded.add(offer_id)

    async def on_update(self, driver: Driver, status: common_pb2.TaskStatus) -> None:
        if status.state in TERMINAL_STATES:
            self.running.pop(status.task_id, None)

    async def on_disconnected(self, driver: Driver) -> None:
        self.pool.clear()  # offers die with their stream

    # deciding --------------------------------------------------------------------------------

    async def _decide_loop(self, driver: Driver) -> None:
        while True:
            self._wake.clear()
            if self.queue and self.pool:
                await self._decide(driver)
                continue
            # Nothing to run: suppress first, so what goes back is not offered to us again.
            await self._sync_interest(driver)
            if self.pool and not self.queue:
                await self._give_back(driver, list(self.pool), 0.0)
            if not (self.queue and self.pool):
                await self._wake.wait()

    async def _decide(self, driver: Driver) -> None:
        job = self.queue[0]
        snapshot = [held.offer for held in self.pool.values()]
        self._rescinded.clear()
        plan = fit(snapshot, job.waiting)
        if not plan.placements:
            # Nothing of the job fits what is in hand: no decision to make; wait for more.
            await self._give_back(
                driver, [o.offer_id for o in snapshot], self.unusable_refuse_seconds
            )
            return
        started = self.clock()
        await asyncio.sleep(self.stream.decision_seconds)
        decision = self.ledger.decided(
            self.stream.name, job.job_id, started, self.clock() - started
        )
        for placement in plan.placements:
            outcome = await self._commit(driver, decision, placement.offers, placement.tasks)
            ids_of = {t.task_id for t in placement.tasks}
            if outcome == LAUNCHED:
                job.waiting = [s for s in job.waiting if s.task_id not in ids_of]
            elif outcome == UNKNOWN:  # it may have got through: run them again under new ids
                job.waiting = [
                    *(s for s in job.waiting if s.task_id not in ids_of),
                    *retry_ids([s for s in job.waiting if s.task_id in ids_of]),
                ]
        if not job.waiting:
            self.ledger.job_launched(job.job_id, self.clock())
            self.queue.popleft()
        # What the decision did not use goes back, unless the next job may use it soon.
        now = self.clock()
        unused = [o.offer_id for o in plan.unused if o.offer_id in self.pool]
        if plan.unplaced:
            await self._give_back(driver, unused, self.unusable_refuse_seconds)
        else:
            stale = [i for i in unused if now - self.pool[i].since >= self.keep_seconds]
            if not self.queue:
                stale = unused
            await self._give_back(driver, stale, 0.0)

    async def _commit(self, driver: Driver, decision: Decision, offers, tasks) -> str:
        """One Accept: LAUNCHED, CONFLICT, REFUSED (refused outright) or UNKNOWN (failed on
        the way: it may have got through). Its offers leave the pool either way."""
        ids = [o.offer_id for o in offers]
        for offer_id in ids:
            self.pool.pop(offer_id, None)
        now = self.clock()
        if any(i in self._rescinded for i in ids):
            # Taken back while we decided (optimistic: another framework's commit came first).
            self.ledger.attempted(decision, now, len(tasks), CONFLICT, RESCINDED)
            await self._decline(driver, [i for i in ids if i not in self._rescinded], 0.0)
            return CONFLICT
        try:
            # Leftovers go straight back (no filter): another job, or framework, may use them.
            await driver.launch(offers, tasks, refuse_seconds=0)
        except SchedulerError as e:
            outcome = CONFLICT if is_conflict(e) else REFUSED
            self.ledger.attempted(decision, self.clock(), len(tasks), outcome, e.reason or "")
            log.debug("launch refused", framework=self.stream.name, error=str(e))
            if outcome == CONFLICT:
                # Void now, whether or not the master rescinds them itself: give them back.
                await self._decline(driver, ids, 0.0)
                return CONFLICT
            return UNKNOWN if e.transient else REFUSED
        self.ledger.attempted(decision, self.clock(), len(tasks), LAUNCHED)
        for task in tasks:
            self.running[task.task_id] = self.stream.cpus
        return LAUNCHED

    async def _give_back(self, driver: Driver, offer_ids: list[str], refuse: float) -> None:
        for offer_id in offer_ids:
            self.pool.pop(offer_id, None)
        await self._decline(driver, offer_ids, refuse)

    async def _decline(self, driver: Driver, offer_ids: list[str], refuse: float) -> None:
        if not offer_ids:
            return
        try:
            await driver.decline(offer_ids, refuse_seconds=refuse)
        except SchedulerError as e:  # e.g. rescinded meanwhile: nothing to give back
            log.debug("decline refused", framework=self.stream.name, error=str(e))

    async def _sync_interest(self, driver: Driver) -> None:
        """Suppressed while no job waits, revived as soon as one does (a revive also clears
        the filters of earlier declines)."""
        async with self._interest:
            while self._suppressed == bool(self.queue):
                try:
                    if self.queue:
                        await driver.revive()
                    else:
                        await driver.suppress()
                except SchedulerError as e:
                    log.debug("revive/suppress refused", framework=self.stream.name, error=str(e))
                    return
                self._suppressed = not self._suppressed

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        self.arriving = False
        await self._background.close()


def retry_ids(specs: list[TaskSpec]) -> list[TaskSpec]:
    """The same tasks under new ids (after a launch whose outcome is unknown)."""
    return [dataclasses.replace(s, task_id=new_task_id(s.name)) for s in specs]
