"""Framework sessions: subscribe, failover, disconnect, teardown, call authentication."""

from __future__ import annotations

import asyncio
import time

import grpc
import structlog

from agora.common import new_id
from agora.master.errors import CallError, Reason
from agora.master.registry import (
    Framework,
    Session,
    master_status,
)
from agora.master.validation import check_framework_info
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage


class FrameworkHandling:
    """MasterCore's framework sessions (a mixin: state lives on MasterCore)."""

    def subscribe(
        self, request_info: common_pb2.FrameworkInfo, principal: str = ""
    ) -> tuple[Framework, Session]:
        """Subscribes a new framework, or fails one over (same id) for its own principal."""
        info = common_pb2.FrameworkInfo()
        info.CopyFrom(request_info)
        check_framework_info(info)
        info.role = info.role or "*"
        framework_id = info.framework_id
        if framework_id in self.reg.removed_frameworks:
            raise CallError(
                grpc.StatusCode.FAILED_PRECONDITION,
                reason=Reason.FRAMEWORK_REMOVED,
                message=f"framework {framework_id} was torn down "
                f"({self.reg.removed_frameworks[framework_id]}); subscribe without "
                "a framework_id to start afresh",
            )
        framework = self.reg.frameworks.get(framework_id) if framework_id else None
        if framework is not None and framework.principal and framework.principal != principal:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal or 'an anonymous caller'} may not fail over to framework "
                f"{framework_id}, which {framework.principal} subscribed",
                Reason.PERMISSION_DENIED,
            )
        if framework is not None:
            placeholder = not framework.info.name  # adopted from an agent's report
            if not placeholder and framework.role != info.role:
                raise CallError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"framework {framework_id} has role {framework.role!r}; it "
                    f"cannot fail over into role {info.role!r}",
                    Reason.ROLE_MISMATCH,
                )
            if framework.connected:
                framework.session.send(Event(error=Event.Error(message="framework failed over")))
                framework.session.close()
            for offer in self.reg.offers_of_framework(framework_id):
                self._rescind(offer, "framework failed over", notify=False)
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
                framework.failover_timer = None
            framework.info = info
            if placeholder:
                # Now its role and capabilities are known: re-add it with its tasks' resources.
                self.allocator.remove_framework(framework_id)
                self._add_framework_to_allocator(framework)
                self.allocator.deactivate_framework(framework_id)
            else:
                # A new scheduler version may bring new capabilities (GPU_RESOURCES).
                self.allocator.update_framework(framework_id, info.capabilities)
            if framework.suppressed:
                framework.suppressed = False
                self.allocator.revive(framework_id)
            failed_over = True
        else:
            framework_id = info.framework_id = framework_id or new_id("framework")
            framework = Framework(info=info, registered_at=time.time())
            self._add_framework_to_allocator(framework)
            failed_over = False
        session = Session(self.config.max_send_queue)
        framework.session = session
        framework.stream_id = new_id("stream")
        framework.principal = principal
        self.store.put_framework(info, framework.registered_at)
        self.allocator.activate_framework(framework_id)
        session.send(
            Event(
                subscribed=Event.Subscribed(
                    framework_id=framework_id,
                    stream_id=framework.stream_id,
                    heartbeat_interval_seconds=self.config.heartbeat_interval_seconds,
                    master_id=self.master_id,
                )
            )
        )
        while framework.missed_updates:
            session.send(Event(update=Event.Update(status=framework.missed_updates.popleft())))
        log.info(
            "framework subscribed",
            framework_id=framework_id,
            name=info.name,
            role=info.role,
            failed_over=failed_over,
        )
        self.wake_allocation()
        return framework, session

    def framework_disconnected(self, framework: Framework, session: Session) -> None:
        session.close()
        if self.stopping:
            return
        if (
            framework.session is not session
            or self.reg.frameworks.get(framework.framework_id) is not framework
        ):
            return  # failed over to a newer stream, or torn down
        framework.session = None
        self.allocator.deactivate_framework(framework.framework_id)
        for offer in self.reg.offers_of_framework(framework.framework_id):
            self._rescind(offer, "framework disconnected", notify=False)
        log.info(
            "framework disconnected",
            framework_id=framework.framework_id,
            failover_timeout=framework.info.failover_timeout_seconds,
        )
        self._start_failover_timer(framework)

    def _start_failover_timer(self, framework: Framework, minimum: float = 0.0) -> None:
        delay = max(framework.info.failover_timeout_seconds, minimum)
        loop = asyncio.get_running_loop()
        framework.failover_timer = loop.call_later(
            delay, self._failover_expired, framework.framework_id
        )

    def _failover_expired(self, framework_id: str) -> None:
        framework = self.reg.frameworks.get(framework_id)
        if framework is not None and not framework.connected:
            self.teardown(framework, "failover timeout expired")

    def teardown(self, framework: Framework, reason: str) -> None:
        framework_id = framework.framework_id
        log.info("tearing down framework", framework_id=framework_id, reason=reason)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        dropped = [
            self.reg.drop_offer(offer.offer_id, "framework torn down")
            for offer in self.reg.offers_of_framework(framework_id)
        ]
        for agent in self.reg.agents.values():
            if agent.connected:
                agent.session.send(
                    MasterMessage(
                        shutdown_framework=MasterMessage.ShutdownFramework(
                            framework_id=framework_id
                        )
                    )
                )
        # Its tasks are being killed (agents got ShutdownFramework); a task's resources are not
        # offered again until its agent reports it gone, which may take its kill grace period
        # (Mesos frees them only then too). Tasks of agents that cannot say so end now.
        reaping = False
        ended_now = []
        for task in self.reg.tasks_of_framework(framework_id):
            agent = self.reg.agents.get(task.agent_id)
            status = master_status(
                task.task_id,
                common_pb2.TASK_KILLING,
                framework_id=framework_id,
                agent_id=task.agent_id,
                message=f"framework torn down ({reason}); waiting for the task to end",
                reason="REASON_FRAMEWORK_REMOVED",
            )
            if agent is not None and agent.connected:
                task.state, task.last_status = common_pb2.TASK_KILLING, status
                reaping = True
                continue
            status.state = common_pb2.TASK_KILLED
            status.message = f"framework torn down: {reason}"
            task.state, task.last_status = common_pb2.TASK_KILLED, status
            self.reg.complete_task(task)
            ended_now.append(task)
        if reaping:
            self._reaping.add(framework_id)
            self.allocator.deactivate_framework(framework_id)
            # The allocator keeps the framework for now: give back what it no longer holds.
            for task in ended_now:
                self._recover(framework_id, task.agent_id, task.resources)
            for offer in dropped:
                if offer is not None:
                    self._recover(framework_id, offer.agent_id, offer.resources)
        else:
            self.allocator.remove_framework(framework_id)
        if framework.connected:
            framework.session.send(Event(error=Event.Error(message=f"framework removed: {reason}")))
            framework.session.close()
        framework.session = None
        del self.reg.frameworks[framework_id]
        self.store.remove_framework(framework_id, reason)
        self.forget_removed("framework", self.reg.note_removed("framework", framework_id, reason))
        self.wake_allocation()

    def framework_for_call(
        self, framework_id: str, stream_id: str, principal: str | None = None
    ) -> Framework:
        """The caller's framework, refusing unknown ids and stale or foreign streams."""
        framework = self.reg.frameworks.get(framework_id)
        if framework is None:
            if framework_id in self.reg.removed_frameworks:
                raise CallError(
                    grpc.StatusCode.NOT_FOUND,
                    f"framework {framework_id} was torn down; subscribe afresh",
                    Reason.FRAMEWORK_REMOVED,
                )
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"framework {framework_id!r} is not subscribed; call Subscribe first",
                Reason.FRAMEWORK_UNKNOWN,
            )
        if not framework.connected or stream_id != framework.stream_id:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"stream {stream_id!r} is not the current subscription of framework "
                f"{framework_id}; use the stream_id from your latest SUBSCRIBED event",
                Reason.STREAM_STALE,
            )
        if principal is not None and framework.principal and principal != framework.principal:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal or 'an anonymous caller'} may not act for framework "
                f"{framework_id}, which {framework.principal} subscribed",
                Reason.PERMISSION_DENIED,
            )
        return framework
