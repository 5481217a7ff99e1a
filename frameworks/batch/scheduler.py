"""BatchScheduler: the batch framework's decisions (a Framework) and its book of jobs.

It owns the jobs (persisted on every change), places ready instances into offers in queue
order, retries failed instances with backoff, kills, and tells watchers about every change.
The gRPC servicer calls `submit`, `kill`, `get`, `jobs`, `watch`; the SDK driver calls the
`on_*` callbacks. Both run on one event loop, so no locks: nothing here holds an invariant
across an await.

Per task it costs what that task needs, not what the book holds: the instances waiting for
offers are kept in waiting.py as they change (no scan of every job per offer, update or
timer), an offer round builds task specs only for what it places, a job's counts follow its
instances as they change (state.py), and the writes of a burst of updates go to SQLite in one
transaction, committed before any of those updates is acknowledged (store.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shlex
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import grpc
import structlog

from agora.common import UNRESERVED, Resources, new_id
from agora.frameworks.batch import dependencies as deps
from agora.frameworks.batch import pending
from agora.frameworks.batch import state as st
from agora.frameworks.batch.backfill import Reservation, reserve
from agora.frameworks.batch.placement import FairShare, Group, Plan, Want, offer_facts, plan
from agora.frameworks.batch.queue import QueuedJob, get_policy
from agora.frameworks.batch.refusals import (
    DECLINE_REFUSE_SECONDS,
    IDLE_REFUSE_SECONDS,
    UNFIT_REFUSE_SECONDS,
    blamed_jobs,
)
from agora.frameworks.batch.store import JobStore
from agora.frameworks.batch.validation import constraints_of, describe_needs, needs
from agora.frameworks.batch.waiting import WaitingInstances
from agora.frameworks.batch.wants import shape_of, wants_of
from agora.frameworks.sdk import (
    Driver,
    Framework,
    OfferConflict,
    SchedulerError,
    TaskSpec,
    describe_status,
)
from agora.frameworks.sdk.constraints import AgentFacts
from agora.v1 import batch_pb2, common_pb2

# Constraints that count the job's running instances (the others look at one agent only).
COUNTING = frozenset({"UNIQUE", "MAX_PER", "GROUP_BY"})

log = structlog.get_logger(__name__)

HELD_MESSAGE = "held: release it with `agora job release`"
# How a job's message starts while the batch daemon has no master.
MASTER_LOST = "the batch daemon lost the master"

# How soon a gang that waits for a round of offers that fits it (without a hold) asks for every
# offer again at once (see _arm_realign).
REALIGN_SECONDS = 1.0

# Accept failed without saying whether the master acted on it.
_OUTCOME_UNKNOWN = frozenset(
    {
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)


class UnknownJob(KeyError):
    """No job has that id."""


class WrongJobState(ValueError):
    """The job is not in a state the change makes sense in: a release of a job that is not
    held, a hold of one that has started, a requeue of one that is not running. The message
    says why."""


class JobEnded(WrongJobState):
    """The job has already ended (a kill cannot change it)."""


class StoreUnavailable(RuntimeError):
    """The job store cannot be written now; the message says why and asks to try again. A
    submission or kill that raises it has changed nothing."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"cannot write the job store ({reason}): try again")


# How long after a revive with wants a ready job that no round has judged is said to wait for
# room (BatchScheduler._unoffered): offers, where there is room, come within milliseconds.
UNOFFERED_SECONDS = 1.0


class BatchScheduler(Framework):
    def __init__(
        self,
        store: JobStore,
        *,
        policy: str = "fifo",
        role: str = UNRESERVED,
        backoff: st.Backoff | None = None,
        decline_refuse_seconds: float = DECLINE_REFUSE_SECONDS,
        idle_refuse_seconds: float = IDLE_REFUSE_SECONDS,
        unfit_refuse_seconds: float = UNFIT_REFUSE_SECONDS,
        clock: Callable[[], float] = time.time,
        max_finished_jobs: int = 10_000,
        gang_hold_seconds: float = 120.0,
        keep_finished_seconds: float = 0.0,
    ) -> None:
        self.store = store
        # A gang that does not fit one round of offers asks the master to hold resources for
        # it as they free up (Scheduler.Hold), for at most this long; 0: never (it waits for a
        # round that fits, which a cluster kept busy by small jobs may never offer).
        self.gang_hold_seconds = gang_hold_seconds
        self._holds: dict[str, str] = {}  # job id -> its hold collecting at the master
        self._hold_refused: dict[str, float] = {}  # job id -> when the master refused one
        self._hold_notes: dict[str, str] = {}  # job id -> what became of its hold
        # Finished jobs kept (listed, their logs found), the oldest forgotten first: jobs are
        # free to submit, so their history may not grow for ever.
        self.max_finished_jobs = max_finished_jobs
        # ... and for at most this long after they ended (0: no bound but the count).
        self.keep_finished_seconds = keep_finished_seconds
        self.policy_name = policy
        self.sort_key = get_policy(policy)  # ValueError on a bad name, at start-up
        self.role = role or UNRESERVED
        self.backoff = backoff or st.Backoff()
        # What we refuse (offers we cannot use, what a launch leaves of an offer) is not
        # offered to us again for decline_refuse_seconds while work waits, idle_refuse_seconds
        # while none does (we suppress then too); refusals.py says why no launch waits on it.
        self.decline_refuse_seconds = decline_refuse_seconds
        self.idle_refuse_seconds = idle_refuse_seconds
        self.unfit_refuse_seconds = unfit_refuse_seconds  # offers no waiting instance fits
        self.clock = clock
        self.driver: Driver | None = None
        self.framework_id = store.framework_id()
        # Called with each instance's wait from submission to its first launch (the daemon
        # makes it a Prometheus histogram).
        self.observe_queue_wait: Callable[[float], None] = lambda seconds: None
        self.jobs: dict[str, batch_pb2.Job] = {job.job_id: job for job in store.load_jobs()}
        self._waiting = WaitingInstances()  # instances to launch, now or after a backoff
        self._keys: dict[str, tuple] = {}  # job id -> its place in the queue (the policy's key)
        self._needs: dict[str, str] = {}  # job id -> describe_needs of its spec (_note_waiting)
        self._unended: set[str] = set()  # ids of the jobs that have not ended
        self._commit_soon = False  # a commit is due at the end of this loop turn
        # job id -> the ids of the JOB_WAITING jobs that wait for it (dependencies.py)
        self._dependents: dict[str, set[str]] = {}
        for job in self.jobs.values():
            st.refresh(job, clock())  # counts follow the instances as stored
            self._track(job)
        for job in list(self.jobs.values()):  # what ended while a dependent was being stored
            if st.is_ended(job):
                self._dependency_ended(job)
        self._sequence = max((j.sequence for j in self.jobs.values()), default=0)
        self._watchers: dict[str, set[asyncio.Queue]] = {}
        self._suppressed: bool | None = None  # unknown until we tell the master
        self._wakeup: asyncio.TimerHandle | None = None  # the next retry is due
        self._unoffered_timer: asyncio.TimerHandle | None = None  # see _arm_unoffered
        self._rounds = 0  # rounds of offers so far
        self._wanted_for: frozenset[str] = frozenset()  # the jobs of the wants last told
        self._realign: asyncio.TimerHandle | None = None  # see _arm_realign
        self._notes: dict[str, str] = {}  # job id -> why it may wait long (from submit)
        # job id -> why the master refused its last launch (an ACL, a bad task): without it a
        # job the master will never run sits QUEUED with nothing said where its owner looks.
        self._launch_notes: dict[str, str] = {}
        self._facts: dict[str, AgentFacts] = {}  # agent id -> hostname and attributes
        self._head: str | None = None  # the first job left waiting last round (backfill.py)
        self._backfill_notes: dict[str, str] = {}  # head job id -> its reservation, in words
        # owner -> weight (1 unless set): owners share the offers by weighted DRF
        self.owner_weights: dict[str, float] = store.owner_weights()
        # job id -> what the latest offer round that left it waiting found (pending.py)
        self._round_reasons: dict[str, int] = {}
        self._offers_wanted = 0  # see _want_offers
        self._revive_asked = False  # a revive for new work is on its way (_want_offers)
        self.agents_lost = 0  # agents the master removed since we started (service.py)
        self._background: set[asyncio.Task] = set()
        self._log = log.bind(policy=policy)
        self.forget_old_jobs(by_age=True)

    # --- the book of jobs (called by the servicer) ------------------------------------------

    def forget_old_jobs(self, by_age: bool = False) -> list[str]:
        """Forgets the finished jobs (ended, no task left) beyond max_finished_jobs, the ones
        that ended first, and with `by_age` (a periodic sweep: it scans every job) those that
        ended more than keep_finished_seconds ago; returns their ids."""
        ended = len(self.jobs) - len(self._unended)
        oldest_kept = self.clock() - self.keep_finished_seconds
        by_age = by_age and bool(self.keep_finished_seconds) and ended > 0
        if ended <= self.max_finished_jobs and not (by_age and self._oldest_end() < oldest_kept):
            return []  # not too many, nor too old (the common case: no sort)
        finished = [
            j for j in self.jobs.values() if j.job_id not in self._unended and st.is_finished(j)
        ]
        finished.sort(key=lambda j: (j.ended_at, j.sequence))
        excess = max(0, len(finished) - self.max_finished_jobs)
        if by_age:
            while excess < len(finished) and finished[excess].ended_at < oldest_kept:
                excess += 1
        if excess <= 0:
            return []
        gone = [j.job_id for j in finished[:excess]]
        try:
            self.store.delete_jobs(gone)
        except sqlite3.Error as e:
            # Kept in memory as on disk: the next submission forgets them.
            self._log.warning("cannot forget finished jobs past the bound", error=str(e))
            return []
        for job_id in gone:
            del self.jobs[job_id]
            self._keys.pop(job_id, None)
            for notes in (
                self._notes,
                self._hold_notes,
                self._hold_refused,
                self._launch_notes,
                self._round_reasons,
            ):
                notes.pop(job_id, None)
        self._log.info("forgot finished jobs past the bound", count=len(gone))
        return gone

    def _oldest_end(self) -> float:
        return min(
            (j.ended_at for j in self.jobs.values() if j.job_id not in self._unended),
            default=float("inf"),
        )

    def submit(
        self, spec: batch_pb2.JobSpec, note: str = "", job_id: str | None = None
    ) -> batch_pb2.Job:
        """Stores a new QUEUED job (the spec is already validated) and asks for offers.
        `note` is added to its waiting message (e.g. why a gang cannot fit today); `job_id`
        is given by a caller that records it in the same commit (a schedule's run). Raises
        StoreUnavailable, having changed nothing, if the job cannot be written."""
        return self.submit_all([spec], notes=[note], job_ids=[job_id], graph=False)[0]

    def submit_all(
        self,
        specs: Sequence[batch_pb2.JobSpec],
        notes: Sequence[str] = (),
        job_ids: Sequence[str | None] = (),
        graph: bool = True,
    ) -> list[batch_pb2.Job]:
        """Stores new jobs (specs already validated) in one commit, all or none, and asks for
        offers. The specs come in an order where each follows the jobs of the list it waits
        for: an `after` naming one of them by its name means that job, as the latest of its
        name. Raises DependencyError (naming the job, of a `graph`) or StoreUnavailable,
        having changed nothing."""
        now = self.clock()
        known: dict[str, batch_pb2.Job] = self.jobs
        latest = deps.latest_by_name(known)  # once a graph: thousands of jobs may be known
        built: list[batch_pb2.Job] = []
        sequence = self._sequence
        for n, spec in enumerate(specs):
            sequence += 1
            spec_copy = batch_pb2.JobSpec()
            spec_copy.CopyFrom(spec)
            spec_copy.name = spec.name or "job"
            # Names become ids: the job waits for the jobs they named now, across restarts.
            try:
                after, pending = deps.resolve(spec.after, known, latest)
            except deps.DependencyError as e:
                if not graph:
                    raise
                raise type(e)(f"job {spec_copy.name!r}: {e}") from None
            del spec_copy.after[:]
            spec_copy.after.extend(after)
            job_id = job_ids[n] if n < len(job_ids) else None
            job = st.new_job(job_id or new_id("job"), spec_copy, sequence, now)
            if pending:
                job.waiting_for.extend(job_id for job_id, _ in pending)
                st.refresh(job, now)
                job.message = deps.waiting_message(job)
            elif spec.begin_at > now:
                when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(spec.begin_at))
                job.message = f"waiting for its begin time, {when}"
            note = notes[n] if n < len(notes) else ""
            if note:
                job.message = f"{job.message}; {note}"
            built.append(job)
            if len(specs) > 1:  # the graph's later jobs may name this one
                known = known if known is not self.jobs else dict(self.jobs)
                known[job.job_id] = job
                latest[spec_copy.name] = job  # the newest sequence of all
        for job in built:
            self.store.put_job(job)
        try:
            self.commit()  # stored before the caller hears of them: all, or none
        except BaseException:
            for job in built:
                self.store.discard(job.job_id)
            raise
        self._sequence = sequence
        for n, job in enumerate(built):
            note = notes[n] if n < len(notes) else ""
            if note:
                self._notes[job.job_id] = note
            self.jobs[job.job_id] = job
            self._track(job)
            spec = job.spec
            self._log.info(
                "job submitted",
                job_id=job.job_id,
                name=spec.name,
                instances=spec.instances,
                needs=describe_needs(spec),
                gang=spec.gang,
            )
            self._publish(job, description=f"submitted ({spec.instances} instances)")
        self.forget_old_jobs()
        self._want_offers()
        return built

    def get(self, job_id: str) -> batch_pb2.Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    def list_jobs(
        self, states: Sequence[int] = (), ended_after: float = 0.0, owner: str | None = None
    ) -> list[batch_pb2.Job]:
        jobs = sorted(self.jobs.values(), key=lambda j: j.sequence)
        return [
            j
            for j in jobs
            if (not states or j.state in states)
            and (not ended_after or j.ended_at >= ended_after)
            and (owner is None or j.spec.owner == owner)
        ]

    async def kill(self, job_id: str) -> batch_pb2.Job:
        """Marks the job KILLED, stored before its tasks are killed and the caller hears of
        it. Raises StoreUnavailable, the job as it was, if the kill cannot be written."""
        job = self.get(job_id)
        before = batch_pb2.Job()
        before.CopyFrom(job)  # a copy per kill, so that a kill that cannot be stored is undone
        try:
            to_kill = st.kill_job(job, self.clock())
        except ValueError as e:
            raise JobEnded(str(e)) from None
        self.store.put_job(job)
        try:
            self.commit()  # killed for good before the kills go out and the caller hears
        except BaseException:
            # Not killed: the caller is told to try again, so nothing may show the job killed
            # meanwhile. It stays noted, and the next commit writes it as it is again.
            job.CopyFrom(before)
            raise
        self._untrack(job_id)
        self._log.info("job killed", job_id=job_id, tasks=len(to_kill))
        self._dependency_ended(job)
        self._commit_quietly()
        if self.driver is not None:
            await self._release_hold(self.driver, job_id)
        self._publish(job, description="killed by request")
        # The job as the kill left it: while the kills go out, updates of tasks that end
        # change `job` (a caller asked how many tasks are being killed, not how many remain).
        answer = batch_pb2.Job()
        answer.CopyFrom(job)
        for _, attempt in to_kill:
            await self._kill_task(attempt.task_id, attempt.agent_id)
        await self.update_interest()
        return answer

    def _change(self, job: batch_pb2.Job, change: Callable[[], object]):
        """Runs `change` on the job and stores it before anything else hears of it; on a store
        failure the job is as it was and StoreUnavailable is raised. Returns what `change`
        returned."""
        before = batch_pb2.Job()
        before.CopyFrom(job)
        try:
            result = change()
        except st.NotNow as e:
            raise WrongJobState(str(e)) from None
        self.store.put_job(job)
        try:
            self.commit()
        except BaseException:
            job.CopyFrom(before)
            raise
        return result

    def hold(self, job_id: str, held: bool) -> batch_pb2.Job:
        """Holds a job that has not started, or releases a held one (WrongJobState if it has
        started, or is released but not held)."""
        job = self.get(job_id)

        def change() -> bool:
            if not st.hold(job, held):
                return False
            job.message = (
                HELD_MESSAGE
                if held
                else deps.waiting_message(job)
                if job.waiting_for
                else "waiting for offers"
            )
            return True

        if not self._change(job, change):
            return job
        if held:
            self._waiting.forget(job_id)  # nothing of it is placed while held
            self._drop_hold(job_id)
        else:
            self._track(job)
            self._want_offers()
        self._log.info("job held" if held else "job released", job_id=job_id)
        self._publish(job, description=job.message)
        return job

    def _drop_hold(self, job_id: str) -> None:
        """Gives up the job's gang hold at the master, if it has one (in the background)."""
        if job_id in self._holds and self.driver is not None:
            self._spawn(self._release_hold(self.driver, job_id))

    async def requeue(self, job_id: str) -> batch_pb2.Job:
        """Runs a RUNNING job's unfinished instances again (WrongJobState otherwise): its running
        tasks are killed, and their ends count against nothing."""
        job = self.get(job_id)
        to_kill = self._change(job, lambda: st.requeue(job, self.clock()))
        self._waiting.add_job(job)
        self._log.info("job requeued", job_id=job_id, killing=len(to_kill))
        self._publish(job, description="requeued by request")
        for _, attempt in to_kill:
            await self._kill_task(attempt.task_id, attempt.agent_id)
        self._want_offers()
        return job

    def update(
        self,
        job_id: str,
        *,
        priority: int | None = None,
        instances: int | None = None,
        time_limit_seconds: float | None = None,
    ) -> batch_pb2.Job:
        """Changes a job that has not started (validated by the caller; WrongJobState
        otherwise)."""
        job = self.get(job_id)
        self._change(
            job,
            lambda: st.update(
                job,
                priority=priority,
                instances=instances,
                time_limit_seconds=time_limit_seconds,
                now=self.clock(),
            ),
        )
        self._needs.pop(job_id, None)
        self._round_reasons.pop(job_id, None)
        self._drop_hold(job_id)  # asked for the gang's old shape
        if not job.held and not job.waiting_for:
            self._waiting.forget(job_id)
            self._track(job)  # its place in the queue and its instances as they are now
            self._want_offers()
        self._log.info("job updated", job_id=job_id, priority=priority, instances=instances)
        self._publish(job, description="updated by request")
        return job

    def explain(self, job: batch_pb2.Job) -> batch_pb2.Job:
        """Sets the job's pending_reason (pending.py) as of now; returns the job."""
        now = self.clock()
        driver = self.driver
        job.pending_reason = pending.reason(
            job,
            now,
            connected=driver is not None and driver.connected,
            room=st.room(job),
            ready=self._waiting.has_ready(job, now),
            last_round=self._round_reasons.get(job.job_id),
        )
        return job

    def watch(self, job_id: str) -> asyncio.Queue:
        """A queue of JobEvents for the job's changes; pass it to `unwatch` when done."""
        self.get(job_id)
        queue: asyncio.Queue = asyncio.Queue()
        self._watchers.setdefault(job_id, set()).add(queue)
        return queue

    def unwatch(self, job_id: str, queue: asyncio.Queue) -> None:
        watchers = self._watchers.get(job_id)
        if watchers is not None:
            watchers.discard(queue)
            if not watchers:
                del self._watchers[job_id]

    def _publish(
        self,
        job: batch_pb2.Job,
        *,
        index: int | None = None,
        attempt: batch_pb2.Attempt | None = None,
        description: str = "",
    ) -> None:
        watchers = self._watchers.get(job.job_id)
        if not watchers:
            return
        # The changed instance travels in `attempt`; repeating every instance in every event
        # would make watching a big job quadratic.
        event = batch_pb2.JobEvent(
            timestamp=self.clock(), description=description, job=st.without_instances(job)
        )
        if index is not None:
            event.instance = index
        if attempt is not None:
            event.attempt.CopyFrom(attempt)
        for queue in watchers:
            queue.put_nowait(event)

    # --- offers and interest -----------------------------------------------------------------

    def _track(self, job: batch_pb2.Job) -> None:
        """Takes a job that has not ended into the queue (its pending instances wait); a job
        waiting for others only into the book of dependents, until they end."""
        if st.is_ended(job):
            return
        self._unended.add(job.job_id)
        if job.waiting_for:  # held or not: its dependencies' ends are followed
            for dependency in job.waiting_for:
                self._dependents.setdefault(dependency, set()).add(job.job_id)
            return
        if job.held:
            return  # queued when released
        self._keys[job.job_id] = self.sort_key(
            QueuedJob(job.job_id, job.sequence, job.spec.priority, job.spec.duration_seconds)
        )
        self._waiting.add_job(job)

    def _untrack(self, job_id: str) -> None:
        """The job has ended: nothing of it waits any more."""
        self._unended.discard(job_id)
        self._waiting.forget(job_id)
        self._needs.pop(job_id, None)
        self._round_reasons.pop(job_id, None)

    def _dependency_ended(self, ended: batch_pb2.Job) -> None:
        """The jobs that waited for `ended`: queued once all they wait for ended as asked,
        cancelled (KILLED, saying why) at the first that did not, and theirs in turn."""
        for job_id in sorted(self._dependents.pop(ended.job_id, ())):
            job = self.jobs.get(job_id)
            if job is None or st.is_ended(job) or ended.job_id not in job.waiting_for:
                continue
            now = self.clock()
            condition = deps.condition_of(job, ended.job_id)
            if deps.met(condition, ended.state):
                job.waiting_for.remove(ended.job_id)
                st.refresh(job, now)
                job.message = (
                    deps.waiting_message(job)
                    if job.waiting_for
                    else HELD_MESSAGE
                    if job.held
                    else "waiting for offers"
                )
                self._save(job)
                if not job.waiting_for:
                    self._track(job)
                    self._want_offers()
                self._publish(job, description=f"{ended.job_id} ended as it waited for")
                continue
            st.kill_job(job, now)
            how = batch_pb2.JobState.Name(ended.state).removeprefix("JOB_")
            job.message = (
                f"cancelled: job {ended.job_id} ended {how}, and this job waited for it to "
                f"{deps.wanted(condition)}"
            )
            self._save(job)
            self._untrack(job_id)
            self._log.info("job cancelled", job_id=job_id, dependency=ended.job_id, ended=how)
            self._publish(job, description=job.message)
            self._dependency_ended(job)

    def _waiting_jobs(self) -> list[batch_pb2.Job]:
        """Jobs with instances waiting (ready or in backoff), in no particular order."""
        return [self.jobs[j] for j in self._waiting.job_ids() if j in self.jobs]

    def _queue(self) -> list[batch_pb2.Job]:
        """The waiting jobs in the order the policy serves them (only placement needs it)."""
        return sorted(self._waiting_jobs(), key=lambda j: self._keys[j.job_id])

    def has_ready_work(self, now: float | None = None) -> bool:
        now = self.clock() if now is None else now
        return any(
            st.room(job) != 0 and job.spec.begin_at <= now and self._waiting.has_ready(job, now)
            for job in self._waiting_jobs()
        )

    async def update_interest(self, revive: bool = False) -> None:
        """Revives when instances are ready to launch and suppresses when none are, so an
        idle batch framework costs the master nothing; arms a timer for the next retry."""
        self._arm_wakeup()
        driver = self.driver
        if driver is None or not driver.connected:
            return
        ready = self.has_ready_work()
        try:
            if ready and (revive or self._suppressed is not False):
                self._revive_asked = False  # this revive serves the work that asked for one
                wants, self._wanted_for = self._offer_wants()
                await driver.revive(*(wants or ()))
                self._suppressed = False
                self._arm_unoffered(wants is not None)
            elif not ready and self._suppressed is not True:
                await driver.suppress()
                self._suppressed = True
            elif ready:  # sent only when it differs from what the master counts
                wants, jobs = self._offer_wants()
                sent = await driver.want(*(wants or (None,)))
                # Unsent and for the same jobs, the master's count is what it was at the last
                # round, which said why what it could not place waits: nothing to check.
                if sent or jobs != self._wanted_for:
                    self._arm_unoffered(wants is not None)
                self._wanted_for = jobs
        except SchedulerError as e:
            self._log.warning("revive/suppress failed", error=str(e))
            self._suppressed = None

    def _offer_wants(self) -> tuple[tuple[Resources, Resources] | None, frozenset[str]]:
        """What the instances ready now need, in total and the least of each resource
        (wants.py; None: no limit): the master offers as many agents as cover it, none too
        small. And the jobs they are of."""
        ready = self._ready_counts(self.clock())
        return wants_of(ready), frozenset(job.job_id for job, _ in ready)

    def _ready_counts(self, now: float) -> list[tuple[batch_pb2.Job, int]]:
        """(job, instances ready to launch now) for the jobs with any."""
        ready = []
        for job in self._waiting_jobs():
            room = st.room(job)
            if room == 0 or job.spec.begin_at > now or st.is_ended(job) or job.held:
                continue
            if job.waiting_for or not job.counts.pending:
                continue
            count = job.counts.pending - self._waiting.in_backoff(job, now)
            if room is not None:
                count = min(count, room)
            if count > 0:
                ready.append((job, count))
        return ready

    def _arm_unoffered(self, sized: bool) -> None:
        """With wants told (`sized`), work that fits no agent's free room gets no offer at all,
        so no round says why it waits: check in a moment (_unoffered), unless an offer comes
        first. Armed when wants are sent or the jobs behind them change, not after each round:
        a round says why what it left waits, until new wants bring no round."""
        if self._unoffered_timer is not None:
            self._unoffered_timer.cancel()
            self._unoffered_timer = None
        if not sized:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # a unit test of the book alone
        self._unoffered_timer = loop.call_later(UNOFFERED_SECONDS, self._unoffered, self._rounds)

    def _unoffered(self, rounds: int) -> None:
        """No offer came since the wants were told: the ready jobs wait for room no agent has.
        Said as a round would (PENDING_RESOURCES, its message), and the first of them told to
        the master as unmet demand, for preemption."""
        self._unoffered_timer = None
        if rounds != self._rounds:
            return  # a round came and said why
        waiting = [job.job_id for job, _ in self._ready_counts(self.clock())]
        for job_id in waiting:
            self._note_waiting(self.jobs[job_id])
        if waiting and self.driver is not None and self.driver.connected:
            self._spawn(self._tell_demand(self.driver, waiting))

    def _arm_wakeup(self) -> None:
        now = self.clock()
        times = [
            t for t in (self._waiting.next_retry_at(j, now) for j in self._waiting_jobs()) if t
        ]
        times += [b for j in self._waiting_jobs() if (b := j.spec.begin_at) > now]
        if self._wakeup is not None:
            self._wakeup.cancel()
            self._wakeup = None
        if not times:
            return
        delay = max(0.0, min(times) - now)
        loop = asyncio.get_running_loop()
        self._wakeup = loop.call_later(delay, self._want_offers)

    def _want_offers(self) -> None:
        """Work arrived (a submission, a retry due): revive, which also clears our decline
        filters. Counted, so that an offer round already running, which may decline with a
        filter after this revive, revives once more when it ends. Work that arrives before
        the revive goes out is served by it: a burst of retries due at once sends one."""
        self._offers_wanted += 1
        if not self._revive_asked:
            self._revive_asked = self._spawn(self._revive_for_new_work())

    async def _revive_for_new_work(self) -> None:
        if not self._revive_asked:
            return  # a revive since then served this work too
        self._revive_asked = False
        await self.update_interest(revive=True)

    def _spawn(self, coroutine) -> bool:
        """Runs the coroutine as a task of its own; False if there is no loop to run it."""
        try:
            task = asyncio.get_running_loop().create_task(coroutine)
        except RuntimeError:
            coroutine.close()  # no loop (a unit test of the book alone): nothing to tell
            return False
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return True

    def close(self) -> None:
        for timer in (self._wakeup, self._realign):
            if timer is not None:
                timer.cancel()
        for task in list(self._background):
            task.cancel()
        self._commit_quietly()

    # --- persistence -------------------------------------------------------------------------

    def _save(self, job: batch_pb2.Job, instances: Sequence[int] | None = None) -> None:
        """Notes the job's change for the next commit: at the latest at the end of this turn
        of the event loop, earlier where something depends on it (before_acknowledging, a
        launch, an API answer)."""
        self.store.put_job(job, instances)
        if self._commit_soon:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.store.commit()  # no loop (a unit test of the book alone): at once
            return
        self._commit_soon = True
        loop.call_soon(self._commit_quietly)

    def commit(self) -> None:
        """Writes what is noted: the API calls it before it shows or changes jobs, so that
        nothing a caller hears of is lost in a crash. On a failure it logs and raises
        StoreUnavailable; what was noted stays for the next commit (and nothing is
        acknowledged before one succeeds)."""
        try:
            self.store.commit()
        except sqlite3.Error as e:
            self._log.error("cannot write the jobs; will try again", error=str(e))
            raise StoreUnavailable(str(e)) from e

    def _commit_quietly(self) -> None:
        """The end of a loop turn's commit: a failure is logged, and the next one retries."""
        self._commit_soon = False
        with contextlib.suppress(StoreUnavailable):
            self.commit()

    async def before_acknowledging(self, driver: Driver) -> None:
        """The updates about to be acknowledged are written first (raises if they cannot be:
        then they are not acknowledged, and the agents send them again). The store's own
        error, not StoreUnavailable: the SDK logs it, and no caller waits for an answer."""
        self.store.commit()

    # --- Framework callbacks -----------------------------------------------------------------

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        self.driver = driver
        if framework_id != self.framework_id:
            self.framework_id = framework_id
            self.store.set_framework_id(framework_id)
        self._suppressed = None  # a (re-)subscription revives us at the master
        self._holds.clear()  # holds end with the subscription they were asked on
        self._hold_notes.clear()
        self._log = log.bind(policy=self.policy_name, framework_id=framework_id)
        active = [a for j in self.jobs.values() for _, a in st.active_attempts(j)]
        self._log.info("subscribed", jobs=len(self.jobs), active_tasks=len(active))
        if active:
            # Explicitly too: a task recorded but never launched (we stopped in between) is
            # answered TASK_UNKNOWN and launched again; the others report their real state.
            try:
                await driver.reconcile([(a.task_id, a.agent_id) for a in active])
            except SchedulerError as e:
                self._log.warning("reconciliation failed", error=str(e))
        for job in self.jobs.values():
            if job.state == batch_pb2.JOB_KILLED:
                for _, attempt in st.active_attempts(job):
                    await self._kill_task(attempt.task_id, attempt.agent_id)
            else:
                for attempt in st.superseded_attempts(job):  # a requeue's kills, again
                    await self._kill_task(attempt.task_id, attempt.agent_id)
                if job.message.startswith(MASTER_LOST):
                    self._say(job, "the master is back: waiting for offers")
        await self.update_interest()

    async def on_disconnected(self, driver: Driver) -> None:
        """Jobs with instances to place say why nothing happens (`agora job submit --wait`
        shows it) until the master is back; running tasks run on."""
        since = time.strftime("%H:%M:%S")
        for job in self.jobs.values():
            if not st.is_ended(job) and job.counts.pending:
                self._say(job, f"{MASTER_LOST} at {since}; instances wait until it is back")

    def _say(self, job: batch_pb2.Job, message: str) -> None:
        """A passing note in the job's message, for its watchers (not stored: it is over
        when the daemon restarts)."""
        job.message = message
        self._publish(job, description=message)

    async def on_offers(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        for offer in offers:  # what constraints look at, kept for GROUP_BY and MAX_PER
            if offer.agent_id not in self._facts:
                self._facts[offer.agent_id] = offer_facts(offer)
        wanted = self._offers_wanted
        self._rounds += 1
        ordinary = [o for o in offers if not o.revocable]
        lent = [o for o in offers if o.revocable]
        try:
            if ordinary:
                await self._use_offers(driver, ordinary)
            if lent:  # after the ordinary ones: only what they left of revocable jobs
                await self._use_lent(driver, lent)
        finally:
            # Work that arrived while we launched and declined: its revive may have come
            # before our declines' filters; revive again so that they do not hide it.
            await self.update_interest(revive=self._offers_wanted != wanted)

    def _plan(self, offers: Sequence[common_pb2.Offer], lent: bool = False) -> Plan | None:
        """The ready instances placed into the offers in queue order; None if none is ready.
        Each job's instances are read lazily: only those placed (and the first that does not
        fit) get a task spec. `lent`: revocable offers, for revocable jobs only."""
        now = self.clock()
        groups, readers = [], []
        try:
            for job in self._queue():
                if lent and not job.spec.revocable:
                    continue
                room = st.room(job)
                if room == 0 or job.spec.begin_at > now or not self._waiting.has_ready(job, now):
                    continue
                gang = job.spec.gang and st.never_launched(job)
                reader = self._waiting.ready(job, now)
                readers.append(reader)
                indices = reader if room is None else itertools.islice(reader, room)
                groups.append(self._group(job, indices, gang))
            if not groups:
                return None
            fair = None
            if len({g.owner for g in groups}) > 1:
                fair = self._fair_share(offers)
            if lent:  # lent resources: no reservation is made on them, nor a head chosen
                return plan(offers, groups, self.role, self._facts, fair)
            reservation = self._reservation(offers, [g.job_id for g in groups], now)
            result = plan(offers, groups, self.role, self._facts, fair, reservation, now)
            # The next round's head: the first job of the queue left waiting (not a gang,
            # which its hold serves).
            waiting = set(result.waiting)
            self._head = next(
                (g.job_id for g in groups if g.job_id in waiting and not g.gang), None
            )
            return result
        finally:
            for reader in readers:
                reader.close()  # what they read waits on, as hints (waiting.py)

    def _reservation(
        self, offers: Sequence[common_pb2.Offer], queued: list[str], now: float
    ) -> Reservation | None:
        """Backfill (backfill.py): where and when last round's head job will fit, by our
        tasks' declared ends, while other jobs behind it are ready to take its room."""
        head = self._head
        if head is None or head not in queued:
            head = self._unplaceable_first(offers, queued)
        if head is None or queued.index(head) == len(queued) - 1:
            self._backfill_notes.clear()
            return None
        job = self.jobs[head]
        amounts = {n: a for (n, _), a in needs(job.spec).scalars.items()}
        free_now: dict[str, dict[str, float]] = {}
        for offer in offers:
            mine = free_now.setdefault(offer.agent_id, {})
            usable = Resources.from_proto(offer.resources).allocatable_to(self.role)
            for name in amounts:
                mine[name] = mine.get(name, 0.0) + usable.scalar(name)
        ends: dict[str, list[tuple[float, dict[str, float]]]] = {}
        for job_id in self._unended:
            other = self.jobs.get(job_id)
            limit = other.spec.time_limit_seconds if other is not None else 0.0
            if other is None or not limit or not other.counts.running:
                continue  # no declared end: assumed to run on
            held = {n: a for (n, _), a in needs(other.spec).scalars.items()}
            for _, attempt in st.active_attempts(other):
                start = attempt.started_at or attempt.launched_at
                ends.setdefault(attempt.agent_id, []).append((start + limit, held))
        reservation = reserve(head, amounts, free_now, ends, now)
        self._backfill_notes.clear()
        if reservation is not None:
            where = self._facts.get(reservation.agent_id)
            when = time.strftime("%H:%M:%S", time.localtime(reservation.at))
            self._backfill_notes[head] = (
                f"room reserved on {where.hostname if where else reservation.agent_id} "
                f"from {when} (backfill: only jobs that end by then use it meanwhile)"
            )
        return reservation

    def _unplaceable_first(
        self, offers: Sequence[common_pb2.Offer], queued: list[str]
    ) -> str | None:
        """The first job of the queue if no offer of this round could hold one of its
        instances: the head, when no earlier round found it. With offers sized by demand
        (wants.py) a big job that fits nowhere is not offered the scraps it cannot use, so
        the round that would have left it waiting may never come."""
        job = self.jobs.get(queued[0]) if queued else None
        if job is None or job.spec.gang:
            return None
        shape = shape_of(job.spec)
        return None if any(self._holds_one(o, [shape]) for o in offers) else job.job_id

    def _holds_one(self, offer: common_pb2.Offer, shapes: Iterable[Iterable]) -> bool:
        """Whether what the offer holds for our role fits an instance of one of `shapes`."""
        usable = Resources.from_proto(offer.resources).allocatable_to(self.role)
        return any(all(usable.scalar(n) + 1e-9 >= a for n, a in shape) for shape in shapes)

    def _usage(self) -> dict[str, dict[str, float]]:
        """owner -> what its jobs' launched and running instances hold (per resource); a
        scan of the jobs that have not ended, not of their instances (counts are kept)."""
        used: dict[str, dict[str, float]] = {}
        for job_id in self._unended:
            job = self.jobs.get(job_id)
            if job is None or not job.counts.running:
                continue
            mine = used.setdefault(job.spec.owner, {})
            for (name, _), amount in needs(job.spec).scalars.items():
                mine[name] = mine.get(name, 0.0) + amount * job.counts.running
        return used

    def _fair_share(self, offers: Sequence[common_pb2.Offer]) -> FairShare:
        """The owners' usage and weights, and the total their shares are of: what the round
        offers plus what our tasks hold."""
        used = self._usage()
        total: dict[str, float] = {}
        for offer in offers:
            for (name, _), amount in Resources.from_proto(offer.resources).scalars.items():
                total[name] = total.get(name, 0.0) + amount
        for mine in used.values():
            for name, amount in mine.items():
                total[name] = total.get(name, 0.0) + amount
        return FairShare(used, dict(self.owner_weights), total)

    def owners(self) -> list[batch_pb2.Owner]:
        """Every owner with a job that has not ended or a weight set, as it stands now."""
        used = self._usage()
        running: dict[str, int] = {}
        waiting: dict[str, int] = {}
        for job_id in self._unended:
            job = self.jobs.get(job_id)
            if job is not None:
                owner = job.spec.owner
                running[owner] = running.get(owner, 0) + job.counts.running
                waiting[owner] = waiting.get(owner, 0) + job.counts.pending
        total: dict[str, float] = {}
        for mine in used.values():
            for name, amount in mine.items():
                total[name] = total.get(name, 0.0) + amount
        fair = FairShare(used, dict(self.owner_weights), total)
        names = sorted(set(running) | set(self.owner_weights))
        return [
            batch_pb2.Owner(
                name=name,
                weight=self.owner_weights.get(name, 1.0),
                running=running.get(name, 0),
                pending=waiting.get(name, 0),
                cpus=used.get(name, {}).get("cpus", 0.0),
                mem=used.get(name, {}).get("mem", 0.0),
                gpus=used.get(name, {}).get("gpus", 0.0),
                share=fair.share(name),
            )
            for name in names
        ]

    def set_owner_weight(self, owner: str, weight: float) -> None:
        """Stored at once (StoreUnavailable if it cannot be), used from the next round."""
        try:
            self.store.set_owner_weight(owner, weight)
        except sqlite3.Error as e:
            raise StoreUnavailable(str(e)) from e
        if weight == 1.0:
            self.owner_weights.pop(owner, None)
        else:
            self.owner_weights[owner] = weight
        self._log.info("owner weight set", owner=owner, weight=weight)

    def _group(self, job: batch_pb2.Job, indices: Iterable[int], gang: bool) -> Group:
        """The job's instances at `indices` (read lazily) as placement takes them."""
        group = Group(
            job.job_id,
            self._wants(job, indices),
            gang,
            gpus=job.spec.task.gpus > 0,
            owner=job.spec.owner,
        )
        if job.spec.constraints:
            group.constraints = constraints_of(job.spec)
            if any(c.operator in COUNTING for c in group.constraints):
                # Only these count where the job runs (a scan of its instances).
                group.placed = [
                    self._facts.get(a.agent_id) or AgentFacts(a.agent_id, a.hostname)
                    for _, a in st.active_attempts(job)
                ]
        return group

    def _wants(self, job: batch_pb2.Job, indices: Iterable[int]) -> Iterator[Want]:
        for index in indices:
            yield Want(job.job_id, index, self.task_spec(job, index))

    async def _use_offers(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        result = self._plan(offers)
        if result is None:
            await self._decline(driver, offers, self.idle_refuse_seconds)
            return
        for job_id in result.waiting:
            self._note_waiting(
                self.jobs[job_id],
                behind=job_id in result.behind,
                broke=result.constrained.get(job_id, ""),
                owner_share=job_id in result.owner_share,
            )
        await self._tell_demand(driver, result.waiting)
        more = bool(result.waiting)
        for launch in result.launches:
            await self._launch(driver, launch, more)
        if more:
            unfit, rest = self._unfit(result.unused)
            await self._decline(driver, unfit, self.unfit_refuse_seconds)
            await self._decline(driver, rest, self.decline_refuse_seconds)
        else:
            await self._decline(driver, result.unused, self.idle_refuse_seconds)
        gangs = [
            j for j in result.waiting if self.jobs[j].spec.gang and st.never_launched(self.jobs[j])
        ]
        for job_id in gangs:
            await self._ask_hold(driver, self.jobs[job_id])
        if any(job_id not in self._holds for job_id in gangs):
            self._arm_realign()

    def _unfit(
        self, offers: Sequence[common_pb2.Offer]
    ) -> tuple[list[common_pb2.Offer], list[common_pb2.Offer]]:
        """The offers too small for an instance of every job with instances pending (ready,
        in backoff, or held back by max_running: room that reopens brings no revive), and the
        rest (refusals.py)."""
        shapes = {shape_of(job.spec) for job in self._waiting_jobs() if job.counts.pending}
        unfit: list[common_pb2.Offer] = []
        rest: list[common_pb2.Offer] = []
        for offer in offers:
            (rest if not shapes or self._holds_one(offer, shapes) else unfit).append(offer)
        return unfit, rest

    async def _use_lent(self, driver: Driver, offers: Sequence[common_pb2.Offer]) -> None:
        """Revocable offers: revocable jobs' instances that ordinary offers left waiting are
        placed on them; the rest is declined. No demand, hold or note comes of them: a job
        waits for ordinary resources, and is only lent these meanwhile."""
        result = self._plan(offers, lent=True)
        if result is None:
            await self._decline(driver, offers, self.idle_refuse_seconds)
            return
        for launch in result.launches:
            await self._launch(driver, launch, more_waiting=bool(result.waiting))
        await self._decline(driver, result.unused, self.decline_refuse_seconds)

    async def on_agent_lost(self, driver: Driver, agent_id: str) -> None:
        """Its tasks come as TASK_LOST updates. Counted: the Batch API drops the agent sizes it
        keeps for submissions when the count moves (service.py)."""
        self.agents_lost += 1
        self._facts.pop(agent_id, None)

    # --- gang holds ----------------------------------------------------------------------

    async def _ask_hold(self, driver: Driver, job: batch_pb2.Job) -> None:
        """Asks the master to collect a waiting gang's resources as they free up (once per
        job while the hold lives; a refused one is asked again after a hold's time)."""
        if not self.gang_hold_seconds or job.job_id in self._holds:
            return
        refused_at = self._hold_refused.get(job.job_id)
        if refused_at is not None and self.clock() - refused_at < self.gang_hold_seconds:
            return
        task = job.spec.task
        if task.ports:
            return  # holds collect scalars: such a gang waits for a round that fits
        size = Resources.of(cpus=task.cpus, mem=task.mem, disk=task.disk)
        try:
            hold_id = await driver.hold(
                job.spec.instances, size, timeout_seconds=self.gang_hold_seconds
            )
        except SchedulerError as e:
            self._hold_refused[job.job_id] = self.clock()
            self._hold_notes[job.job_id] = f"no hold: {e.message}"
            self._log.info("gang hold refused", job_id=job.job_id, error=e.message)
            self._note_waiting(job)  # said now: the next round may be a minute away
            return
        self._holds[job.job_id] = hold_id
        self._hold_notes[job.job_id] = "the master holds resources for it as they free up"
        self._log.info("gang hold asked", job_id=job.job_id, hold_id=hold_id)
        self._note_waiting(job)

    def _forget_hold(self, hold_id: str) -> str | None:
        """Forgets the hold (ended at the master); returns the job it was for."""
        job_id = next((j for j, h in self._holds.items() if h == hold_id), None)
        if job_id is not None:
            del self._holds[job_id]
            self._hold_notes.pop(job_id, None)
        return job_id

    async def _release_hold(self, driver: Driver, job_id: str) -> None:
        """Gives up the job's hold, if it has one (killed, or launched without it)."""
        hold_id = self._holds.get(job_id)
        if hold_id is not None:
            self._forget_hold(hold_id)
            with contextlib.suppress(SchedulerError):
                await driver.release_hold(hold_id)

    async def on_held_offers(
        self, driver: Driver, hold_id: str, offers: Sequence[common_pb2.Offer]
    ) -> None:
        """A gang's hold was met: place that gang first, then the rest as usual."""
        job_id = self._forget_hold(hold_id)  # met: nothing to release
        job = self.jobs.get(job_id or "")
        now = self.clock()
        if (
            job is None
            or not (job.spec.gang and st.never_launched(job))
            or job.held
            or job.spec.begin_at > now
        ):
            await self.on_offers(driver, offers)
            return
        group = self._group(job, st.ready_instances(job, now), gang=True)
        result = plan(offers, [group], self.role, self._facts)
        for launch in result.launches:
            await self._launch(driver, launch, more_waiting=True)
        launched = {id(o) for launch in result.launches for o in launch.offers}
        rest = [o for o in offers if id(o) not in launched]
        if rest:
            await self.on_offers(driver, rest)

    async def on_hold(self, driver: Driver, hold_id: str, state: str, message: str) -> None:
        self._forget_hold(hold_id)
        self._log.info("gang hold ended", hold_id=hold_id, state=state, message=message)
        if state != "MET":
            self._want_offers()  # try a round again (and ask for another hold if it waits)

    def _arm_realign(self) -> None:
        """A gang needs several agents offered in the same round. Agents freed at different
        times are declined, and so filtered, at different times: each would come back alone,
        forever out of step. Reviving a moment later clears the filters all at once, so the
        next round offers every free agent together."""
        if self._realign is not None:
            return

        def fire() -> None:
            self._realign = None
            self._want_offers()

        self._realign = asyncio.get_running_loop().call_later(REALIGN_SECONDS, fire)

    async def _launch(self, driver: Driver, launch, more_waiting: bool) -> None:
        offer = launch.offers[0]
        now = self.clock()
        # A kill, a hold or an update (fewer instances) may have come in while an earlier
        # launch of this round was awaited.
        wants = [w for w in launch.wants if self._still_wanted(w, now)]
        if len(wants) != len(launch.wants):
            keep = {w.spec.task_id for w in wants}
            launch.wants = wants
            launch.tasks = [t for t in launch.tasks if t.task_id in keep]
            if not wants:
                await self._decline(driver, launch.offers, 0)
                return
        touched: dict[str, list[int]] = {}  # job id -> instances launched
        attempts = []
        for want in launch.wants:
            job = self.jobs[want.job_id]
            attempt = st.record_launch(
                job,
                want.index,
                agent_id=launch.agent_id,
                hostname=offer.hostname,
                agent_address=offer.agent_address,
                framework_id=self.framework_id,
                now=now,
            )
            touched.setdefault(job.job_id, []).append(want.index)
            if attempt.attempt == 1 and job.submitted_at:
                self.observe_queue_wait(max(0.0, attempt.launched_at - job.submitted_at))
            attempts.append((job, want.index, attempt))
        # Recorded before the launch: if we stop right after it, reconciliation finds the task.
        for job_id, indices in touched.items():
            self.store.put_job(self.jobs[job_id], indices)
        try:
            self.commit()  # logs a failure itself
        except StoreUnavailable as e:
            self._undo_launch(launch, touched, f"not launched: cannot record it ({e})")
            await self._decline(driver, launch.offers, 0)
            return
        try:
            # What the tasks leave of the offers is refused like an unused offer: we placed
            # all we could in it, and it comes back as soon as anything frees up there.
            await driver.launch(
                launch.offers,
                launch.tasks,
                refuse_seconds=self.decline_refuse_seconds if more_waiting else None,
            )
        except SchedulerError as e:
            if e.code in _OUTCOME_UNKNOWN:
                # The master may have launched them: keep the attempts and ask. A task it
                # does not know comes back TASK_UNKNOWN and is launched again.
                self._log.warning(
                    "launch outcome unknown; reconciling", agent_id=launch.agent_id, error=str(e)
                )
                self._publish_launches(attempts, launch)
                with contextlib.suppress(SchedulerError):
                    await driver.reconcile([(t.task_id, launch.agent_id) for t in launch.tasks])
                # If the Accept never arrived its offers are still out, covering what we said
                # we want (the master would offer nothing else until they time out); declined,
                # they are gone either way (a decline of a used offer is skipped).
                await self._decline(driver, launch.offers, 0)
                return
            blamed = blamed_jobs(
                e.reason, e.metadata, {w.spec.task_id: w.job_id for w in launch.wants}
            )
            self._log.warning(
                "launch refused",
                agent_id=launch.agent_id,
                error=str(e),
                failing=sorted(blamed) or None,
            )
            # A refused Accept leaves its offers outstanding at the master: given back at once,
            # or every other framework would wait for them until the offer timeout.
            await self._decline(driver, launch.offers, 0)
            if not isinstance(e, OfferConflict):
                # Not routine: it stays in the job's message until a launch works.
                for job_id in touched:
                    self._launch_notes[job_id] = f"the master refused its last launch: {e.message}"
            self._undo_launch(launch, touched, f"launch refused: {e.message}")
            for job_id in sorted(blamed):
                self._fail_refused(self.jobs[job_id], e.message)
            for job_id in touched:
                if job_id in self._launch_notes and job_id not in blamed:
                    self._note_waiting(self.jobs[job_id])
            return
        self._log.debug(
            "launched", agent_id=launch.agent_id, tasks=[t.task_id for t in launch.tasks]
        )
        self._publish_launches(attempts, launch)
        for job_id in touched:
            self._launch_notes.pop(job_id, None)
            self._round_reasons.pop(job_id, None)
        for job_id in touched:  # a gang placed from ordinary offers needs its hold no more
            await self._release_hold(driver, job_id)
        for want in launch.wants:  # killed while we were launching
            if self.jobs[want.job_id].state == batch_pb2.JOB_KILLED:
                await self._kill_task(want.spec.task_id, launch.agent_id)

    def _still_wanted(self, want: Want, now: float) -> bool:
        job = self.jobs.get(want.job_id)
        return (
            job is not None
            and not job.held
            and want.index < len(job.instances)
            and st.is_ready(job, want.index, now)
        )

    def _fail_refused(self, job: batch_pb2.Job, reason: str) -> None:
        """The master refused the job's tasks for what they are: running them again would be
        refused again, so the job fails now, saying why, rather than wait for ever."""
        message = f"the master refused its tasks: {reason}"
        if not st.fail_pending(job, message, self.clock()):
            return
        self._save(job)
        self._launch_notes.pop(job.job_id, None)
        self._log.info("job failed: launch refused", job_id=job.job_id, reason=reason)
        self._publish(job, description=message)
        if st.is_ended(job):
            self._untrack(job.job_id)
            self._dependency_ended(job)

    def _publish_launches(self, attempts, launch) -> None:
        """Tells watchers of the attempts launched. Only once the Accept is answered: while
        the master and the agent start the tasks, a watcher's event would take CPU from them
        (on two cores, 1.4 ms of an idle cluster's submit -> start)."""
        where = launch.offers[0].hostname or launch.agent_id
        for job, index, attempt in attempts:
            self._publish(
                job,
                index=index,
                attempt=attempt,
                description=f"instance {index} attempt {attempt.attempt} launching on {where}",
            )

    def _undo_launch(self, launch, touched: dict[str, list[int]], why: str) -> None:
        """The launch did not happen: its attempts are undone and the instances wait again."""
        now = self.clock()
        for want in launch.wants:
            job = self.jobs[want.job_id]
            st.unrecord_launch(job, want.index, want.spec.task_id, now)
            if st.is_ready(job, want.index, now):
                self._waiting.add(job.job_id, want.index)
        for job_id, indices in touched.items():
            self._save(self.jobs[job_id], indices)
            self._publish(self.jobs[job_id], description=why)
        # Work again, as a retry: revive, so that what we refused meanwhile (scraps refused for
        # a minute that these instances could use) is offered again.
        self._want_offers()

    async def _decline(self, driver: Driver, offers, refuse_seconds: float) -> None:
        if not offers:
            return
        try:
            await driver.decline(offers, refuse_seconds=refuse_seconds)
        except SchedulerError as e:
            self._log.debug("decline failed", error=str(e))

    async def _tell_demand(self, driver: Driver, waiting: Iterable[str]) -> None:
        """Tells the master the instance this round of offers could not place, the highest
        priority first, then the smallest (none: nothing waits): where preemption is on, it
        is what the master makes room for. The driver sends it only when it changed."""
        specs = [self.jobs[job_id].spec for job_id in waiting if job_id in self.jobs]
        first = min(specs, key=lambda s: (-s.priority, s.task.cpus, s.task.mem), default=None)
        try:
            if first is None:
                await driver.demand(None)
            else:
                await driver.demand(needs(first), first.priority)
        except SchedulerError as e:
            self._log.debug("demand not told", error=str(e))

    def _note_waiting(
        self, job: batch_pb2.Job, behind: bool = False, broke: str = "", owner_share: bool = False
    ) -> None:
        # Every offer round that leaves the job waiting comes here: its needs are worded once.
        needs = self._needs.get(job.job_id)
        if needs is None:
            needs = self._needs[job.job_id] = describe_needs(job.spec)
        if job.spec.gang and st.never_launched(job):
            self._round_reasons[job.job_id] = batch_pb2.PENDING_GANG
            message = (
                f"waiting: gang of {job.spec.instances} launches only when all "
                f"instances ({needs} each) fit in one round of offers"
            )
        elif broke:
            self._round_reasons[job.job_id] = batch_pb2.PENDING_CONSTRAINT
            message = (
                f"waiting: agents offered have room, but its constraints rule them out: {broke}"
            )
        elif owner_share:
            self._round_reasons[job.job_id] = batch_pb2.PENDING_OWNER_SHARE
            who = job.spec.owner or "the anonymous owner"
            message = (
                f"waiting: {who} has its weighted share of the offers; other owners' jobs take "
                "the rest (fair share between owners)"
            )
        elif behind:
            self._round_reasons[job.job_id] = batch_pb2.PENDING_PRIORITY
            message = (
                f"waiting: jobs ahead of it in the queue took the offers with room for {needs}"
            )
        else:
            self._round_reasons[job.job_id] = batch_pb2.PENDING_RESOURCES
            message = f"waiting for offers with room for {needs}"
        for notes in (self._notes, self._hold_notes, self._launch_notes, self._backfill_notes):
            if job.job_id in notes:
                message += f"; {notes[job.job_id]}"
        if job.message != message and not st.is_ended(job):
            job.message = message
            self._save(job, ())
            self._publish(job, description=message)

    def task_spec(self, job: batch_pb2.Job, index: int, number: int | None = None) -> TaskSpec:
        """Instance `index`'s task for its attempt `number` (default: its next one, which
        reads the instance; with it given, a job without instances will do: a probe)."""
        task = job.spec.task
        if number is None:
            number = len(job.instances[index].attempts) + 1
        env = dict(task.env)
        env.update(AGORA_JOB_ID=job.job_id, AGORA_INSTANCE=str(index), AGORA_ATTEMPT=str(number))
        command = task.command
        if job.spec.instance_args:
            words = job.spec.instance_args[index]
            env["AGORA_ARGS"] = words
            if command.argv:
                command = common_pb2.CommandInfo()
                command.CopyFrom(task.command)
                command.argv.extend(shlex.split(words))  # checked at submission
        return TaskSpec(
            name=f"{job.spec.name}-{index}",
            cpus=task.cpus,
            mem=task.mem,
            disk=task.disk,
            gpus=task.gpus,
            ports=task.ports,
            command=command,
            env=env,
            task_id=st.task_id_for(job.job_id, index, number),
            labels={"job_id": job.job_id, "instance": str(index)},
            kill_grace_period_seconds=task.kill_grace_period_seconds,
            # The job's --priority: within the batch framework's role, a job of a higher one
            # that waits may have lower ones' tasks preempted for it (where that is on).
            priority=job.spec.priority,
            max_completion_seconds=job.spec.time_limit_seconds,
            image=task.container.image,
            network=task.container.network,
        )

    async def on_update(self, driver: Driver, status: common_pb2.TaskStatus) -> None:
        parsed = st.parse_task_id(status.task_id)
        job = self.jobs.get(parsed[0]) if parsed else None
        if job is None or parsed is None or not 0 <= parsed[1] < len(job.instances):
            if not st.is_terminal_task(status.state):
                # Not ours to run (e.g. its job was lost with an old state dir): stop it.
                self._log.warning("killing a task of no known job", task_id=status.task_id)
                await self._kill_task(status.task_id, status.agent_id)
            return
        index = parsed[1]
        known = any(a.task_id == status.task_id for a in job.instances[index].attempts)
        if not known:
            if not st.is_terminal_task(status.state):
                self._log.warning("killing a task of no known attempt", task_id=status.task_id)
                await self._kill_task(status.task_id, status.agent_id)
            return
        change = st.apply_update(job, index, status, now=self.clock(), backoff=self.backoff)
        if change.changed:
            # Written before the (implicit) acknowledgement: see before_acknowledging.
            self._save(job, [index])
            self._follow(job, index, change)
            self._log_update(job, status, change)
            attempt = next(a for a in job.instances[index].attempts if a.task_id == status.task_id)
            self._publish(job, index=index, attempt=attempt, description=change.description)
        if job.state == batch_pb2.JOB_KILLED and not st.is_terminal_task(status.state):
            await self._kill_task(status.task_id, status.agent_id)
        if change.retry_at is not None or change.instance_ended:
            await self.update_interest()

    def _follow(self, job: batch_pb2.Job, index: int, change: st.Change) -> None:
        """Keeps the queue in step with an applied update."""
        if change.retry_at is not None:
            self._waiting.add(job.job_id, index, job.instances[index].not_before)
            if change.retry_at <= self.clock():
                # Due at once (TASK_DROPPED or TASK_UNKNOWN use no retry; a zero backoff): new
                # work, with no timer to revive for it. Without a revive, our filters (what a
                # launch left of an offer while work waited) could hide the agent for seconds.
                self._want_offers()
        if change.job_ended:
            self._untrack(job.job_id)
            self._dependency_ended(job)

    def _log_update(self, job: batch_pb2.Job, status: common_pb2.TaskStatus, change) -> None:
        """Failures and a job's end at info; the rest of a task's life, a few lines a task
        (the job and WatchJob have it all), at debug."""
        failed = st.is_terminal_task(status.state) and status.state != common_pb2.TASK_FINISHED
        if failed or change.job_ended:
            self._log.info(
                "task update",
                job_id=job.job_id,
                status=describe_status(status),
                job_state=st.job_state_name(job.state),
            )
        else:
            self._log.debug("task update", task_id=status.task_id, state=status.state)

    async def _kill_task(self, task_id: str, agent_id: str) -> None:
        driver = self.driver
        if driver is None or not driver.connected:
            return  # re-sent from on_subscribed
        try:
            await driver.kill(task_id, agent_id or None)
        except SchedulerError as e:
            self._log.warning("kill failed", task_id=task_id, error=str(e))

    def forget_tasks(self, reason: str) -> None:
        """The master removed the framework (and killed its tasks): every running attempt is
        lost, and its instance is retried like any failure."""
        now = self.clock()
        for job in self.jobs.values():
            for index, attempt in st.active_attempts(job):
                status = common_pb2.TaskStatus(
                    task_id=attempt.task_id, state=common_pb2.TASK_LOST, message=reason
                )
                change = st.apply_update(job, index, status, now=now, backoff=self.backoff)
                self._save(job, [index])
                self._follow(job, index, change)
                self._publish(job, index=index, attempt=attempt, description=reason)
        self.framework_id = ""
        self.store.set_framework_id("")
