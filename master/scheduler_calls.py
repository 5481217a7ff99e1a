"""Offers out and scheduler calls in: allocation cycles, Accept, Decline, Kill, Reconcile..."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Container, Mapping
from dataclasses import dataclass

import grpc
import structlog

from agora.common import new_id
from agora.master import limits
from agora.master.errors import CallError, Reason
from agora.master.offers import check_offers, plan_launch, refuse_seconds
from agora.master.registry import (
    RECOVERING,
    Framework,
    Offer,
    Task,
    master_status,
)
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage


class SchedulerCalls:
    """MasterCore's offer and task calls (a mixin: state lives on MasterCore)."""

    def allocate(self, agent_ids: list[str] | None = None) -> int:
        """One allocation cycle over `agent_ids` (None: every agent): grants become offers,
        one OFFERS event per framework."""
        now = self.clock()
        by_framework: dict[str, list[common_pb2.Offer]] = defaultdict(list)
        for grant in self.allocator.allocate(now, agent_ids):
            framework = self.reg.frameworks.get(grant.framework_id)
            agent = self.reg.agents.get(grant.agent_id)
            if framework is None or not framework.connected or agent is None or not agent.connected:
                self._recover(grant.framework_id, grant.agent_id, grant.resources)
                continue
            offer = Offer(
                new_id("offer"), grant.framework_id, grant.agent_id, grant.resources, created_at=now
            )
            self.reg.add_offer(offer)
            by_framework[grant.framework_id].append(self.offer_proto(offer))
        for framework_id, offers in by_framework.items():
            self.reg.frameworks[framework_id].session.send(
                Event(offers=Event.Offers(offers=offers))
            )
            log.debug("offers sent", framework_id=framework_id, count=len(offers))
        self._count_offers(by_framework, agent_ids, now)
        return sum(len(o) for o in by_framework.values())

    def _count_offers(self, by_framework, agent_ids: list[str] | None, now: float) -> None:
        """Offers sent, and for each the time since its agent's resources became free; then
        forgets the free times this cycle looked at (offered or not: what a filter holds back
        is not latency)."""
        freed = self._freed_at
        everyone = freed.get(None)
        for offers in by_framework.values():
            self.counts.offers_sent += len(offers)
            for offer in offers:
                since = freed.get(offer.agent_id, everyone)
                if since is not None:
                    self.counts.observe_offer_latency(max(0.0, now - since))
        if agent_ids is None:
            freed.clear()
        else:
            for agent_id in agent_ids:
                freed.pop(agent_id, None)

    def offer_proto(self, offer: Offer) -> common_pb2.Offer:
        agent = self.reg.agents[offer.agent_id]
        return common_pb2.Offer(
            offer_id=offer.offer_id,
            framework_id=offer.framework_id,
            agent_id=offer.agent_id,
            hostname=agent.info.hostname,
            resources=offer.resources.to_proto(),
            attributes=agent.info.attributes,
            agent_address=agent.info.address,
        )

    def expire_offers(self) -> None:
        timeout = self.config.offer_timeout_seconds
        if timeout is None:
            return
        now = self.clock()
        for offer in list(self.reg.offers.values()):
            if now - offer.created_at >= timeout:
                self.counts.offers_timed_out += 1
                self._rescind(offer, f"offer timed out after {timeout:g} s")

    def accept(self, request: scheduler_pb2.AcceptRequest) -> list[str]:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        # A view, not a set of every task: Accept stays O(tasks in the call).
        active = _LiveTaskIds(self.reg.tasks, self.reg.completed, framework_id)
        plan = plan_launch(
            framework_id,
            request,
            self.reg.offers,
            self.reg.gone_offers,
            active,
            self.config.default_refuse_seconds,
        )
        agent = self.reg.agents[plan.agent_id]
        self.counts.offers_accepted += len(plan.offer_ids)
        for offer_id in plan.offer_ids:
            self.reg.drop_offer(offer_id, "already accepted")
        launched = []
        for task_info, resources in plan.tasks:
            info = common_pb2.TaskInfo()
            info.CopyFrom(task_info)
            info.agent_id = plan.agent_id
            task = Task(framework_id, plan.agent_id, info, resources)
            task.last_status = master_status(
                info.task_id,
                common_pb2.TASK_STAGING,
                framework_id=framework_id,
                agent_id=plan.agent_id,
                message="launching",
                reason="",
            )
            self.reg.add_task(task)
            agent.session.send(
                MasterMessage(
                    run_task=MasterMessage.RunTask(
                        framework_id=framework_id,
                        task=info,
                        framework=framework.info,
                        framework_principal=framework.principal,
                    )
                )
            )
            launched.append(info.task_id)
        self.counts.tasks_launched += len(launched)
        if plan.unused:
            self._recover(framework_id, plan.agent_id, plan.unused, refuse=plan.refuse_seconds)
        log.info(
            "offers accepted",
            framework_id=framework_id,
            agent_id=plan.agent_id,
            offers=list(plan.offer_ids),
            tasks=launched,
        )
        self.wake_allocation(plan.agent_id)
        return launched

    def decline(self, request: scheduler_pb2.DeclineRequest) -> None:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        refuse = refuse_seconds(request.filters, self.config.default_refuse_seconds)
        # A decline racing a rescind is normal: skip offers that are already gone.
        live = [i for i in request.offer_ids if i not in self.reg.gone_offers]
        if not request.offer_ids:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "no offer_ids given")
        if not live:
            return
        offers = check_offers(framework.framework_id, live, self.reg.offers, self.reg.gone_offers)
        self.counts.offers_declined += len(offers)
        for offer in offers:
            self.reg.drop_offer(offer.offer_id, "declined")
            self._recover(offer.framework_id, offer.agent_id, offer.resources, refuse=refuse)
            self.wake_allocation(offer.agent_id)
        log.info(
            "offers declined",
            framework_id=framework.framework_id,
            offers=[o.offer_id for o in offers],
            refuse_seconds=refuse,
        )

    def revive(self, request: scheduler_pb2.ReviveRequest) -> None:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework.suppressed = False
        self.allocator.revive(framework.framework_id)
        log.info("framework revived", framework_id=framework.framework_id)
        self.wake_allocation()

    def suppress(self, request: scheduler_pb2.SuppressRequest) -> None:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework.suppressed = True
        self.allocator.suppress(framework.framework_id)
        log.info("framework suppressed", framework_id=framework.framework_id)

    def kill(self, request: scheduler_pb2.KillRequest) -> None:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        self.kill_task(framework, request.task_id, request.agent_id, request.grace_period_seconds)

    def operator_kill(self, framework_key: str, task_id: str, grace: float) -> Framework:
        """An operator's kill of a live task of any framework (connected or not); NOT_FOUND for
        a task the master does not know as running. Returns the task's framework."""
        framework = self.find_framework(framework_key)
        if (framework.framework_id, task_id) not in self.reg.tasks:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"framework {framework.framework_id} has no running task {task_id!r}",
            )
        self.kill_task(framework, task_id, "", grace)
        return framework

    def kill_task(self, framework: Framework, task_id: str, agent_id: str, grace: float) -> None:
        """Asks the task's agent to kill it (SIGTERM, then SIGKILL after `grace`)."""
        if not math.isfinite(grace) or grace < 0:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"grace_period_seconds must be 0 or more, got {grace}",
            )
        limits.check_kill_grace("grace_period_seconds", grace, self.config.max_kill_grace_seconds)
        if not task_id:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "task_id is empty")
        task = self.reg.tasks.get((framework.framework_id, task_id))
        ended = self.reg.completed.get((framework.framework_id, task_id))
        if task is None and ended is not None:
            # A kill racing the task's end: say how it ended, not LOST (which a framework
            # would take for a failure of a task that in fact finished).
            self._send_update(framework.framework_id, self._reconciled(ended))
            return
        if task is None and self._may_be_recovering(agent_id):
            raise CallError(
                grpc.StatusCode.UNAVAILABLE,
                f"task {task_id} may run on an agent that has not "
                "re-registered since the master restarted; retry the kill later",
            )
        if task is None:
            self._send_update(
                framework.framework_id,
                master_status(
                    task_id,
                    common_pb2.TASK_LOST,
                    framework_id=framework.framework_id,
                    agent_id=agent_id,
                    reason="REASON_RECONCILIATION",
                    message=f"kill of task {task_id}: the master knows no such active task",
                ),
            )
            return
        agent = self.reg.agents.get(task.agent_id)
        if agent is None or not agent.connected:
            raise CallError(
                grpc.StatusCode.UNAVAILABLE,
                f"agent {task.agent_id} of task {task.task_id} is disconnected; "
                "retry the kill later",
            )
        agent.session.send(
            MasterMessage(
                kill_task=MasterMessage.KillTask(
                    framework_id=framework.framework_id,
                    task_id=task.task_id,
                    grace_period_seconds=grace,
                )
            )
        )
        log.info(
            "kill sent",
            framework_id=framework.framework_id,
            task_id=task.task_id,
            agent_id=task.agent_id,
        )

    def acknowledge(self, request: scheduler_pb2.AcknowledgeRequest) -> int:
        """Applies every acknowledgement of the call, or none if any is invalid; returns how
        many were sent on to agents."""
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        acks = check_acknowledgements(request, self.reg.agents)
        for ack in acks:
            task = self.reg.find_task(framework_id, ack.task_id)
            if task is not None and task.final_uuid == ack.uuid:
                task.final_uuid = b""  # its id may be used again
            # A disconnected agent resends the update when it is back; the framework acks again.
            self._send_ack(self.reg.agents[ack.agent_id], framework_id, ack.task_id, ack.uuid)
        self.counts.updates_acknowledged += len(acks)
        return len(acks)

    def reconcile(self, request: scheduler_pb2.ReconcileRequest) -> int:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        statuses = []
        if not request.tasks:
            for task in self.reg.tasks_of_framework(framework_id):
                statuses.append(self._reconciled(task))
        # Once per call, not per task: it looks at every agent.
        anyone_recovering = bool(request.tasks) and self._may_be_recovering("")
        for wanted in request.tasks:
            task = self.reg.find_task(framework_id, wanted.task_id)
            if task is not None:
                statuses.append(self._reconciled(task))
                continue
            if self._may_be_recovering(wanted.agent_id) if wanted.agent_id else anyone_recovering:
                continue  # its agent may still re-register with it: answer nothing yet
            statuses.append(
                master_status(
                    wanted.task_id,
                    common_pb2.TASK_UNKNOWN,
                    framework_id=framework_id,
                    agent_id=wanted.agent_id,
                    reason="REASON_RECONCILIATION",
                    message="the master knows no such task",
                )
            )
        for status in statuses:
            self._send_update(framework_id, status)
        return len(statuses)

    def _may_be_recovering(self, agent_id: str) -> bool:
        """Could a task the master does not know still be reported by `agent_id` (any agent
        when empty), which has not re-registered since the master restarted?"""
        if agent_id:
            agent = self.reg.agents.get(agent_id)
            return agent is not None and agent.state == RECOVERING
        return any(a.state == RECOVERING for a in self.reg.agents.values())

    def _reconciled(self, task: Task) -> common_pb2.TaskStatus:
        message = task.last_status.message if task.last_status is not None else ""
        status = master_status(
            task.task_id,
            task.state,
            framework_id=task.framework_id,
            agent_id=task.agent_id,
            reason="REASON_RECONCILIATION",
            message=message,
        )
        if task.last_status is not None and task.last_status.HasField("exit_code"):
            status.exit_code = task.last_status.exit_code
        # As Mesos does: a framework that lost an update still learns the health verdict.
        if task.last_status is not None and task.last_status.HasField("healthy"):
            status.healthy = task.last_status.healthy
        return status


@dataclass(frozen=True)
class Ack:
    """One acknowledgement of an AcknowledgeRequest, checked and ready to send to its agent."""

    agent_id: str
    task_id: str
    uuid: bytes


def check_acknowledgements(
    request: scheduler_pb2.AcknowledgeRequest, agents: Container[str]
) -> list[Ack]:
    """The acknowledgements a request carries (the singular fields first, then the list), less
    those of master-generated updates (empty uuid), which need none.

    Every entry is checked before any is applied, so that a refused call leaves nothing
    half-done: the error names the first bad entry, and the client fixes it and resends.
    """
    entries: list[tuple[str, str, str, bytes]] = []  # (name in errors, agent_id, task_id, uuid)
    if request.agent_id or request.task_id or request.uuid:
        name = "the acknowledgement in agent_id/task_id/uuid"
        entries.append((name, request.agent_id, request.task_id, request.uuid))
    for i, entry in enumerate(request.acknowledgements):
        entries.append((f"acknowledgements[{i}]", entry.agent_id, entry.task_id, entry.uuid))
    if not entries:
        raise CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            "no acknowledgement given: set agent_id, task_id and uuid to those of the update "
            "(and add any more updates to acknowledgements)",
        )
    acks = []
    for name, agent_id, task_id, uuid in entries:
        if not uuid:
            continue  # master-generated updates need no acknowledgement
        error = _ack_error(agent_id, uuid, agents)
        if error is not None:
            more = ""
            if len(entries) > 1:
                more = (
                    f"; none of the call's {len(entries)} acknowledgements was applied: "
                    "fix or drop that entry and send the call again"
                )
            raise CallError(
                error.code, f"{name} (task {task_id!r}): {error.message}{more}", error.reason
            )
        acks.append(Ack(agent_id, task_id, uuid))
    return acks


def _ack_error(agent_id: str, uuid: bytes, agents: Container[str]) -> CallError | None:
    if len(uuid) != 16:
        return CallError(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"uuid must be the 16 bytes of the update being acknowledged, got {len(uuid)}",
        )
    if agent_id not in agents:
        return CallError(
            grpc.StatusCode.NOT_FOUND,
            f"agent {agent_id!r} is not registered; the update's agent_id names it",
            Reason.AGENT_UNKNOWN,
        )
    return None


class _LiveTaskIds:
    """`task_id in ids`: is the id in use by the framework, by a live task or by an ended one
    whose final update is not acknowledged yet (see Task.final_uuid)?"""

    def __init__(
        self,
        tasks: Mapping[tuple[str, str], Task],
        completed: Mapping[tuple[str, str], Task],
        framework_id: str,
    ) -> None:
        self.tasks, self.completed, self.framework_id = tasks, completed, framework_id

    def __contains__(self, task_id: object) -> bool:
        if not isinstance(task_id, str):
            return False
        key = (self.framework_id, task_id)
        if key in self.tasks:
            return True
        ended = self.completed.get(key)
        return ended is not None and bool(ended.final_uuid)
