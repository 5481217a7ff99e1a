"""The `Services` gRPC servicer: thin, typed methods over ServiceScheduler."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import grpc
import structlog

from agora.common.authz import Action, AllowAll, Decision, refusal_message
from agora.common.credentials import caller_principal
from agora.common.redaction import without_environments
from agora.frameworks.sdk.ownership import (
    acting_principal,
    may_act,
    owner_of,
    refusal,
    stamp_owner,
)
from agora.frameworks.service import apps as appdefs
from agora.frameworks.service.apps import AppError
from agora.frameworks.service.scheduler import ServiceScheduler
from agora.v1 import services_pb2, services_pb2_grpc

log = structlog.get_logger(__name__)


async def _abort(context: grpc.aio.ServicerContext, error: AppError) -> None:
    await context.abort(getattr(grpc.StatusCode, error.code), str(error))


class ServicesServicer(services_pb2_grpc.ServicesServicer):
    def __init__(
        self,
        scheduler: ServiceScheduler,
        authorize: Callable[[str, Action, str], Decision] | None = None,
    ) -> None:
        self.authorize = authorize or AllowAll().authorize  # the daemon's ACLs (manage_apps)
        self.scheduler = scheduler

    def _acting(self, context) -> str:
        """Who acts: the caller, or the person the master relays a call for (the dashboard's
        scale)."""
        driver = self.scheduler.driver
        return acting_principal(context, driver.master_principal if driver is not None else "")

    async def _owned(self, app_id: str, action: str, context, role: str = "") -> None:
        """Refuses (PERMISSION_DENIED) a change to an app the caller may not manage in its
        role (the ACLs' manage_apps) or does not own. `role`: the app's, when it is new."""
        existing = self.scheduler.apps.get(app_id)
        principal = self._acting(context)
        role = (existing.app.role if existing is not None else role) or "*"
        decision = self.authorize(principal, Action.MANAGE_APP, role)
        if not decision.allowed:
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                refusal_message(principal, Action.MANAGE_APP, role, decision),
            )
        if existing is not None and not may_act(principal, existing.app.labels):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                refusal(principal, action, f"app {app_id}", existing.app.labels),
            )

    @staticmethod
    def _shown(status: services_pb2.AppStatus, principal: str) -> services_pb2.AppStatus:
        """The status as `principal` may see it: no environment values unless it owns the app."""
        if may_act(principal, status.app.labels):
            return status
        return without_environments(status)

    async def PutApp(self, request, context):
        await self._owned(request.app.id, "update", context, role=request.app.role)
        existing = self.scheduler.apps.get(request.app.id)
        if existing is not None and request.app.role and request.app.role != existing.app.role:
            # Moving it to another role is managing it there as well.
            await self._owned("", "update", context, role=request.app.role)
        app = services_pb2.App()
        app.CopyFrom(request.app)
        stamp_owner(
            app.labels,
            self._acting(context),
            keep=owner_of(existing.app.labels) if existing is not None else None,
        )
        try:
            # Validated first on a thread: compiling LIKE patterns (bounded, see constraints.py)
            # must not hold the event loop, which `agora local` shares with the master. The
            # scheduler's own validation then finds them compiled.
            await asyncio.to_thread(appdefs.normalize, app)
            app, created, deploying = await self.scheduler.put_app(app, request.create_only)
        except AppError as e:
            await _abort(context, e)
        return services_pb2.PutAppResponse(app=app, created=created, deploying=deploying)

    async def GetApp(self, request, context):
        try:
            self.scheduler.require(request.id)
        except AppError as e:
            await _abort(context, e)
        return self._shown(self.scheduler.status(request.id), caller_principal(context))

    async def ListApps(self, request, context):
        principal = caller_principal(context)
        return services_pb2.ListAppsResponse(
            apps=[
                self._shown(self.scheduler.status(app_id), principal)
                for app_id in sorted(self.scheduler.apps)
            ]
        )

    async def ScaleApp(self, request, context):
        await self._owned(request.id, "scale", context)
        try:
            app = await self.scheduler.scale_app(request.id, request.instances)
        except AppError as e:
            await _abort(context, e)
        return services_pb2.ScaleAppResponse(app=app)

    async def DeleteApp(self, request, context):
        await self._owned(request.id, "delete", context)
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
