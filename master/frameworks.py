"""Frameworks as the master sees them: subscribe, failover, disconnect, teardown, revive and
suppress, and the updates the master sends them."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import structlog

from agora.common import EMPTY, ResourceError, Resources, new_id
from agora.master.allocator import AllocatorProtocol
from agora.master.caller import framework_for_call
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.events import EventLog
from agora.master.ledger import Ledger
from agora.master.offer_cycle import OfferCycle
from agora.master.registry import (
    Framework,
    Registry,
    Session,
    master_status,
)
from agora.master.registry_store import RegistryStore, forget_removed
from agora.master.validation import check_framework_info
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["FrameworkBook"]

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage


class FrameworkBook:
    """The frameworks' side of the master: their sessions, failover timers and teardowns."""

    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        allocator: AllocatorProtocol,
        store: RegistryStore,
        ledger: Ledger,
        offers: OfferCycle,
        clock: Clock,
        counts: MasterCounters,
        master_id: str,
        new_session: Callable[[int], Session] = Session,
    ) -> None:
        self.config, self.reg, self.allocator, self.store = config, reg, allocator, store
        self.ledger, self.offers, self.clock, self.counts = ledger, offers, clock, counts
        self.master_id, self.new_session = master_id, new_session
        self.epoch = 0  # the leader's election epoch (MasterCore sets it)
        self.events = EventLog()  # MasterCore gives the master's one
        # Set when the master stops: streams ending now are its doing, not frameworks leaving.
        self.stopping = False

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
            old = framework.session
            if old is not None and not old.closed:
                old.send(Event(error=Event.Error(message="framework failed over")))
                old.close()
            for offer in self.reg.offers_of_framework(framework_id):
                self.offers.rescind(offer, "framework failed over", notify=False)
            self.offers.end_holds(framework_id)  # a hold ends with its subscription
            if framework.failover_timer is not None:
                framework.failover_timer.cancel()
                framework.failover_timer = None
            framework.info = info
            if placeholder:
                # Now its role and capabilities are known: re-add it with its tasks' resources.
                self.allocator.remove_framework(framework_id)
                self.ledger.add_framework(framework)
                self.allocator.deactivate_framework(framework_id)
            else:
                # A new scheduler version may bring new capabilities (GPU_RESOURCES).
                self.allocator.update_framework(framework_id, info.capabilities)
            framework.unmet = None  # a new subscription tells its demand afresh
            self.allocator.set_wants(framework_id, None)  # and what it wants (its offers went)
            if framework.suppressed:
                framework.suppressed = False
                self.allocator.revive(framework_id)
            failed_over = True
        else:
            framework_id = info.framework_id = framework_id or new_id("framework")
            framework = Framework(info=info, registered_at=self.clock.wall())
            self.ledger.add_framework(framework)
            failed_over = False
        session = self.new_session(self.config.max_send_queue)
        framework.session = session
        framework.stream_id = new_id("stream")
        framework.principal = principal
        self.store.put_framework(info, framework.registered_at, framework.principal)
        self.allocator.activate_framework(framework_id)
        session.send(
            Event(
                subscribed=Event.Subscribed(
                    framework_id=framework_id,
                    stream_id=framework.stream_id,
                    heartbeat_interval_seconds=self.config.heartbeat_interval_seconds,
                    master_id=self.master_id,
                    master_principal=self.config.credentials.principal,
                    epoch=self.epoch,
                )
            )
        )
        while framework.missed_updates:
            session.send(Event(update=Event.Update(status=framework.missed_updates.popleft())))
        self._tell_drains(framework_id, session)
        log.info(
            "framework subscribed",
            framework_id=framework_id,
            name=info.name,
            role=info.role,
            failed_over=failed_over,
        )
        self.events.publish(
            "framework",
            "FRAMEWORK_FAILED_OVER" if failed_over else "FRAMEWORK_SUBSCRIBED",
            framework_id,
            principal,
            name=info.name,
            role=info.role,
        )
        self.offers.wake()
        return framework, session

    def _tell_drains(self, framework_id: str, session: Session) -> None:
        """A (re)subscribed framework hears of every drained agent where it has tasks."""
        for agent in self.reg.agents.values():
            if agent.draining and any(
                t.framework_id == framework_id for t in self.reg.tasks_of_agent(agent.agent_id)
            ):
                session.send(agent.drain_event())

    def disconnected(self, framework: Framework, session: Session) -> None:
        session.close()
        if self.stopping:
            return
        if (
            framework.session is not session
            or self.reg.frameworks.get(framework.framework_id) is not framework
        ):
            return  # failed over to a newer stream, or torn down
        framework.session = None
        self.offers.end_holds(framework.framework_id)
        self.allocator.deactivate_framework(framework.framework_id)
        for offer in self.reg.offers_of_framework(framework.framework_id):
            self.offers.rescind(offer, "framework disconnected", notify=False)
        log.info(
            "framework disconnected",
            framework_id=framework.framework_id,
            failover_timeout=framework.info.failover_timeout_seconds,
        )
        self.start_failover_timer(framework)

    def start_failover_timer(self, framework: Framework, minimum: float = 0.0) -> None:
        """Tears `framework` down unless it re-subscribes within its failover timeout (and at
        least `minimum` seconds)."""
        delay = max(framework.info.failover_timeout_seconds, minimum)
        framework_id = framework.framework_id
        framework.failover_timer = self.clock.call_later(
            delay, lambda: self._failover_expired(framework_id)
        )

    def _failover_expired(self, framework_id: str) -> None:
        framework = self.reg.frameworks.get(framework_id)
        if framework is not None and not framework.connected:
            self.teardown(framework, "failover timeout expired")

    def teardown(self, framework: Framework, reason: str) -> None:
        framework_id = framework.framework_id
        log.info("tearing down framework", framework_id=framework_id, reason=reason)
        self.events.publish(
            "framework", "FRAMEWORK_REMOVED", framework_id, name=framework.info.name, reason=reason
        )
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        self.offers.end_holds(framework_id)
        dropped = [
            self.reg.drop_offer(offer.offer_id, "framework torn down")
            for offer in self.reg.offers_of_framework(framework_id)
        ]
        shutdown = MasterMessage(
            shutdown_framework=MasterMessage.ShutdownFramework(framework_id=framework_id)
        )
        for agent in self.reg.agents.values():
            agent.send(shutdown)
        # Its tasks are being killed (agents got ShutdownFramework); a task's resources are not
        # offered again until its agent reports it gone, which may take its kill grace period
        # (Mesos frees them only then too). Tasks of agents that cannot say so end now.
        reaping = False
        ended_now = []
        for task in self.reg.tasks_of_framework(framework_id):
            runs_on = self.reg.agents.get(task.agent_id)
            status = master_status(
                task.task_id,
                common_pb2.TASK_KILLING,
                framework_id=framework_id,
                agent_id=task.agent_id,
                message=f"framework torn down ({reason}); waiting for the task to end",
                reason="REASON_FRAMEWORK_REMOVED",
                at=self.clock.wall(),
            )
            if runs_on is not None and runs_on.connected:
                task.state, task.last_status = common_pb2.TASK_KILLING, status
                reaping = True
                continue
            status.state = common_pb2.TASK_KILLED
            status.message = f"framework torn down: {reason}"
            task.state, task.last_status = common_pb2.TASK_KILLED, status
            self.reg.complete_task(task)
            ended_now.append(task)
        if reaping:
            self.ledger.reaping.add(framework_id)
            self.allocator.deactivate_framework(framework_id)
            # The allocator keeps the framework for now: give back what it no longer holds.
            for task in ended_now:
                self.ledger.recover_task(task)
            for offer in dropped:
                if offer is not None:
                    self.ledger.release_offer(offer)
        else:
            self.allocator.remove_framework(framework_id)
        framework.send(Event(error=Event.Error(message=f"framework removed: {reason}")))
        if framework.session is not None:
            framework.session.close()
        framework.session = None
        del self.reg.frameworks[framework_id]
        self.store.remove_framework(framework_id, reason)
        forget_removed(
            self.store, "framework", self.reg.note_removed("framework", framework_id, reason)
        )
        self.offers.wake()

    def for_call(
        self, framework_id: str, stream_id: str, principal: str | None = None
    ) -> Framework:
        """The caller's framework, refusing unknown ids and stale or foreign streams."""
        return framework_for_call(self.reg, framework_id, stream_id, principal)

    def find(self, text: str) -> Framework:
        """A framework by id, or by name when the name is unique."""
        if text in self.reg.frameworks:
            return self.reg.frameworks[text]
        named = [f for f in self.reg.frameworks.values() if f.info.name == text]
        if len(named) == 1:
            return named[0]
        if named:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(named)} frameworks are named {text!r}; give a framework id",
            )
        raise CallError(grpc.StatusCode.NOT_FOUND, f"no framework with id or name {text!r}")

    def adopt(self, framework_id: str) -> None:
        """An agent reports tasks of a framework the master has no record of (its record was
        lost): keep its tasks and wait for it like a recovered one."""
        framework = Framework(
            info=common_pb2.FrameworkInfo(framework_id=framework_id),
            registered_at=self.clock.wall(),
        )
        self.ledger.add_framework(framework)
        self.allocator.deactivate_framework(framework_id)
        self.start_failover_timer(framework, minimum=self.config.agent_timeout_seconds)

    def send_update(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        """Sends a status update to its framework, or keeps a master-made one for the
        framework's re-subscription."""
        framework = self.reg.frameworks.get(framework_id)
        if framework is None:
            return
        if framework.send(Event(update=Event.Update(status=status))):
            self.counts.updates_forwarded += 1
        elif not status.uuid:
            # An agent resends its own updates until acknowledged, but nobody resends the
            # master's (TASK_LOST of a removed agent), and implicit reconciliation reports live
            # tasks only: keep it for the re-subscription or the framework never hears of it.
            framework.missed_updates.append(status)

    def revive(self, request: scheduler_pb2.ReviveRequest) -> None:
        framework = self.for_call(request.framework_id, request.stream_id)
        wants = _wants(request)
        framework.suppressed = False
        self.allocator.revive(framework.framework_id)
        if wants is not None:
            self._set_wants(framework, *wants)
        else:  # a plain revive asks for everything, as in Mesos
            self.allocator.set_wants(framework.framework_id, None)
        log.debug(
            "framework revived", framework_id=framework.framework_id, wants=wants and str(wants[0])
        )
        self.offers.wake()

    def demand(self, request: scheduler_pb2.DemandRequest) -> None:
        """What the framework waits to place (for preemption); an empty request clears it."""
        framework = self.for_call(request.framework_id, request.stream_id)
        try:
            unmet = Resources.from_proto(request.unmet)
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"unmet: {e}") from None
        wants = _wants(request)
        framework.unmet = unmet or None
        framework.unmet_priority = request.priority
        if wants is not None:
            self._set_wants(framework, *wants)
            self.offers.wake_if_reopened()

    def _set_wants(self, framework: Framework, wants: Resources, smallest: Resources) -> None:
        """Offers sized by what the framework waits for (scheduler.proto, Wants): its offers
        out now count as covering part of it."""
        out = EMPTY
        for offer in self.reg.offers_of_framework(framework.framework_id):
            if not offer.revocable:
                out = out + offer.resources
        self.allocator.set_wants(framework.framework_id, wants, out, smallest or None)

    def suppress(self, request: scheduler_pb2.SuppressRequest) -> None:
        framework = self.for_call(request.framework_id, request.stream_id)
        framework.suppressed = True
        self.allocator.suppress(framework.framework_id)
        log.debug("framework suppressed", framework_id=framework.framework_id)


def _wants(request) -> tuple[Resources, Resources] | None:
    """The request's Wants as (in total, the smallest task), None when unset; INVALID_ARGUMENT
    if malformed."""
    if not request.HasField("wants"):
        return None
    try:
        total = Resources.from_proto(request.wants.resources)
    except ResourceError as e:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"wants: {e}; give what the framework waits to launch in total, e.g. cpus:5;mem:640",
        ) from None
    if not any(amount > 0 for amount in total.scalars.values()):
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "wants names no amount of any resource: give what the framework waits to launch "
            "in total (e.g. cpus:5;mem:640), or Suppress to ask for no offers",
        )
    try:
        smallest = Resources.from_proto(request.wants.smallest)
    except ResourceError as e:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"wants.smallest: {e}; give the least of each resource a waiting task asks for, "
            "e.g. cpus:0.5;mem:64",
        ) from None
    return total, smallest
