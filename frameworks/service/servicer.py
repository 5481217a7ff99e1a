"""The `Services` gRPC servicer: thin, typed methods over ServiceScheduler."""

from __future__ import annotations

import grpc
import structlog

from agora.frameworks.service.apps import AppError
from agora.frameworks.service.scheduler import ServiceScheduler
from agora.v1 import services_pb2, services_pb2_grpc

log = structlog.get_logger(__name__)


async def _abort(context: grpc.aio.ServicerContext, error: AppError) -> None:
    await context.abort(getattr(grpc.StatusCode, error.code), str(error))


class ServicesServicer(services_pb2_grpc.ServicesServicer):
    def __init__(self, scheduler: ServiceScheduler) -> None:
        self.scheduler = scheduler

    async def PutApp(self, request, context):
        try:
            app, created, deploying = await self.scheduler.put_app(request.app, request.create_only)
        except AppError as e:
            await _abort(context, e)
        return services_pb2.PutAppResponse(app=app, created=created, deploying=deploying)

    async def GetApp(self, request, context):
        try:
            self.scheduler.require(request.id)
        except AppError as e:
            await _abort(context, e)
        return self.scheduler.status(request.id)

    async def ListApps(self, request, context):
        return services_pb2.ListAppsResponse(
            apps=[self.scheduler.status(app_id) for app_id in sorted(self.scheduler.apps)]
        )

    async def ScaleApp(self, request, context):
        try:
            app = await self.scheduler.scale_app(request.id, request.instances)
        except AppError as e:
            await _abort(context, e)
        return services_pb2.ScaleAppResponse(app=app)

    async def DeleteApp(self, request, context):
        try:
            await self.scheduler.delete_app(request.id)
        except AppError as e:
            await _abort(context, e)
        return services_pb2.DeleteAppResponse()

    async def GetEndpoints(self, request, context):
        try:
            self.scheduler.require(request.app_id)
        except AppError as e:
            await _abort(context, e)
        return self.scheduler.endpoints(request.app_id)

    async def WatchEndpoints(self, request, context):
        try:
            queue = self.scheduler.watch(request.app_id)
        except AppError as e:
            await _abort(context, e)
        try:
            while (endpoints := await queue.get()) is not None:
                yield endpoints
        finally:
            self.scheduler.unwatch(request.app_id, queue)
