"""The Operator gRPC service: cluster state, roles, weights, quota, draining, explanations, the
event stream; operators' changes are audited (master/events.py)."""

from __future__ import annotations

import contextlib

import grpc

from agora.common import ResourceError, Resources
from agora.common.credentials import caller_principal
from agora.master import limits, views
from agora.master.authz import Action, Gatekeeper
from agora.master.core import MasterCore
from agora.master.scheduler_service import run_call
from agora.v1 import operator_pb2, operator_pb2_grpc


class OperatorService(operator_pb2_grpc.OperatorServicer):
    def __init__(self, core: MasterCore, leader: str = "", gate: Gatekeeper | None = None) -> None:
        self.core = core
        self.gate = gate or Gatekeeper()
        self.leader = leader

    def _check(self, context, action: Action, obj: str = "") -> None:
        self.gate.check(caller_principal(context), action, obj)

    async def GetState(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return views.cluster_state(self.core, self.leader)

    async def ListMasters(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListMastersResponse(masters=views.master_summaries(self.core))

    async def ListAgents(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListAgentsResponse(agents=views.agent_summaries(self.core))

    async def ListFrameworks(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListFrameworksResponse(frameworks=views.framework_summaries(self.core))

    async def ListTasks(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListTasksResponse(
            tasks=views.task_summaries(self.core, request.framework_id, request.agent_id)
        )

    async def ListRoles(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListRolesResponse(roles=views.role_summaries(self.core))

    async def ListPreemptions(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        return operator_pb2.ListPreemptionsResponse(
            preemptions=[p.summary() for p in self.core.preemptions.history]
        )

    @contextlib.asynccontextmanager
    async def _audited(self, context, action: str, target: str, **detail: object):
        """An operator's change, written to the audit log with its outcome (refused ones too:
        an attempt is worth knowing of)."""
        outcome = "ok"
        try:
            yield
        except BaseException:
            code = context.code() if hasattr(context, "code") else None
            outcome = f"refused ({getattr(code, 'name', code) or 'error'})"
            raise
        finally:
            self.core.events.audit(
                caller_principal(context), action, target, context.peer(), outcome, **detail
            )

    async def UpdateWeight(self, request, context):
        async with self._audited(context, "SET_WEIGHT", request.role, weight=request.weight):
            await run_call(context, self._check, context, Action.SET_WEIGHT, request.role)
            await run_call(context, self.core.set_weight, request.role, request.weight)
        return operator_pb2.UpdateWeightResponse()

    async def SetQuota(self, request, context):
        async with self._audited(
            context, "SET_QUOTA", request.role, guarantee=_shown(request.quota.guarantee)
        ):
            await run_call(context, self._check, context, Action.SET_QUOTA, request.role)
            await run_call(context, self.core.set_quota, request.role, request.quota)
        return operator_pb2.SetQuotaResponse()

    async def ExplainOffers(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        if not request.framework:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "name a framework by id or name")
        framework = await run_call(context, self.core.frameworks.find, request.framework)
        reasons = self.core.explain_offers(framework.framework_id)
        if not framework.connected:
            reasons.insert(0, "disconnected: the framework has no open Subscribe stream")
        return operator_pb2.ExplainOffersResponse(
            framework_id=framework.framework_id, reasons=reasons
        )

    async def UndrainAgent(self, request, context):
        async with self._audited(context, "UNDRAIN_AGENT", request.agent_id):
            await run_call(context, self._check, context, Action.DRAIN_AGENT, request.agent_id)
            await run_call(context, self.core.agents.undrain, request.agent_id)
        return operator_pb2.UndrainAgentResponse()

    async def TeardownFramework(self, request, context):
        async with self._audited(context, "TEARDOWN_FRAMEWORK", request.framework):
            framework = await run_call(context, self.core.frameworks.find, request.framework)
            await run_call(
                context, self._check_framework, context, Action.TEARDOWN_FRAMEWORK, framework
            )
            who = caller_principal(context) or "an anonymous operator"
            await run_call(context, self.core.frameworks.teardown, framework, f"torn down by {who}")
        return operator_pb2.TeardownFrameworkResponse(framework_id=framework.framework_id)

    async def KillTask(self, request, context):
        target = f"{request.framework}/{request.task_id}"
        async with self._audited(context, "KILL_TASK", target):
            framework = await run_call(context, self.core.frameworks.find, request.framework)
            await run_call(context, self._check_framework, context, Action.KILL_TASKS, framework)
            await run_call(
                context,
                self.core.tasks.operator_kill,
                framework.framework_id,
                request.task_id,
                request.grace_period_seconds,
            )
        return operator_pb2.KillTaskResponse(framework_id=framework.framework_id)

    def _check_framework(self, context, action: Action, framework) -> None:
        """`action` on another's framework needs an ACL naming it (by id or name); on one's
        own framework (subscribed by the same principal) it is always allowed."""
        self.gate.check_framework(
            caller_principal(context),
            action,
            framework.framework_id,
            framework.principal,
            framework.info.name,
        )

    async def DrainAgent(self, request, context):
        seconds = request.deadline_seconds
        async with self._audited(context, "DRAIN_AGENT", request.agent_id, deadline=seconds):
            await run_call(context, self._check, context, Action.DRAIN_AGENT, request.agent_id)
            await run_call(context, limits.check_drain_deadline, request.deadline_seconds)
            deadline, tasks = await run_call(
                context, self.core.agents.drain, request.agent_id, request.deadline_seconds
            )
        return operator_pb2.DrainAgentResponse(deadline=deadline, tasks=tasks)

    async def WatchEvents(self, request, context):
        await run_call(context, self._check, context, Action.READ_STATE)
        watcher, first = self.core.events.watch(request.since, request.topics)
        try:
            for event in first:
                yield event
            del first
            while True:
                event = await watcher.queue.get()
                if event is None:  # it fell behind: cut, it resumes from its last index
                    await context.abort(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        "this watcher fell too far behind the cluster's events; watch again "
                        "from the last index read",
                    )
                yield event
        finally:
            self.core.events.unwatch(watcher)


def _shown(resources) -> str:
    """Resources as the audit log shows them, whatever a caller sent (it is parsed, and
    refused if bad, only after it is recorded)."""
    try:
        return str(Resources.from_proto(resources)) if resources else ""
    except ResourceError:
        return "(not valid resources)"
