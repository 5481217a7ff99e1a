"""The `Batch` gRPC servicer: thin, typed, validating at the edge; the scheduler decides."""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable
from typing import Any

import grpc
import structlog

from agora.common import Resources, new_id, task_limits
from agora.common.authz import Action, AllowAll, Decision, refusal_message
from agora.common.leader import FollowingStub
from agora.common.redaction import without_environments
from agora.common.request_limits import MAX_NAME_LENGTH, LimitError
from agora.frameworks.batch import dependencies as deps
from agora.frameworks.batch import schedules as sch
from agora.frameworks.batch import state as st
from agora.frameworks.batch.cron import Cron, ScheduleExists, UnknownSchedule
from agora.frameworks.batch.placement import capacity, largest_fit
from agora.frameworks.batch.scheduler import (
    BatchScheduler,
    StoreUnavailable,
    UnknownJob,
    WrongJobState,
)
from agora.frameworks.batch.validation import SpecError, describe_needs, validate_spec
from agora.frameworks.sdk.ownership import acting_principal, may_act, refusal, stamp_owner
from agora.v1 import batch_pb2, batch_pb2_grpc, operator_pb2, operator_pb2_grpc

log = structlog.get_logger(__name__)

OPERATOR_TIMEOUT = 5.0
# How long the agents' sizes from one ListAgents serve the submissions that follow. A refusal
# is only ever made on a fresh answer, and an agent lost meanwhile (the scheduler hears of it)
# drops the kept one; so reusing it costs at most a job accepted that then waits, as when the
# master cannot be asked, and spares every submission a round trip to the master.
AGENT_SIZES_SECONDS = 2.0
MAX_OWNER_WEIGHT = 1_000_000.0
# A graph of jobs (SubmitJobs) is stored in one commit: bounded so that one call cannot hold
# the daemon's loop for long.
MAX_GRAPH_JOBS = 1_000
MAX_GRAPH_INSTANCES = 100_000


class BatchService(batch_pb2_grpc.BatchServicer):
    def __init__(
        self,
        scheduler: BatchScheduler,
        operator: operator_pb2_grpc.OperatorStub | FollowingStub | None,
        authorize: Callable[[str, Action, str], Decision] | None = None,
        cron: Cron | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.cron = cron or Cron(scheduler, scheduler.store)
        self.operator = operator
        self.authorize = authorize or AllowAll().authorize  # the daemon's ACLs (submit_jobs)
        # (when asked, the scheduler's agents_lost then, the answer) of the last ListAgents.
        self._sizes: tuple[float, int, list[tuple[str, Resources]]] | None = None

    def _acting(self, context) -> str:
        """Who acts: the caller, or the person the master relays a call for (the dashboard's
        job actions), whose ownership the master checked first."""
        driver = self.scheduler.driver
        return acting_principal(context, driver.master_principal if driver is not None else "")

    async def SubmitJob(self, request: batch_pb2.SubmitJobRequest, context):
        spec = request.spec
        note = await self._admitted(spec, context)
        job = await self._change(context, lambda: self.scheduler.submit(spec, note=note))
        return batch_pb2.SubmitJobResponse(job_id=job.job_id, job=self.scheduler.explain(job))

    async def SubmitJobs(self, request: batch_pb2.SubmitJobsRequest, context):
        """A graph of jobs: each checked as SubmitJob checks it, then all stored in one
        commit, so a refusal of any leaves none submitted."""
        specs = list(request.specs)
        context = _Suffixed(context, "; no job of the graph was submitted")
        try:
            order = graph_order(specs)
        except ValueError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        notes = {}
        for i, spec in enumerate(specs):
            notes[spec.name] = await self._admitted(spec, context, where=_where(i, spec))
        by_name = {spec.name: spec for spec in specs}
        jobs = await self._change(
            context,
            lambda: self.scheduler.submit_all(
                [by_name[name] for name in order], notes=[notes[name] for name in order]
            ),
        )
        return batch_pb2.SubmitJobsResponse(
            jobs=[st.without_instances(self.scheduler.explain(job)) for job in jobs]
        )

    async def _admitted(self, spec: batch_pb2.JobSpec, context, where: str = "") -> str:
        """Checks a job to be submitted (the caller may, it is well formed, the master would
        launch its tasks, an agent could hold an instance), aborting with the status that
        says otherwise (prefixed with `where`, which job of a graph); what to add to its
        waiting message."""
        probe = await self._checked(spec, context, where)
        role = spec.task.role or self.scheduler.role
        totals, kept = await self._agent_totals()
        too_big = self._too_big(spec, probe, totals, role)
        if too_big and kept:  # refused only on a fresh answer: an agent may have joined
            totals, _ = await self._agent_totals(fresh=True)
            too_big = self._too_big(spec, probe, totals, role)
        if too_big:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, where + too_big)
        if spec.gang and totals:
            # Accepted (agents may be added), but say so now rather than wait in silence.
            fits = capacity(totals, probe, role, limit=spec.instances)
            if fits < spec.instances:
                return (
                    f"the {len(totals)} agent(s) registered now could hold at most {fits} "
                    f"of its {spec.instances} instances at once, even when idle"
                )
        return ""

    async def _checked(self, spec: batch_pb2.JobSpec, context, where: str = ""):
        """The caller may submit the job, and it is well formed (its owner stamped on it); the
        task spec of its first instance. Aborts with the status that says otherwise, its
        message prefixed with `where`."""
        principal = self._acting(context)
        role = spec.task.role or self.scheduler.role
        decision = self.authorize(principal, Action.SUBMIT_JOB, role)
        if not decision.allowed:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                where + refusal_message(principal, Action.SUBMIT_JOB, role, decision),
            )
        stamp_owner(spec.labels, principal)
        # Fair share is between principals; without TLS (anonymous) a caller may say whose.
        spec.owner = principal or spec.owner
        try:
            validate_spec(spec, self.scheduler.role)
            self._check_master_limits(spec)
            return self.scheduler.task_spec(_probe(spec), 0, number=1)
        except (SpecError, ValueError) as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{where}{e}")

    def _check_master_limits(self, spec: batch_pb2.JobSpec) -> None:
        """The job's tasks within the limits the master checks at launch (task_limits.py), so
        a job the master would refuse is refused now, saying why, not queued to fail; checked
        on its longest tasks: the last instance's (the longest name) and the one with the
        longest per-instance arguments. The job's own labels are stored and shown: the same
        limits."""
        job = _probe(spec)
        longest = {spec.instances - 1}
        if spec.instance_args:  # and the instance with the longest arguments
            args = spec.instance_args
            longest.add(max(range(len(args)), key=lambda i: len(args[i])))
        try:
            for index in sorted(longest):
                probe = self.scheduler.task_spec(job, index, number=1)
                task_limits.check_task_size(probe.to_task_info("", Resources()))
            task_limits.check_labels(spec.labels)
        except LimitError as e:
            raise SpecError(f"the master would refuse this job's tasks: {e}") from None

    @staticmethod
    def _shown(message, job: batch_pb2.Job, principal: str):
        """`message` (the job, or an event of it) as `principal` may see it: without
        environment values unless it owns the job (ownership.py)."""
        return message if may_act(principal, job.spec.labels) else without_environments(message)

    async def _agent_totals(self, fresh: bool = False) -> tuple[list[tuple[str, Resources]], bool]:
        """(name, total resources) of each registered agent; empty if we cannot tell (no agents
        yet, or the master unreachable): then a job is accepted and waits. With it, whether the
        answer was kept from an earlier call (see AGENT_SIZES_SECONDS) rather than asked now."""
        if self.operator is None:
            return [], False
        now = time.monotonic()
        kept = self._sizes
        if (
            not fresh
            and kept is not None
            and now - kept[0] < AGENT_SIZES_SECONDS
            and kept[1] == self.scheduler.agents_lost
        ):
            return kept[2], True
        lost = self.scheduler.agents_lost
        try:
            reply = await self.operator.ListAgents(
                operator_pb2.ListAgentsRequest(), timeout=OPERATOR_TIMEOUT
            )
        except grpc.aio.AioRpcError as e:
            log.warning("cannot ask the master for agent sizes", error=e.details())
            return [], False
        totals = [
            (a.info.hostname or a.info.agent_id, Resources.from_proto(a.info.resources))
            for a in reply.agents
        ]
        self._sizes = (now, lost, totals) if totals else None
        return totals, False

    def _too_big(self, spec: batch_pb2.JobSpec, probe, totals, role: str) -> str:
        """Why no agent could ever run one instance, or "" if one could (or we cannot tell)."""
        if not totals or largest_fit(totals, probe, role):
            return ""
        name, total = max(totals, key=lambda t: (t[1].scalar("cpus"), t[1].scalar("mem")))
        usable = total.allocatable_to(role)
        has = ";".join(
            f"{r}:{usable.scalar(r):g}" for r in ("cpus", "mem", "disk") if usable.scalar(r)
        )
        if spec.task.ports:
            has += f";ports:{sum(e - b + 1 for b, e in usable.port_ranges())}"
        return (
            f"each instance needs {describe_needs(spec)} but no agent has that much; the "
            f"largest agent ({name}) has {has or 'nothing'}: ask for less, or add a "
            "bigger agent"
        )

    async def GetJob(self, request: batch_pb2.GetJobRequest, context):
        job = await self._job(request.job_id, context)
        await self._commit(context)
        return self._shown(self.scheduler.explain(job), job, self._acting(context))

    async def ListJobs(self, request: batch_pb2.ListJobsRequest, context):
        await self._commit(context)
        principal = self._acting(context)
        # Without instances unless asked: copying them all to delete them after made every
        # poll of a big job's progress cost time in proportion to its instances.
        whole = request.include_instances
        explain = self.scheduler.explain
        matching = self.scheduler.list_jobs(
            list(request.states),
            ended_after=request.ended_after,
            owner=request.owner if request.HasField("owner") else None,
        )
        # The newest `limit`, cut before any is copied: a history page of 200 out of 10,000
        # kept jobs copies 200 jobs' instances.
        kept = matching[-request.limit :] if request.limit else matching
        jobs = [
            self._shown(explain(j) if whole else st.without_instances(explain(j)), j, principal)
            for j in kept
        ]
        return batch_pb2.ListJobsResponse(jobs=jobs, total=len(matching))

    async def KillJob(self, request: batch_pb2.KillJobRequest, context):
        await self._owned(request.job_id, "kill", context)
        job = await self._change(context, lambda: self.scheduler.kill(request.job_id))
        return batch_pb2.KillJobResponse(job=job)

    async def HoldJob(self, request: batch_pb2.HoldJobRequest, context):
        job = await self._owned(request.job_id, "hold" if request.hold else "release", context)
        job = await self._change(context, lambda: self.scheduler.hold(job.job_id, request.hold))
        return self.scheduler.explain(job)

    async def RequeueJob(self, request: batch_pb2.RequeueJobRequest, context):
        job = await self._owned(request.job_id, "requeue", context)
        job = await self._change(context, lambda: self.scheduler.requeue(job.job_id))
        return self.scheduler.explain(job)

    async def UpdateJob(self, request: batch_pb2.UpdateJobRequest, context):
        job = await self._owned(request.job_id, "update", context)
        if not (
            request.HasField("priority")
            or request.HasField("instances")
            or request.HasField("time_limit_seconds")
        ):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "nothing to change: give priority, instances or time_limit_seconds",
            )
        changed = batch_pb2.JobSpec()
        changed.CopyFrom(job.spec)
        del changed.after[:]  # checked at submission; they are ids now
        for name in ("priority", "instances", "time_limit_seconds"):
            if request.HasField(name):
                setattr(changed, name, getattr(request, name))
        try:
            validate_spec(changed, self.scheduler.role)
            self._check_master_limits(changed)
        except SpecError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        job = await self._change(
            context,
            lambda: self.scheduler.update(
                job.job_id,
                priority=request.priority if request.HasField("priority") else None,
                instances=request.instances if request.HasField("instances") else None,
                time_limit_seconds=request.time_limit_seconds
                if request.HasField("time_limit_seconds")
                else None,
            ),
        )
        return self.scheduler.explain(job)

    @staticmethod
    async def _change(context, change: Callable[[], Any]) -> Any:
        """Runs a change (a submission, or a change of a job; awaited if it is a coroutine)
        and returns what it returns. A job in a state it makes no sense in, or one waited for
        that can never end as asked, is FAILED_PRECONDITION; a dependency that is no job
        INVALID_ARGUMENT; a store that cannot be written UNAVAILABLE."""
        try:
            result = change()
            return await result if inspect.isawaitable(result) else result
        except (WrongJobState, deps.DependencyUnmet) as e:  # JobEnded among them
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except deps.DependencyError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        raise AssertionError("unreachable: context.abort raises")

    async def _owned(self, job_id: str, action: str, context) -> batch_pb2.Job:
        """The job, if the caller may change it (its owner); aborts otherwise."""
        job = await self._job(job_id, context)
        principal = self._acting(context)
        if not may_act(principal, job.spec.labels):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                refusal(principal, f"{action} job", job.job_id, job.spec.labels),
            )
        return job

    async def WatchJob(self, request: batch_pb2.WatchJobRequest, context):
        job = await self._job(request.job_id, context)
        queue = self.scheduler.watch(job.job_id)
        try:
            first = batch_pb2.JobEvent(
                timestamp=self.scheduler.clock(),
                description=f"job is {st.job_state_name(job.state)}",
            )
            principal = self._acting(context)
            first.job.CopyFrom(self._shown(self.scheduler.explain(job), job, principal))
            await self._commit(context)
            yield first
            # The snapshot sent, not the live job: it may have ended while `first` went out,
            # and then its last event is in the queue, to be sent before the watch ends.
            if st.is_finished(first.job):
                return
            while True:
                event = await queue.get()
                await self._commit(context)
                event.job.pending_reason = self.scheduler.explain(job).pending_reason
                yield self._shown(event, event.job, principal)
                if st.is_finished(event.job):
                    return
        finally:
            self.scheduler.unwatch(job.job_id, queue)

    # --- owners' fair share ---------------------------------------------------------------

    async def ListOwners(self, request: batch_pb2.ListOwnersRequest, context):
        return batch_pb2.ListOwnersResponse(owners=self.scheduler.owners())

    async def SetOwnerWeight(self, request: batch_pb2.SetOwnerWeightRequest, context):
        principal = self._acting(context)
        role = self.scheduler.role
        decision = self.authorize(principal, Action.SET_WEIGHT, role)
        if not decision.allowed:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                refusal_message(principal, Action.SET_WEIGHT, role, decision),
            )
        weight = request.weight
        if not (math.isfinite(weight) and 0 < weight <= MAX_OWNER_WEIGHT):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"weight must be a number above 0 and at most {MAX_OWNER_WEIGHT:g}, got {weight:g}",
            )
        if len(request.owner) > MAX_NAME_LENGTH:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"owner: at most {MAX_NAME_LENGTH} characters",
            )
        try:
            self.scheduler.set_owner_weight(request.owner, weight)
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))
        owners = {o.name: o for o in self.scheduler.owners()}
        return owners.get(request.owner) or batch_pb2.Owner(name=request.owner, weight=weight)

    # --- cron schedules --------------------------------------------------------------------

    async def PutSchedule(self, request: batch_pb2.PutScheduleRequest, context):
        spec = request.spec
        try:
            sch.validate(spec)
        except sch.ScheduleError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
        spec.job.name = spec.job.name or spec.name
        probe = await self._checked(spec.job, context)
        totals, _ = await self._agent_totals(fresh=True)
        too_big = self._too_big(spec.job, probe, totals, spec.job.task.role or self.scheduler.role)
        if too_big:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, too_big)
        old = self.cron.schedules.get(spec.name)
        if old is not None and request.replace:
            await self._may_change(old, "replace", context)
        try:
            return self.cron.put(spec, request.replace)
        except ScheduleExists as e:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, str(e))
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    async def ListSchedules(self, request: batch_pb2.ListSchedulesRequest, context):
        principal = self._acting(context)
        return batch_pb2.ListSchedulesResponse(
            schedules=[
                self._schedule_shown(s, principal) for _, s in sorted(self.cron.schedules.items())
            ]
        )

    async def GetSchedule(self, request: batch_pb2.GetScheduleRequest, context):
        schedule = await self._schedule(request.name, context)
        return self._schedule_shown(schedule, self._acting(context))

    async def SuspendSchedule(self, request: batch_pb2.SuspendScheduleRequest, context):
        schedule = await self._schedule(request.name, context)
        await self._may_change(schedule, "suspend" if request.suspended else "resume", context)
        try:
            return self.cron.suspend(request.name, request.suspended)
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    async def DeleteSchedule(self, request: batch_pb2.DeleteScheduleRequest, context):
        schedule = await self._schedule(request.name, context)
        await self._may_change(schedule, "delete", context)
        try:
            return batch_pb2.DeleteScheduleResponse(schedule=self.cron.delete(request.name))
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    def _schedule_shown(self, schedule: batch_pb2.Schedule, principal: str) -> batch_pb2.Schedule:
        """With its runs' jobs as they are; its job's environment values for its owner only."""
        shown = self.cron.shown(schedule)
        if may_act(principal, schedule.spec.job.labels):
            return shown
        return without_environments(shown)

    async def _schedule(self, name: str, context) -> batch_pb2.Schedule:
        try:
            return self.cron.get(name)
        except UnknownSchedule:
            await context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no schedule {name!r}; `agora job schedules` lists them",
            )
        raise AssertionError("unreachable: context.abort raises")

    async def _may_change(self, schedule: batch_pb2.Schedule, action: str, context) -> None:
        principal = self._acting(context)
        if not may_act(principal, schedule.spec.job.labels):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                refusal(
                    principal,
                    f"{action} schedule",
                    schedule.spec.name,
                    schedule.spec.job.labels,
                ),
            )

    async def _commit(self, context) -> None:
        """Writes what the scheduler noted before a job is shown, so that what a caller sees
        survives a crash; UNAVAILABLE if it cannot be written (the caller tries again)."""
        try:
            self.scheduler.commit()
        except StoreUnavailable as e:
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(e))

    async def _job(self, job_id: str, context) -> batch_pb2.Job:
        if not job_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "job_id is required")
        try:
            return self.scheduler.get(job_id)
        except UnknownJob:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"no job {job_id!r}; `agora job list` shows the jobs"
            )
        raise AssertionError("unreachable: context.abort raises")


def graph_order(specs: list[batch_pb2.JobSpec]) -> list[str]:
    """The graph's job names in an order where each follows those it waits for; ValueError
    saying what makes it not one graph as a whole: none or too many jobs or instances, a job
    without a name or two of one name, a cycle. Each job is then checked as SubmitJob checks
    it."""
    if not specs:
        raise ValueError("no jobs: give at least one")
    if len(specs) > MAX_GRAPH_JOBS:
        raise ValueError(f"{len(specs)} jobs; submit at most {MAX_GRAPH_JOBS} at once")
    instances = sum(spec.instances for spec in specs)
    if instances > MAX_GRAPH_INSTANCES:
        raise ValueError(
            f"{instances} instances in all; submit at most {MAX_GRAPH_INSTANCES} at once "
            "(split the graph: later jobs may name earlier ones by name)"
        )
    seen: set[str] = set()
    for i, spec in enumerate(specs):
        if not spec.name:
            raise ValueError(
                f"jobs[{i}]: each job of a graph needs a name (the others name it in after)"
            )
        if len(spec.name) > MAX_NAME_LENGTH:
            raise ValueError(
                f"jobs[{i}]: its name is {len(spec.name)} characters; at most {MAX_NAME_LENGTH}"
            )
        if spec.name in seen:
            raise ValueError(
                f"{_where(i, spec)}another job of the graph has that name; give each its own"
            )
        seen.add(spec.name)
    return deps.submission_order({spec.name: [d.job for d in spec.after] for spec in specs})


class _Suffixed:
    """A servicer context whose refusals (abort) end with `suffix`: the graph's say that
    nothing of it was stored, whichever check refused it."""

    def __init__(self, context, suffix: str) -> None:
        self._context = context
        self._suffix = suffix

    def __getattr__(self, name: str):
        return getattr(self._context, name)

    async def abort(self, code, details: str = "", *args):
        await self._context.abort(code, details + self._suffix, *args)


def _where(index: int, spec: batch_pb2.JobSpec) -> str:
    """Which job of a graph a message is about (its name cut short: it may be anything)."""
    name = spec.name if len(spec.name) <= 60 else spec.name[:57] + "..."
    return f"jobs[{index}] ({name}): "


def _probe(spec: batch_pb2.JobSpec) -> batch_pb2.Job:
    """The job as the scheduler will store it, without its instances (a 10,000-instance job
    need not be built twice to check one task), under an id as long as a real one's."""
    job = batch_pb2.Job(job_id=new_id("job"))
    job.spec.CopyFrom(spec)
    return job
