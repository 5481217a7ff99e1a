"""The Scheduler gRPC service: thin handlers over MasterCore for frameworks."""

from __future__ import annotations

import asyncio

import grpc
import structlog

from agora.common.batches import event_batches
from agora.common.credentials import caller_principal
from agora.master import limits, views
from agora.master.authz import Action, Gatekeeper
from agora.master.call_stream import CallStream, CountCall
from agora.master.core import MasterCore
from agora.master.errors import CallError, abort, naming_task
from agora.v1 import scheduler_pb2, scheduler_pb2_grpc

log = structlog.get_logger(__name__)


async def run_call(context: grpc.aio.ServicerContext, call, *args):
    """Runs a core call; a CallError becomes the gRPC status the caller sees."""
    try:
        return call(*args)
    except CallError as e:
        await abort(context, e)


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(
        self,
        core: MasterCore,
        gate: Gatekeeper | None = None,
        count: CountCall | None = None,
    ) -> None:
        self.core = core
        self.gate = gate or Gatekeeper()
        self.call_stream = CallStream(
            {
                "accept": ("Accept", self._accept),
                "decline": ("Decline", self._decline),
                "revive": ("Revive", self._revive),
                "suppress": ("Suppress", self._suppress),
                "kill": ("Kill", self._kill),
                "acknowledge": ("Acknowledge", self._acknowledge),
                "reconcile": ("Reconcile", self._reconcile),
            },
            count,
        )

    async def _bound(self, request, context) -> None:
        await run_call(context, self._check_bound, request, caller_principal(context))

    async def Subscribe(
        self, request: scheduler_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ):
        await run_call(context, limits.check_framework_info_size, request.framework)
        principal = caller_principal(context)
        role = request.framework.role or "*"
        await run_call(context, self.gate.check, principal, Action.REGISTER_FRAMEWORK, role)
        name = request.framework.name
        await run_call(context, self.gate.check, principal, Action.USE_FRAMEWORK_NAME, name)
        framework, session = await run_call(
            context, self.core.frameworks.subscribe, request.framework, principal
        )
        session.owner = asyncio.current_task()  # cancelled if the framework stops reading
        if request.accepts_batches:
            session.batcher = event_batches()
        try:
            while True:
                event = await session.next()
                if event is None:
                    return
                yield event
        finally:
            session.owner = None  # no task <-> frame cycle left for the (frozen) collector
            self.core.frameworks.disconnected(framework, session)

    # The calls that may also come on the Calls stream: each is a plain function of the request
    # and the caller's principal that raises CallError, run by its unary handler or by Calls.

    def _check_bound(self, request, principal: str) -> None:
        """Refuses a call for a framework its caller did not subscribe (PERMISSION_DENIED)."""
        self.core.frameworks.for_call(request.framework_id, request.stream_id, principal)

    def _accept(self, request, principal: str) -> None:
        _check_accept_size(request, self.core.config.max_kill_grace_seconds)
        self._check_bound(request, principal)
        framework = self.core.reg.frameworks[request.framework_id]
        for user in sorted(_task_users(request, framework.info.user)):
            try:
                self.gate.check(principal, Action.RUN_AS_USER, user)
            except CallError as e:
                e.metadata.setdefault("user", user)  # whose tasks (frameworks act on it)
                raise
        self.core.tasks.accept(request)

    def _decline(self, request, principal: str) -> None:
        limits.check_count("offer_ids", len(request.offer_ids), limits.MAX_OFFERS_PER_CALL)
        self._check_bound(request, principal)
        self.core.offers.decline(request)

    def _revive(self, request, principal: str) -> None:
        self._check_bound(request, principal)
        self.core.frameworks.revive(request)

    def _suppress(self, request, principal: str) -> None:
        self._check_bound(request, principal)
        self.core.frameworks.suppress(request)

    def _demand(self, request, principal: str) -> None:
        self._check_bound(request, principal)
        self.core.frameworks.demand(request)

    def _kill(self, request, principal: str) -> None:
        self._check_bound(request, principal)
        self.core.tasks.kill(request)

    def _acknowledge(self, request, principal: str) -> None:
        limits.check_count(
            "acknowledgements", len(request.acknowledgements), limits.MAX_ACKS_PER_CALL
        )
        self._check_bound(request, principal)
        self.core.tasks.acknowledge(request)

    def _reconcile(self, request, principal: str) -> None:
        limits.check_count("tasks", len(request.tasks), limits.MAX_RECONCILE_TASKS)
        self._check_bound(request, principal)
        self.core.tasks.reconcile(request)

    async def _unary(self, handle, request, context, response):
        try:
            handle(request, caller_principal(context))
        except CallError as e:
            await abort(context, e)
        return response

    async def Accept(self, request, context):
        return await self._unary(self._accept, request, context, scheduler_pb2.AcceptResponse())

    async def Decline(self, request, context):
        return await self._unary(self._decline, request, context, scheduler_pb2.DeclineResponse())

    async def Revive(self, request, context):
        return await self._unary(self._revive, request, context, scheduler_pb2.ReviveResponse())

    async def Suppress(self, request, context):
        return await self._unary(self._suppress, request, context, scheduler_pb2.SuppressResponse())

    async def Demand(self, request, context):
        return await self._unary(self._demand, request, context, scheduler_pb2.DemandResponse())

    async def Kill(self, request, context):
        return await self._unary(self._kill, request, context, scheduler_pb2.KillResponse())

    async def Acknowledge(self, request, context):
        return await self._unary(
            self._acknowledge, request, context, scheduler_pb2.AcknowledgeResponse()
        )

    async def Reconcile(self, request, context):
        return await self._unary(
            self._reconcile, request, context, scheduler_pb2.ReconcileResponse()
        )

    async def Calls(self, request_iterator, context) -> None:
        """The calls above on one stream (master/call_stream.py), answered batch by batch."""
        await self.call_stream.serve(request_iterator, context)

    async def GetClusterView(self, request, context):
        await self._bound(request, context)
        return views.cluster_view(self.core)

    async def Hold(self, request, context):
        await run_call(
            context,
            limits.check_count,
            "resources",
            len(request.resources),
            limits.MAX_HOLD_RESOURCES,
        )
        await self._bound(request, context)
        hold_id = await run_call(context, self.core.holds.hold, request)
        return scheduler_pb2.HoldResponse(hold_id=hold_id)

    async def ReleaseHold(self, request, context):
        await self._bound(request, context)
        await run_call(context, self.core.holds.release, request)
        return scheduler_pb2.ReleaseHoldResponse()

    async def Teardown(self, request, context):
        principal = caller_principal(context)

        def teardown() -> None:
            framework = self.core.frameworks.for_call(
                request.framework_id, request.stream_id, principal
            )
            self.core.frameworks.teardown(framework, "the framework asked for teardown")

        await run_call(context, teardown)
        return scheduler_pb2.TeardownResponse()


def _task_users(request: scheduler_pb2.AcceptRequest, framework_user: str) -> set[str]:
    """The Unix users the Accept's tasks would run as (a task's own, else its framework's)."""
    return {
        task.command.user or framework_user
        for operation in request.operations
        for task in operation.launch.task_infos
    }


def _check_accept_size(request: scheduler_pb2.AcceptRequest, max_kill_grace: float) -> None:
    limits.check_count("offer_ids", len(request.offer_ids), limits.MAX_OFFERS_PER_CALL)
    tasks = [t for op in request.operations for t in op.launch.task_infos]
    limits.check_count("tasks", len(tasks), limits.MAX_TASKS_PER_ACCEPT)
    for task in tasks:
        with naming_task(task.task_id):
            limits.check_task_size(task)
            limits.check_kill_grace(
                f"task {task.task_id}: kill_grace_period_seconds",
                task.kill_grace_period_seconds,
                max_kill_grace,
            )
