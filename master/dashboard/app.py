"""The dashboard's HTTP routes: its page and static files, the JSON API the page polls, and the
actions it posts (kill a task, drain or undrain an agent, scale an app; the batch framework's
jobs, schedules and owners are batch.py's).

The API reads a `ClusterView` (the master's state, as the Operator service shows it) and, for a
task's sandbox and usage or the batch and service frameworks' jobs and apps, calls those daemons
over gRPC, as `agora job logs` or `agora app list` would. Every error is a JSON object with a
message for people and the right HTTP status (404 unknown, 502 a daemon that does not answer),
never a traceback.

The ACLs hold here as on the gRPC API (one Gatekeeper, the master's): every API read needs
read_state; a task's files and usage need read_sandboxes, unless the caller is the principal that
registered the task's framework; a kill needs kill_tasks and a drain drain_agents, as the
Operator service's KillTask and DrainAgent do; an app, a job or a schedule is changed by its
owner alone (calls.py). The caller is known by its client certificate over HTTPS; a browser
without one is anonymous. Task environments (which may hold secrets) are never shown.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

import grpc
import structlog
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from agora.common import ResourceError, Resources
from agora.common.credentials import INSECURE, Credentials, not_served_by
from agora.common.http import http_principal
from agora.common.rpc import open_channel
from agora.common.task_states import is_terminal
from agora.master.authz import Action, Gatekeeper
from agora.master.clock import Clock, LoopClock
from agora.master.dashboard.batch import BatchRoutes
from agora.master.dashboard.calls import ApiError, call, check_owner, http_status, relayed, shown
from agora.master.dashboard.history import ShareHistory
from agora.master.dashboard.view import (
    AGENTS_PER_SLICE,
    AgentUse,
    OutstandingOffer,
    framework_label,
)
from agora.master.errors import CallError
from agora.v1 import (
    agent_pb2,
    agent_pb2_grpc,
    common_pb2,
    operator_pb2,
    services_pb2,
    services_pb2_grpc,
)

__all__ = ["ClusterView", "Dashboard"]

log = structlog.get_logger(__name__)

STATIC = Path(__file__).with_name("static")
# How long one reading of the master's state (and each page's answer built from it) serves
# every viewer: the page refreshes every 2 s, and building the state of thousands of agents takes
# the master's loop for milliseconds, so N open pages must not cost N builds.
SNAPSHOT_SECONDS = 1.0
MAX_READ = 256 * 1024  # one file read: a page holds no more
# How long a framework API's certificate, once seen to name its framework's principal, is
# taken as checked (a TLS handshake per page view would cost more than the page).
SERVED_BY_SECONDS = 60.0


class ClusterView(Protocol):
    """What the dashboard reads of the master: the Operator service's answers."""

    async def state(self) -> operator_pb2.ClusterState: ...

    def explain(self, framework_id: str) -> list[str]: ...
    def preemptions(self) -> list: ...

    def framework_principal(self, framework_id: str) -> str:
        """The principal that registered the framework ("" when anonymous or unknown)."""
        ...

    def offers(self, framework_id: str = "", agent_id: str = "") -> list[OutstandingOffer]:
        """Outstanding offers (all, one framework's or one agent's), the oldest first."""
        ...

    def offer_count(self) -> int: ...

    def offer_timeout(self) -> float | None: ...

    def agent_use(self, agent_id: str) -> AgentUse | None:
        """Free, draining, and what each framework uses and is offered there."""
        ...

    def kill_task(self, framework_id: str, task_id: str, grace: float = 0.0) -> None:
        """Operator.KillTask's effect; raises CallError as it does."""
        ...

    def drain(self, agent_id: str) -> None: ...

    def undrain(self, agent_id: str) -> None: ...

    def shares(self) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
        """Dominant shares by role and by framework id, and each framework's label (cheap:
        sampled for the chart)."""
        ...


def _resources(protos) -> str:
    try:
        return str(Resources.from_proto(protos))
    except ResourceError:
        return "?"


def _scalars(protos) -> dict[str, float]:
    """{name: amount} over every role's reservation (cpus, mem, disk, gpus)."""
    try:
        return _by_name(Resources.from_proto(protos))
    except ResourceError:
        return {}


def _by_name(resources: Resources) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, _role), amount in resources.scalars.items():
        out[name] = out.get(name, 0.0) + amount
    return out


def _agent(a: operator_pb2.AgentSummary) -> dict:
    return {
        "agent_id": a.info.agent_id,
        "hostname": a.info.hostname,
        "address": a.info.address,
        "state": a.state,
        "total": _resources(a.info.resources),
        "allocated": _resources(a.allocated),
        "total_scalars": _scalars(a.info.resources),
        "allocated_scalars": _scalars(a.allocated),
        "attributes": {x.name: x.text for x in a.info.attributes},
        "tasks": a.task_count,
        "registered_at": a.registered_at,
        "last_heartbeat_at": a.last_heartbeat_at,
    }


def _framework(f: operator_pb2.FrameworkSummary) -> dict:
    return {
        "framework_id": f.info.framework_id,
        "name": f.info.name,
        "role": f.info.role,
        "user": f.info.user,
        "connected": f.connected,
        "suppressed": f.suppressed,
        "allocated": _resources(f.allocated),
        "offered": _resources(f.offered),
        "dominant_share": f.dominant_share,
        "tasks": f.task_count,
        "registered_at": f.registered_at,
    }


def _task(t: operator_pb2.TaskSummary, frameworks: dict[str, str]) -> dict:
    status = t.last_status
    return {
        "task_id": t.task_id,
        "name": t.name,
        "framework_id": t.framework_id,
        "framework": frameworks.get(t.framework_id, ""),
        "agent_id": t.agent_id,
        "hostname": t.hostname,
        "state": common_pb2.TaskState.Name(t.state),
        "resources": _resources(t.resources),
        "message": status.message,
        "reason": status.reason,
        "updated_at": status.timestamp,
    }


def _role(r: operator_pb2.RoleSummary) -> dict:
    return {
        "role": r.role,
        "weight": r.weight,
        "dominant_share": r.dominant_share,
        "allocated": _resources(r.allocated),
        "guarantee": _resources(r.quota.guarantee),
        "limit": _resources(r.quota.limit) if r.quota.limit else "",
        "held_back": _resources(r.headroom),
        "frameworks": list(r.framework_ids),
    }


def _offer(o: OutstandingOffer, frameworks: dict[str, str], hosts: dict[str, str]) -> dict:
    return {
        "offer_id": o.offer_id,
        "framework_id": o.framework_id,
        "framework": frameworks.get(o.framework_id, ""),
        "agent_id": o.agent_id,
        "hostname": hosts.get(o.agent_id, ""),
        "resources": str(o.resources),
        "age_seconds": o.age_seconds,
    }


def _live(tasks) -> list:
    return [t for t in tasks if not is_terminal(t.state)]


TASKS_SHOWN = 200  # of one agent or framework on its page, the newest


class Dashboard:
    """The routes; `start()` begins sampling shares for the chart, `stop()` ends it."""

    def __init__(
        self,
        view: ClusterView,
        history: ShareHistory | None = None,
        credentials: Credentials = INSECURE,
        gate: Gatekeeper | None = None,
        leads: Callable[[], bool] | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`clock`: the master's (real time unless given); its wall() stamps the share
        history's samples and the batch history's horizon."""
        self.view = view
        self.clock: Clock = clock if clock is not None else LoopClock()
        self.gate = gate or Gatekeeper()
        # Whether this master still leads (its fence, common/fence.py; None: a master alone):
        # an action is refused once it cannot prove it does, as every gRPC call is.
        self._leads = leads
        # For the calls to agents and frameworks (sandbox files, usage, jobs, apps).
        self.credentials = credentials
        self.history = history or ShareHistory()
        self._channels: dict[str, grpc.aio.Channel] = {}
        # (framework API address, principal) -> when its certificate was last seen to match.
        self._served: dict[tuple[str, str], float] = {}
        self._sampler: asyncio.Task | None = None
        self._snapshot: tuple[float, operator_pb2.ClusterState] | None = None
        self._reading: asyncio.Future | None = None
        # path and query -> (when, JSON body): answers shared by every viewer for a moment.
        self._answers: dict[str, tuple[float, bytes]] = {}
        self.batch = BatchRoutes(self)

    # lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self._sampler = asyncio.create_task(self._sample(), name="dashboard-shares")

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.gather(self._sampler, return_exceptions=True)
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def _sample(self) -> None:
        while True:
            roles, frameworks, labels = self.view.shares()
            self.history.add(self.clock.wall(), roles, frameworks, labels)
            await asyncio.sleep(self.history.interval)

    # routes -------------------------------------------------------------------------------

    def routes(self) -> list[web.AbstractRouteDef]:
        api: dict[str, Callable[[web.Request], Awaitable[object]]] = {
            "/api/overview": self.overview,
            "/api/agents": self.agents,
            "/api/agents/{agent_id}": self.agent,
            "/api/frameworks": self.frameworks,
            "/api/frameworks/{framework}": self.framework,
            "/api/offers": self.offers,
            "/api/frameworks/{framework}/why": self.why,
            "/api/tasks": self.tasks,
            "/api/tasks/{framework_id}/{task_id}": self.task,
            "/api/tasks/{framework_id}/{task_id}/files": self.files,
            "/api/tasks/{framework_id}/{task_id}/file": self.file,
            "/api/tasks/{framework_id}/{task_id}/usage": self.usage,
            "/api/roles": self.roles,
            "/api/shares": self.shares,
            **self.batch.reads(),
            "/api/apps": self.apps,
            "/api/apps/{app_id}": self.app,
        }
        # Read from the master's state alone (the rest call agents or frameworks, per task).
        shared = {
            "/api/overview",
            "/api/agents",
            "/api/frameworks",
            "/api/tasks",
            "/api/roles",
            "/api/offers",
        }
        routes: list[web.AbstractRouteDef] = [
            web.get(path, self._json(handler, path in shared)) for path, handler in api.items()
        ]
        # Actions: POSTs of JSON, under the ACLs the CLI's calls meet (not read_state: the
        # Operator service asks none of `agora cluster kill` or `drain` either).
        actions: dict[str, Callable[[web.Request, dict], Awaitable[dict]]] = {
            "/api/tasks/{framework_id}/{task_id}/kill": self.kill,
            "/api/agents/{agent_id}/drain": self.drain,
            "/api/agents/{agent_id}/undrain": self.undrain,
            "/api/apps/{app_id}/scale": self.scale,
            **self.batch.actions(),
        }
        routes += [web.post(path, self._action(handler)) for path, handler in actions.items()]
        routes += [
            web.get("/", self.page),
            web.get("/api/{rest:.*}", self._json(self._no_such_api)),
            web.static("/static", STATIC, follow_symlinks=False),
            web.get("/{rest:.*}", self.not_found),
        ]
        return routes

    def _json(self, handler, shared: bool = False):
        """`handler`'s answer as JSON after the read_state check; a `shared` answer (one that
        depends on nothing but the master's state) is reused by every viewer for a moment."""

        async def wrapped(request: web.Request) -> web.Response:
            try:
                self._check(request, Action.READ_STATE, "")
                if not shared:
                    return web.json_response(await handler(request))
                # Real time, not the master's clock: how long an answer serves its viewers.
                now = time.monotonic()
                cached = self._answers.get(request.path_qs)
                if cached is None or now - cached[0] > SNAPSHOT_SECONDS:
                    if len(self._answers) > 1000:  # queries are the caller's: keep few
                        self._answers.clear()
                    answer = await handler(request)
                    body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                    cached = self._answers[request.path_qs] = (now, body)
                return web.Response(body=cached[1], content_type="application/json")
            except ApiError as e:
                return web.json_response({"error": str(e)}, status=e.status)
            except Exception as e:  # noqa: BLE001 - a bug here must not show a traceback
                log.exception("dashboard request failed", path=request.path)
                return web.json_response({"error": f"internal error: {e!r}"}, status=500)

        return wrapped

    def _action(self, handler):
        """A POST: its JSON body to `handler`, which checks the ACLs and acts; its answer (a
        "message" for people) as JSON; a refusal a 403 naming who may not do what."""

        async def wrapped(request: web.Request) -> web.Response:
            try:
                if self._leads is not None and not self._leads():
                    raise ApiError(
                        503,
                        "this master no longer leads: open the leader's dashboard "
                        "(`agora cluster masters` names it)",
                    )
                # JSON only: a page of another site cannot send it without the browser asking
                # this server first (a CORS preflight, which it does not answer), so it cannot
                # act with a visitor's client certificate.
                if request.content_type != "application/json":
                    raise ApiError(415, "an action is a POST of JSON (application/json)")
                try:
                    body = await request.json()
                except ValueError:
                    raise ApiError(400, "the body is not JSON") from None
                if not isinstance(body, dict):
                    raise ApiError(400, "the body must be a JSON object")
                try:
                    answer = await handler(request, body)
                except CallError as e:
                    raise ApiError(http_status(e.code), e.message) from None
                # The next page shows what changed, not a snapshot from before it.
                self._snapshot = None
                self._answers.clear()
                who = http_principal(request) or "an anonymous caller"
                log.info("dashboard action", path=request.path, principal=who)
                return web.json_response(answer)
            except ApiError as e:
                return web.json_response({"error": str(e)}, status=e.status)
            except Exception as e:  # noqa: BLE001 - a bug here must not show a traceback
                log.exception("dashboard action failed", path=request.path)
                return web.json_response({"error": f"internal error: {e!r}"}, status=500)

        return wrapped

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")

    async def not_found(self, request: web.Request) -> web.Response:
        text = (STATIC / "404.html").read_text().replace("{path}", _html(request.path))
        return web.Response(text=text, status=404, content_type="text/html")

    async def _no_such_api(self, request: web.Request) -> object:
        raise ApiError(404, f"no such API: {request.path}")

    # the JSON API -------------------------------------------------------------------------

    async def overview(self, request: web.Request) -> dict:
        state = await self._state()
        by_state: dict[str, int] = {}
        for t in state.tasks:
            name = common_pb2.TaskState.Name(t.state)
            by_state[name] = by_state.get(name, 0) + 1
        allocated = Resources()
        for i, a in enumerate(state.agents):
            try:
                allocated = allocated + Resources.from_proto(a.allocated)
            except ResourceError:
                pass
            if i % AGENTS_PER_SLICE == AGENTS_PER_SLICE - 1:
                await asyncio.sleep(0)
        return {
            "master_id": state.master_id,
            "leader": state.leader,
            "started_at": state.started_at,
            "total": _resources(state.total),
            "total_scalars": _scalars(state.total),
            "allocated_scalars": _by_name(allocated),
            "agents": len(state.agents),
            "agents_active": sum(1 for a in state.agents if a.state == "ACTIVE"),
            "frameworks": len(state.frameworks),
            "frameworks_connected": sum(1 for f in state.frameworks if f.connected),
            "tasks": by_state,
            "offers": self.view.offer_count(),
            "held_back": {r.role: _resources(r.headroom) for r in state.roles if r.headroom},
        }

    async def agents(self, request: web.Request) -> bytes:
        # Encoded here, a slice at a time: thousands of agents would hold the loop (and the
        # offers waiting on it) for tens of milliseconds in one go.
        parts = []
        for i, agent in enumerate((await self._state()).agents):
            parts.append(json.dumps(_agent(agent)))
            if i % AGENTS_PER_SLICE == AGENTS_PER_SLICE - 1:
                await asyncio.sleep(0)
        return ("[" + ",".join(parts) + "]").encode()

    async def agent(self, request: web.Request) -> dict:
        """One agent: its summary, free resources, what each framework uses and is offered
        there, whether it drains, its tasks and the offers outstanding on it."""
        agent_id = request.match_info["agent_id"]
        for fresh in (False, True):  # an agent newer than the snapshot: read the state again
            state = await self._state(fresh)
            found = [a for a in state.agents if agent_id in (a.info.agent_id, a.info.hostname)]
            if found:
                break
        else:
            raise ApiError(404, f"no agent {agent_id!r}")
        summary = found[0]
        agent_id = summary.info.agent_id
        use = self.view.agent_use(agent_id)
        if use is None:
            raise ApiError(404, f"agent {agent_id!r} has left the cluster")
        names = {f.info.framework_id: f.info.name for f in state.frameworks}
        hosts = {agent_id: summary.info.hostname}
        tasks = [t for t in state.tasks if t.agent_id == agent_id]
        row = _agent(summary)
        row.update(
            free=str(use.free),
            free_scalars=_by_name(use.free),
            draining=use.draining,
            frameworks=[
                {
                    "framework_id": fid,
                    "framework": framework_label(names.get(fid, ""), fid),
                    "in_use": use.in_use.get(fid, Resources()).format() or "-",
                    "offered": use.offered.get(fid, Resources()).format() or "-",
                }
                for fid in sorted({*use.in_use, *use.offered})
            ],
            running=[_task(t, names) for t in _live(tasks)][-TASKS_SHOWN:],
            ended=[_task(t, names) for t in tasks if is_terminal(t.state)][-TASKS_SHOWN:],
            offers=[_offer(o, names, hosts) for o in self.view.offers(agent_id=agent_id)],
        )
        return row

    async def frameworks(self, request: web.Request) -> list:
        return [_framework(f) for f in (await self._state()).frameworks]

    async def framework(self, request: web.Request) -> dict:
        """One framework (by id, or by name: the connected one of that name): its summary, its
        role's quota, its tasks, the offers it holds, and why it gets no offers."""
        key = request.match_info["framework"]
        framework = await self._framework(key)
        state = await self._state()
        fid = framework.info.framework_id
        names = {f.info.framework_id: f.info.name for f in state.frameworks}
        hosts = {a.info.agent_id: a.info.hostname for a in state.agents}
        tasks = [t for t in state.tasks if t.framework_id == fid]
        role = next((r for r in state.roles if r.role == framework.info.role), None)
        if role is not None and not (role.quota.guarantee or role.quota.limit):
            role = None
        reasons = self.view.explain(fid)
        if not framework.connected:
            reasons.insert(0, "disconnected: the framework has no open Subscribe stream")
        row = _framework(framework)
        row.update(
            label=framework_label(framework.info.name, fid),
            principal=self.view.framework_principal(fid),
            role_quota=_role(role) if role is not None else None,
            running=[_task(t, names) for t in _live(tasks)][-TASKS_SHOWN:],
            ended=[_task(t, names) for t in tasks if is_terminal(t.state)][-TASKS_SHOWN:],
            offers=[_offer(o, names, hosts) for o in self.view.offers(framework_id=fid)],
            why=reasons,
        )
        return row

    async def offers(self, request: web.Request) -> dict:
        """Every outstanding offer (who holds what, for how long), and what quota holds back."""
        state = await self._state()
        names = {f.info.framework_id: f.info.name for f in state.frameworks}
        hosts = {a.info.agent_id: a.info.hostname for a in state.agents}
        return {
            "offers": [_offer(o, names, hosts) for o in self.view.offers()],
            "offer_timeout_seconds": self.view.offer_timeout(),
            "held_back": [_role(r) for r in state.roles if r.headroom],
            "preemptions": [
                {
                    "at": p.at,
                    "framework_id": p.framework_id,
                    "framework": names.get(p.framework_id, ""),
                    "task_id": p.task_id,
                    "role": p.role,
                    "agent_id": p.agent_id,
                    "hostname": hosts.get(p.agent_id, ""),
                    "beneficiary": p.beneficiary,
                    "reason": p.reason,
                }
                for p in reversed(self.view.preemptions())
            ],
        }

    async def why(self, request: web.Request) -> dict:
        framework = await self._framework(request.match_info["framework"])
        return {
            "framework_id": framework.info.framework_id,
            "name": framework.info.name,
            "reasons": self.view.explain(framework.info.framework_id),
        }

    async def tasks(self, request: web.Request) -> list:
        state = await self._state()
        names = {f.info.framework_id: f.info.name for f in state.frameworks}
        want_state = request.query.get("state", "").upper()
        want_framework = request.query.get("framework", "")
        want_agent = request.query.get("agent", "")
        out = []
        for t in state.tasks:
            row = _task(t, names)
            if want_state and row["state"] not in (want_state, f"TASK_{want_state}"):
                continue
            if want_framework and want_framework not in (t.framework_id, row["framework"]):
                continue
            if want_agent and want_agent not in (t.agent_id, t.hostname):
                continue
            out.append(row)
        return out

    async def task(self, request: web.Request) -> dict:
        state, task = await self._task(request)
        names = {f.info.framework_id: f.info.name for f in state.frameworks}
        agent = next((a for a in state.agents if a.info.agent_id == task.agent_id), None)
        row = _task(task, names)
        row["agent_address"] = agent.info.address if agent is not None else ""
        row["agent_state"] = agent.state if agent is not None else "GONE"
        return row

    async def files(self, request: web.Request) -> dict:
        _, task = await self._sandbox_task(request)
        reply = await self._agent_call(
            task,
            "ListFiles",
            agent_pb2.ListFilesRequest(
                framework_id=task.framework_id,
                task_id=task.task_id,
                path=request.query.get("path", ""),
            ),
        )
        return {"files": [MessageToDict(f, preserving_proto_field_name=True) for f in reply.files]}

    async def file(self, request: web.Request) -> dict:
        _, task = await self._sandbox_task(request)
        try:
            offset = int(request.query.get("offset", "0"))
            length = min(int(request.query.get("length", str(MAX_READ))), MAX_READ)
        except ValueError:
            raise ApiError(400, "offset and length must be whole numbers") from None
        reply = await self._agent_call(
            task,
            "ReadFile",
            agent_pb2.ReadFileRequest(
                framework_id=task.framework_id,
                task_id=task.task_id,
                path=request.query.get("path", "stdout"),
                offset=offset,
                length=length,
            ),
        )
        return {
            "data": reply.data.decode("utf-8", "replace"),
            "offset": reply.offset,
            "size": reply.size,
        }

    async def usage(self, request: web.Request) -> dict:
        _, task = await self._sandbox_task(request)
        if task.state != common_pb2.TASK_RUNNING:
            return {"usage": None}
        reply = await self._agent_call(
            task,
            "GetUsage",
            agent_pb2.GetUsageRequest(framework_id=task.framework_id, task_id=task.task_id),
        )
        usage = reply.usage[0] if reply.usage else None
        return {"usage": MessageToDict(usage, preserving_proto_field_name=True) if usage else None}

    async def roles(self, request: web.Request) -> list:
        return [_role(r) for r in (await self._state()).roles]

    async def shares(self, request: web.Request) -> dict:
        return self.history.series()

    async def apps(self, request: web.Request) -> dict:
        found = await self._framework_service("services")
        if found is None:
            return {"available": False, "message": "no services framework is registered"}
        stub = services_pb2_grpc.ServicesStub(self._channel(found[0]))
        reply = await call("the services framework", stub.ListApps, services_pb2.ListAppsRequest())
        return {"available": True, "apps": [shown(a) for a in reply.apps]}

    async def app(self, request: web.Request) -> dict:
        """One app, from the services framework as `agora app get` reads it, with the
        framework's id (its tasks' pages are under it)."""
        found = await self._framework_service("services")
        if found is None:
            raise ApiError(404, "no services framework is registered")
        stub = services_pb2_grpc.ServicesStub(self._channel(found[0]))
        status = await call(
            "the services framework",
            stub.GetApp,
            services_pb2.GetAppRequest(id=request.match_info["app_id"]),
        )
        return {**shown(status), "framework_id": found[1]}

    # actions ------------------------------------------------------------------------------

    async def kill(self, request: web.Request, body: dict) -> dict:
        """Kills a task as `agora cluster kill` does: one's own framework's always, another's
        as kill_tasks allows (by framework id or name)."""
        framework = await self._framework(request.match_info["framework_id"])
        fid, task_id = framework.info.framework_id, request.match_info["task_id"]
        # A refusal is a CallError, which _action answers as 403 with its message.
        self.gate.check_framework(
            http_principal(request),
            Action.KILL_TASKS,
            fid,
            self.view.framework_principal(fid),
            framework.info.name,
        )
        grace = body.get("grace_seconds", 0.0)
        if not isinstance(grace, int | float):
            raise ApiError(400, "grace_seconds must be a number of seconds")
        self.view.kill_task(fid, task_id, float(grace))
        label = framework_label(framework.info.name, fid)
        return {"message": f"task {task_id} of {label}: being killed"}

    async def drain(self, request: web.Request, body: dict) -> dict:
        """Drains an agent as `agora cluster drain` does (drain_agents)."""
        agent_id = request.match_info["agent_id"]
        self._check(request, Action.DRAIN_AGENT, agent_id)
        self.view.drain(agent_id)
        return {"message": f"agent {agent_id}: draining (no new offers; its tasks keep running)"}

    async def undrain(self, request: web.Request, body: dict) -> dict:
        agent_id = request.match_info["agent_id"]
        self._check(request, Action.DRAIN_AGENT, agent_id)
        self.view.undrain(agent_id)
        return {"message": f"agent {agent_id}: active again (its resources are offered)"}

    async def scale(self, request: web.Request, body: dict) -> dict:
        """Scales an app through the services framework, as `agora app scale` does. Only the
        app's owner may (the services framework's rule: its `agora.owner` label): the caller's
        identity is checked here first, against the owner the framework reports, and the
        master then calls with its own certificate on the caller's behalf, which the framework
        believes from the master alone."""
        app_id = request.match_info["app_id"]
        instances = body.get("instances")
        if not isinstance(instances, int) or isinstance(instances, bool) or instances < 0:
            raise ApiError(400, f"instances must be a whole number, 0 or more, got {instances!r}")
        found = await self._framework_service("services")
        if found is None:
            raise ApiError(404, "no services framework is registered")
        stub = services_pb2_grpc.ServicesStub(self._channel(found[0]))
        what = "the services framework"
        status = await call(what, stub.GetApp, services_pb2.GetAppRequest(id=app_id))
        principal = http_principal(request)
        check_owner(principal, "scale", f"app {app_id}", status.app.labels)
        # The master relays it for the person it just checked against the owner; the framework
        # takes that name from the master's certificate alone (frameworks/service/servicer.py).
        await relayed(
            what,
            stub.ScaleApp,
            services_pb2.ScaleAppRequest(id=app_id, instances=instances),
            principal,
            f"it takes a scale of app {app_id} from its owner alone: run "
            f"`agora app scale {app_id} {instances}` with the owner's certificate",
            secure=self.credentials.secure,
        )
        return {"message": f"app {app_id}: scaling to {instances} instance(s)"}

    # helpers ------------------------------------------------------------------------------

    async def _state(self, fresh: bool = False) -> operator_pb2.ClusterState:
        """The master's state, read at most once per SNAPSHOT_SECONDS (unless `fresh`); callers
        that come while it is being read (it is read in slices) share that reading."""
        now = time.monotonic()  # real time: a cache for viewers, not the master's clock
        if not fresh and self._snapshot is not None and now - self._snapshot[0] <= SNAPSHOT_SECONDS:
            return self._snapshot[1]
        if self._reading is None:
            self._reading = asyncio.ensure_future(self.view.state())
            self._reading.add_done_callback(self._read_done)
        return await asyncio.shield(self._reading)

    def _read_done(self, reading: asyncio.Future) -> None:
        self._reading = None
        if not reading.cancelled() and reading.exception() is None:
            self._snapshot = (time.monotonic(), reading.result())  # real time, as in _state

    async def framework_api(
        self, name: str
    ) -> tuple[grpc.aio.Channel, operator_pb2.FrameworkSummary] | None:
        """A channel to the API of the connected framework called `name` (checked as
        _framework_service checks it), and what the master knows of that framework."""
        found = await self._framework_service(name)
        if found is None:
            return None
        return self._channel(found[0]), await self._framework(found[1])

    def check(self, request: web.Request, action: Action, obj: str) -> None:
        """The caller may do `action` on `obj` under the master's ACLs (else a 403)."""
        self._check(request, action, obj)

    def _check(self, request: web.Request, action: Action, obj: str, aliases=()) -> None:
        try:
            self.gate.check(http_principal(request), action, obj, aliases)
        except CallError as e:
            raise ApiError(403, e.message) from None

    async def _sandbox_task(
        self, request: web.Request
    ) -> tuple[operator_pb2.ClusterState, operator_pb2.TaskSummary]:
        """The task named in the path, once the caller may read its sandbox."""
        state, task = await self._task(request)
        owner = self.view.framework_principal(task.framework_id)
        if not owner or http_principal(request) != owner:
            names = tuple(
                f.info.name for f in state.frameworks if f.info.framework_id == task.framework_id
            )
            self._check(request, Action.READ_SANDBOX, task.framework_id, names)
        return state, task

    async def _framework(self, key: str) -> operator_pb2.FrameworkSummary:
        frameworks = (await self._state()).frameworks
        found = [f for f in frameworks if key in (f.info.framework_id, f.info.name)]
        if not found:
            raise ApiError(404, f"no framework {key!r}")
        return sorted(found, key=lambda f: not f.connected)[0]

    async def _task(
        self, request: web.Request
    ) -> tuple[operator_pb2.ClusterState, operator_pb2.TaskSummary]:
        framework_id, task_id = request.match_info["framework_id"], request.match_info["task_id"]
        for fresh in (False, True):  # a task newer than the snapshot: read the state again
            state = await self._state(fresh)
            for task in state.tasks:
                if task.framework_id == framework_id and task.task_id == task_id:
                    return state, task
        raise ApiError(404, f"no task {task_id!r} of framework {framework_id!r}")

    async def _framework_service(self, name: str) -> tuple[str, str] | None:
        """(service address, framework id) of the connected framework called `name`. With
        TLS, only if the API's certificate names the principal that subscribed the framework
        (as `agora job` checks it: frameworks/sdk/discovery.py); else 502 saying why."""
        for f in sorted((await self._state()).frameworks, key=lambda f: not f.connected):
            if f.info.name == name and f.connected and f.info.service_address:
                address = f.info.service_address
                if self.credentials.secure:
                    why = await self._served_by(address, f.principal, name)
                    if why is not None:
                        raise ApiError(502, why)
                return address, f.info.framework_id
        return None

    async def _served_by(self, address: str, principal: str, name: str) -> str | None:
        """not_served_by, remembered for SERVED_BY_SECONDS when it is (a handshake a page view
        would otherwise cost); a refusal is never remembered."""
        key = (address, principal)
        # Real time, not the master's clock: the check is a cache of TLS handshakes.
        if time.monotonic() - self._served.get(key, -SERVED_BY_SECONDS) < SERVED_BY_SECONDS:
            return None
        why = await asyncio.to_thread(
            not_served_by, address, principal, f"the {name!r} framework's API", self.credentials
        )
        # A channel made before this check may now reach whoever holds the address: the next
        # call dials afresh, to the server just checked.
        channel = self._channels.pop(address, None)
        if channel is not None:
            asyncio.ensure_future(channel.close())
        if why is None:
            self._served[key] = time.monotonic()  # real time, as above
        return why

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            self._channels[address] = open_channel(address, self.credentials)
        return self._channels[address]

    async def _agent_call(self, task, method: str, request):
        state = await self._state()
        agent = next((a for a in state.agents if a.info.agent_id == task.agent_id), None)
        if agent is None or not agent.info.address:
            raise ApiError(
                404,
                f"the agent of task {task.task_id!r} ({task.agent_id}) is gone from the cluster",
            )
        stub = agent_pb2_grpc.AgentStub(self._channel(agent.info.address))
        what = f"agent {agent.info.hostname} ({agent.info.address})"
        return await call(what, getattr(stub, method), request)


def _html(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )
