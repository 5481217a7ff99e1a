"""Cron: the batch daemon's schedules, fired on time into the scheduler's book of jobs.

The decisions (when, what a restart missed, what a collision does) are schedules.py's; this
keeps the schedules, persists them with the jobs they start (one commit, see store.py), and
runs the timer. The timer sleeps until the next fire time, at most MAX_SLEEP_SECONDS at once
so that a wall clock set forward or back is followed within that, and wakes early when a
schedule changes. Tests call `tick` with an injected clock instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from agora.common import new_id
from agora.frameworks.batch import schedules as sch
from agora.frameworks.batch import state as st
from agora.frameworks.batch.scheduler import BatchScheduler, JobEnded, StoreUnavailable
from agora.frameworks.batch.store import JobStore
from agora.v1 import batch_pb2

log = structlog.get_logger(__name__)

SCHEDULE_LABEL = "agora.schedule"  # on each job a schedule starts: the schedule's name
MAX_SLEEP_SECONDS = 30.0
MAX_SCHEDULES = 10_000


class UnknownSchedule(KeyError):
    """No schedule has that name."""


class ScheduleExists(ValueError):
    """A schedule of that name exists and replacing it was not asked for."""


class Cron:
    def __init__(self, scheduler: BatchScheduler, store: JobStore) -> None:
        self.scheduler = scheduler
        self.store = store
        self.clock = scheduler.clock
        self.schedules: dict[str, batch_pb2.Schedule] = {
            s.spec.name: s for s in store.load_schedules()
        }
        self._changed = asyncio.Event()

    # --- the API's calls ---------------------------------------------------------------------

    def put(self, spec: batch_pb2.ScheduleSpec, replace: bool = False) -> batch_pb2.Schedule:
        """Creates the schedule (validated by the caller), or replaces its spec keeping its
        runs; stored before it returns (StoreUnavailable: nothing changed)."""
        now = self.clock()
        old = self.schedules.get(spec.name)
        if old is not None and not replace:
            raise ScheduleExists(
                f"a schedule named {spec.name!r} exists: delete it first, or replace it"
            )
        if old is None and len(self.schedules) >= MAX_SCHEDULES:
            raise ScheduleExists(f"there are {MAX_SCHEDULES} schedules already: delete some")
        schedule = batch_pb2.Schedule()
        if old is not None:
            schedule.CopyFrom(old)
        else:
            schedule.created_at = now
            schedule.last_fire_time = now  # the first run is the first fire time from now
        schedule.spec.CopyFrom(spec)
        self._store(schedule, old)
        log.info(
            "schedule replaced" if old is not None else "schedule created",
            schedule=spec.name,
            cron=spec.cron,
            timezone=spec.timezone or "UTC",
            next_run_at=schedule.next_run_at,
        )
        return self.shown(schedule)

    def get(self, name: str) -> batch_pb2.Schedule:
        schedule = self.schedules.get(name)
        if schedule is None:
            raise UnknownSchedule(name)
        return schedule

    def suspend(self, name: str, suspended: bool) -> batch_pb2.Schedule:
        old = self.get(name)
        schedule = batch_pb2.Schedule()
        schedule.CopyFrom(old)
        if suspended != old.suspended:
            schedule.suspended = suspended
            if not suspended:
                # Resumed: what passed while suspended was not wanted (schedules.py's rule).
                schedule.last_fire_time = max(schedule.last_fire_time, self.clock())
            self._store(schedule, old)
            log.info("schedule suspended" if suspended else "schedule resumed", schedule=name)
        return self.shown(schedule)

    def delete(self, name: str) -> batch_pb2.Schedule:
        schedule = self.get(name)
        self.store.delete_schedule(name)
        try:
            self.scheduler.commit()
        except StoreUnavailable:
            self.store.discard_schedule(name)
            raise
        del self.schedules[name]
        log.info("schedule deleted", schedule=name)
        return self.shown(schedule)

    def shown(self, schedule: batch_pb2.Schedule) -> batch_pb2.Schedule:
        """A copy with each run's job as it is now."""
        out = batch_pb2.Schedule()
        out.CopyFrom(schedule)
        for run in out.runs:
            job = self.scheduler.jobs.get(run.job_id) if run.job_id else None
            if job is not None:
                run.state = job.state
                run.message = job.message
        return out

    def _store(
        self,
        schedule: batch_pb2.Schedule,
        old: batch_pb2.Schedule | None,
        write: Callable[[], object] | None = None,
    ) -> None:
        """Makes `schedule` (a new copy) the stored one, written by `write` (default: a plain
        commit; a run's submission commits its job with it); on StoreUnavailable nothing
        changed."""
        name = schedule.spec.name
        schedule.next_run_at = (
            0.0 if schedule.suspended else sch.next_fire(schedule.spec, schedule.last_fire_time)
        )
        self.store.put_schedule(schedule)
        try:
            (write or self.scheduler.commit)()
        except StoreUnavailable:
            if old is not None:
                self.store.put_schedule(old)  # noted again as it was (it may be noted already)
            else:
                self.store.discard_schedule(name)
            raise
        self.schedules[name] = schedule
        self._changed.set()

    # --- the timer ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Fires schedules on time until cancelled."""
        while True:
            try:
                await self.tick()
            except Exception:
                log.exception("cron tick failed; trying again")
            self._changed.clear()
            now = self.clock()
            times = [s.next_run_at for s in self.schedules.values() if not s.suspended]
            delay = min([MAX_SLEEP_SECONDS, *(t - now for t in times)])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), max(0.0, delay))

    async def tick(self) -> int:
        """Acts on every schedule that is due now; returns how many fired (run or skipped)."""
        fired = 0
        for schedule in list(self.schedules.values()):
            if self.schedules.get(schedule.spec.name) is not schedule:
                continue  # replaced or deleted while an earlier one fired
            try:
                due = sch.due(schedule, self.clock())
                if due.fire_time is not None and await self._fire(schedule, due):
                    fired += 1
            except Exception:  # one schedule's trouble does not stop the others
                log.exception("cannot fire a schedule", schedule=schedule.spec.name)
        return fired

    def _active_runs(self, schedule: batch_pb2.Schedule) -> list[str]:
        jobs = self.scheduler.jobs
        return [
            r.job_id for r in schedule.runs if r.job_id in jobs and not st.is_ended(jobs[r.job_id])
        ]

    async def _fire(self, schedule: batch_pb2.Schedule, due: sch.Due) -> bool:
        """Starts (or skips) the run of `due`, recorded with its job in one commit; False if
        that cannot be stored (the next tick tries again)."""
        assert due.fire_time is not None
        name = schedule.spec.name
        run = batch_pb2.ScheduleRun(
            scheduled_for=due.fire_time,
            fired_at=self.clock(),
            catch_up=due.catch_up,
            skipped=due.skipped,
        )
        collision = sch.Collision(run=not due.skipped)
        if not due.skipped:
            collision = sch.collide(schedule.spec.concurrency, self._active_runs(schedule))
            run.skipped = collision.skipped
        for job_id in collision.kill:  # replace: the earlier runs end before this one starts
            with contextlib.suppress(JobEnded):
                try:
                    await self.scheduler.kill(job_id)
                except StoreUnavailable:
                    return False
        if self.schedules.get(name) is not schedule:
            return False  # replaced, suspended or deleted meanwhile: the next tick decides
        fired = batch_pb2.Schedule()
        fired.CopyFrom(schedule)
        if run.skipped or not collision.run:
            sch.record(fired, run, due.missed)
            try:
                self._store(fired, schedule)
            except StoreUnavailable:
                return False
            log.info("scheduled run skipped", schedule=name, reason=run.skipped)
            return True
        run.job_id = new_id("job")
        sch.record(fired, run, due.missed)
        spec = batch_pb2.JobSpec()
        spec.CopyFrom(schedule.spec.job)
        spec.name = spec.name or name
        spec.labels[SCHEDULE_LABEL] = name
        try:  # the submission commits the schedule's record with the job
            self._store(fired, schedule, lambda: self.scheduler.submit(spec, job_id=run.job_id))
        except StoreUnavailable as e:
            log.warning("cannot start a scheduled run; will try again", schedule=name, error=str(e))
            return False
        log.info(
            "scheduled run started",
            schedule=name,
            job_id=run.job_id,
            scheduled_for=run.scheduled_for,
            catch_up=run.catch_up,
            missed=due.missed,
            replaced=collision.kill or None,
        )
        return True
