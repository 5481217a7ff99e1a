"""The dashboard's batch routes: the jobs, one job, the finished jobs' history and one cron
schedule, and the actions on them (hold, release, requeue, kill or update a job; suspend,
resume or delete a schedule; set an owner's weight), each one call of the batch framework's own
API, as `agora job` makes it.

A job or a schedule is changed by its owner alone (calls.py: checked here against the owner the
batch framework reports, then relayed by the master); an owner's weight needs set_weights on the
batch framework's role, as SetOwnerWeight does. Without a batch framework there is no action.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from agora.common.durations import DurationError, parse_duration
from agora.common.http import http_principal
from agora.master.authz import Action
from agora.master.dashboard.calls import ApiError, call, check_owner, relayed, shown
from agora.v1 import batch_pb2, batch_pb2_grpc

if TYPE_CHECKING:
    from agora.master.dashboard.app import Dashboard

BATCH = "the batch framework"
HISTORY_SHOWN = 200  # finished jobs on the history page, the latest
ENDED = [batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED]
NOT_STARTED = (batch_pb2.JOB_QUEUED, batch_pb2.JOB_WAITING)
INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)


def duration(text: str) -> float:
    """Seconds from `90`, `90s`, `10m`, `1h30m` or `2d`, as `agora job history --since` reads
    them (a 400 otherwise)."""
    try:
        return parse_duration(text)
    except DurationError as e:
        raise ApiError(400, str(e)) from None


def _number(body: dict, name: str, whole: bool, bounds: tuple[float, float]) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    kind = "a whole number" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ApiError(400, f"{name} must be {kind}, got {value!r}")
    if (whole and value != int(value)) or not bounds[0] <= value <= bounds[1]:
        raise ApiError(400, f"{name} must be {kind} from {bounds[0]:g} to {bounds[1]:g}")
    return int(value) if whole else float(value)


def update_request(job_id: str, body: dict) -> batch_pb2.UpdateJobRequest:
    """An UpdateJob of what the body names (priority, instances, time_limit_seconds); the batch
    framework decides whether the values make sense for the job."""
    request = batch_pb2.UpdateJobRequest(job_id=job_id)
    priority = _number(body, "priority", True, INT32)
    instances = _number(body, "instances", True, UINT32)
    limit = _number(body, "time_limit_seconds", False, (0, math.inf))
    if priority is not None:
        request.priority = int(priority)
    if instances is not None:
        request.instances = int(instances)
    if limit is not None:
        request.time_limit_seconds = limit
    if len(request.ListFields()) == 1:
        raise ApiError(400, "nothing to change: give priority, instances or time_limit_seconds")
    return request


def updated(job: batch_pb2.Job) -> str:
    spec = job.spec
    limit = f"{spec.time_limit_seconds:g} s" if spec.time_limit_seconds else "none"
    return (
        f"job {job.job_id} updated: priority {spec.priority}, {spec.instances} instance(s), "
        f"time limit {limit}"
    )


class BatchRoutes:
    """The batch framework's reads and actions, served by `dashboard`."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard

    def reads(self) -> dict[str, Callable[[web.Request], Awaitable[object]]]:
        return {
            "/api/jobs": self.jobs,
            "/api/jobs/{job_id}": self.job,
            "/api/job-history": self.history,
            "/api/schedules/{name}": self.schedule,
        }

    def actions(self) -> dict[str, Callable[[web.Request, dict], Awaitable[dict]]]:
        return {
            "/api/jobs/{job_id}/{verb}": self.job_action,
            "/api/schedules/{name}/{verb}": self.schedule_action,
            "/api/owners/weight": self.owner_weight,
        }

    async def _batch(self) -> tuple[batch_pb2_grpc.BatchStub, str] | None:
        """The batch framework's API and its role, or None when none is registered."""
        found = await self.dashboard.framework_api("batch")
        if found is None:
            return None
        channel, framework = found
        return batch_pb2_grpc.BatchStub(channel), framework.info.role

    async def _stub(self) -> batch_pb2_grpc.BatchStub:
        found = await self._batch()
        if found is None:
            raise ApiError(404, "no batch framework is registered")
        return found[0]

    async def _relayed(self, request: web.Request, method, message, instead: str):
        """`method(message)` relayed by the master for the page's caller (calls.relayed)."""
        principal, secure = http_principal(request), self.dashboard.credentials.secure
        return await relayed(BATCH, method, message, principal, instead, secure=secure)

    # reads --------------------------------------------------------------------------------

    async def jobs(self, request: web.Request) -> dict:
        found = await self._batch()
        if found is None:
            return {"available": False, "message": "no batch framework is registered"}
        stub = found[0]
        reply = await call(BATCH, stub.ListJobs, batch_pb2.ListJobsRequest())
        owners = await call(BATCH, stub.ListOwners, batch_pb2.ListOwnersRequest())
        schedules = await call(BATCH, stub.ListSchedules, batch_pb2.ListSchedulesRequest())
        return {
            "available": True,
            "jobs": [shown(j) for j in reply.jobs],
            "owners": [shown(o) for o in owners.owners],
            "schedules": [shown(s) for s in schedules.schedules],
        }

    async def job(self, request: web.Request) -> dict:
        """One job, from the batch framework as `agora job status` reads it: its instances and
        each attempt's task (with its framework id, for the task's page)."""
        stub = await self._stub()
        job_id = request.match_info["job_id"]
        return shown(await call(BATCH, stub.GetJob, batch_pb2.GetJobRequest(job_id=job_id)))

    async def history(self, request: web.Request) -> dict:
        """The jobs that ended, with their instances, as `agora job history [--since D]
        [--owner X]` lists them: the latest HISTORY_SHOWN."""
        stub = await self._stub()
        since = request.query.get("since", "").strip()
        owner = request.query.get("owner", "").strip()
        listing = batch_pb2.ListJobsRequest(
            states=ENDED,
            include_instances=True,
            ended_after=self.dashboard.clock.wall() - duration(since) if since else 0.0,
            limit=HISTORY_SHOWN,
        )
        if owner:
            listing.owner = owner
        reply = await call(BATCH, stub.ListJobs, listing)
        # A batch framework older than `limit` sends every job and no total.
        jobs = reply.jobs[-HISTORY_SHOWN:]
        return {"jobs": [shown(j) for j in jobs], "total": max(reply.total, len(reply.jobs))}

    async def _find_schedule(self, stub: batch_pb2_grpc.BatchStub, name: str) -> batch_pb2.Schedule:
        listing = await call(BATCH, stub.ListSchedules, batch_pb2.ListSchedulesRequest())
        for schedule in listing.schedules:
            if schedule.spec.name == name:
                return schedule
        raise ApiError(404, f"no schedule {name!r}; the jobs page lists them")

    async def schedule(self, request: web.Request) -> dict:
        """One cron schedule with its latest runs (the batch framework keeps 20)."""
        stub = await self._stub()
        return shown(await self._find_schedule(stub, request.match_info["name"]))

    # actions ------------------------------------------------------------------------------

    async def job_action(self, request: web.Request, body: dict) -> dict:
        """Holds, releases, requeues, kills or updates a job as `agora job VERB` does; only its
        owner may. What the job's state does not allow (a release of a job that is not held)
        is the batch framework's refusal, shown as it words it (409)."""
        verb, job_id = request.match_info["verb"], request.match_info["job_id"]
        if verb not in ("hold", "release", "requeue", "kill", "update"):
            raise ApiError(404, f"no job action {verb!r}: hold, release, requeue, kill or update")
        stub = await self._stub()
        job = await call(BATCH, stub.GetJob, batch_pb2.GetJobRequest(job_id=job_id))
        principal = http_principal(request)
        check_owner(principal, verb, f"job {job_id}", job.spec.labels)
        instead = (
            f"it takes a change of job {job_id} from its owner alone: run `agora job {verb} "
            f"{job_id}` with the owner's certificate"
        )
        if verb in ("hold", "release"):
            hold = batch_pb2.HoldJobRequest(job_id=job_id, hold=verb == "hold")
            job = await self._relayed(request, stub.HoldJob, hold, instead)
            word = "held" if verb == "hold" else "released"
            return {"message": f"job {job_id} {word}: {job.message or 'waiting for offers'}"}
        if verb == "requeue":
            requeue = batch_pb2.RequeueJobRequest(job_id=job_id)
            job = await self._relayed(request, stub.RequeueJob, requeue, instead)
            return {"message": f"job {job_id} requeued: {job.message}"}
        if verb == "kill":
            kill = batch_pb2.KillJobRequest(job_id=job_id)
            await self._relayed(request, stub.KillJob, kill, instead)
            return {"message": f"job {job_id}: being killed (no more of it is launched)"}
        change = update_request(job_id, body)
        job = await self._relayed(request, stub.UpdateJob, change, instead)
        return {"message": updated(job)}

    async def schedule_action(self, request: web.Request, body: dict) -> dict:
        """Suspends, resumes or deletes a schedule as `agora job VERB NAME` does; only the
        owner of its job may."""
        verb, name = request.match_info["verb"], request.match_info["name"]
        if verb not in ("suspend", "resume", "delete"):
            raise ApiError(404, f"no schedule action {verb!r}: suspend, resume or delete")
        stub = await self._stub()
        schedule = await self._find_schedule(stub, name)
        principal = http_principal(request)
        check_owner(principal, verb, f"schedule {name}", schedule.spec.job.labels)
        command = "unschedule" if verb == "delete" else verb
        instead = (
            f"it takes a change of schedule {name} from its owner alone: run "
            f"`agora job {command} {name}` with the owner's certificate"
        )
        if verb == "delete":
            delete = batch_pb2.DeleteScheduleRequest(name=name)
            await self._relayed(request, stub.DeleteSchedule, delete, instead)
            return {"message": f"schedule {name} deleted (jobs it started run on)"}
        if schedule.suspended == (verb == "suspend"):
            state = "suspended" if schedule.suspended else "active"
            raise ApiError(409, f"schedule {name} is {state} already")
        suspend = batch_pb2.SuspendScheduleRequest(name=name, suspended=verb == "suspend")
        await self._relayed(request, stub.SuspendSchedule, suspend, instead)
        if verb == "suspend":
            return {"message": f"schedule {name} suspended: no run fires until it is resumed"}
        return {"message": f"schedule {name} resumed (the times it missed are not caught up)"}

    async def owner_weight(self, request: web.Request, body: dict) -> dict:
        """Sets an owner's weight as `agora job owner-weight` does: set_weights on the batch
        framework's role, under the master's ACLs here and the batch framework's there."""
        owner = body.get("owner", "")
        if not isinstance(owner, str):
            raise ApiError(400, f'owner must be a name ("" for anonymous), got {owner!r}')
        weight = _number(body, "weight", False, (0, math.inf))
        if weight is None:
            raise ApiError(400, "weight is required: a number above 0")
        found = await self._batch()
        if found is None:
            raise ApiError(404, "no batch framework is registered")
        stub, role = found
        self.dashboard.check(request, Action.SET_WEIGHT, role)
        change = batch_pb2.SetOwnerWeightRequest(owner=owner, weight=weight)
        instead = f"run `agora job owner-weight '{owner}' {weight:g}` as a principal it allows"
        set_to = await self._relayed(request, stub.SetOwnerWeight, change, instead)
        return {"message": f"owner {owner or '(anonymous)'}: weight {set_to.weight:g}"}
