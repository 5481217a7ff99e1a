"""The Scheduler gRPC service: thin handlers over MasterCore for frameworks."""

from __future__ import annotations

import grpc
import structlog

from agora.master.core import MasterCore
from agora.master.errors import CallError, abort
from agora.v1 import scheduler_pb2, scheduler_pb2_grpc

log = structlog.get_logger(__name__)


async def run_call(context: grpc.aio.ServicerContext, call, *args):
    """Runs a core call; a CallError becomes the gRPC status the caller sees."""
    try:
        return call(*args)
    except CallError as e:
        await abort(context, e)


class SchedulerService(scheduler_pb2_grpc.SchedulerServicer):
    def __init__(self, core: MasterCore) -> None:
        self.core = core

    async def Subscribe(
        self, request: scheduler_pb2.SubscribeRequest, context: grpc.aio.ServicerContext
    ):
        framework, session = await run_call(context, self.core.subscribe, request.framework)
        try:
            while True:
                event = await session.queue.get()
                if event is None:
                    return
                yield event
        finally:
            self.core.framework_disconnected(framework, session)

    async def Accept(self, request, context):
        await run_call(context, self.core.accept, request)
        return scheduler_pb2.AcceptResponse()

    async def Decline(self, request, context):
        await run_call(context, self.core.decline, request)
        return scheduler_pb2.DeclineResponse()

    async def Revive(self, request, context):
        await run_call(context, self.core.revive, request)
        return scheduler_pb2.ReviveResponse()

    async def Suppress(self, request, context):
        await run_call(context, self.core.suppress, request)
        return scheduler_pb2.SuppressResponse()

    async def Kill(self, request, context):
        await run_call(context, self.core.kill, request)
        return scheduler_pb2.KillResponse()

    async def Acknowledge(self, request, context):
        await run_call(context, self.core.acknowledge, request)
        return scheduler_pb2.AcknowledgeResponse()

    async def Reconcile(self, request, context):
        await run_call(context, self.core.reconcile, request)
        return scheduler_pb2.ReconcileResponse()

    async def Teardown(self, request, context):
        def teardown() -> None:
            framework = self.core.framework_for_call(request.framework_id, request.stream_id)
            self.core.teardown(framework, "the framework asked for teardown")

        await run_call(context, teardown)
        return scheduler_pb2.TeardownResponse()
