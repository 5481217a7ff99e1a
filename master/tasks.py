"""Tasks as the master sees them: launches (Accept), kills, status updates from agents and
their acknowledgements from frameworks, reconciliation.

    framework --Accept--> accept: offers checked (offers.plan_launch, pure), RunTask to the agent
    agent --StatusUpdate--> status_update: the task's state; a terminal one frees its resources
      --> the framework --Acknowledge--> acknowledge --> StatusUpdateAck to the agent
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from agora.common.failures import Recently
from agora.common.task_states import REASON_PREEMPTED, is_terminal
from agora.master import limits
from agora.master.allocator.drf import scalar_vector
from agora.master.allocator.quota import add_into
from agora.master.allocator.revocable import excess as revocable_excess
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.events import EventLog
from agora.master.frameworks import FrameworkBook
from agora.master.ledger import Ledger
from agora.master.offer_cycle import OfferCycle
from agora.master.offers import plan_launch
from agora.master.registry import (
    RECOVERING,
    Agent,
    Framework,
    Registry,
    Task,
    master_status,
)
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

__all__ = ["TaskBook", "check_acknowledgements"]

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage
KNOWN_STATES = frozenset(common_pb2.TaskState.values()) - {common_pb2.TASK_STATE_UNSPECIFIED}


class TaskBook:
    """The tasks' side of the master: launching, killing, updates and acknowledgements."""

    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        ledger: Ledger,
        offers: OfferCycle,
        frameworks: FrameworkBook,
        clock: Clock,
        counts: MasterCounters,
    ) -> None:
        self.config, self.reg, self.ledger, self.offers = config, reg, ledger, offers
        self.frameworks, self.clock, self.counts = frameworks, clock, counts
        # (framework id, task id) -> the preemption that ended it, if one did and the master
        # keeps it (master/preemptions.py): reconciliation answers it after a failover too.
        self.preempted: Callable[[str, str], Any] = lambda framework_id, task_id: None
        # Revocable tasks whose kill was sent for an ordinary launch (revoke_for), and how one
        # is stopped (MasterCore gives Preemptions.revoke: a notice, the kill, the record).
        self._revoking: set[tuple[str, str]] = set()
        self.revoke: Callable[[Task, str, str], object] = self._kill_revoked
        self._unknown_said = Recently()  # updates for unknown tasks: said once a minute an agent
        self.events = EventLog()  # MasterCore gives the master's one

    def accept(self, request: scheduler_pb2.AcceptRequest) -> list[str]:
        framework = self.frameworks.for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        # A view, not a set of every task: Accept stays O(tasks in the call).
        active = _LiveTaskIds(self.reg.tasks, self.reg.completed, framework_id)
        try:
            plan = plan_launch(
                framework_id,
                request,
                self.reg.offers,
                self.reg.gone_offers,
                active,
                self.config.default_refuse_seconds,
                (self.config.min_task_cpus, self.config.min_task_mem),
            )
            offers = [self.reg.offers[offer_id] for offer_id in plan.offer_ids]
            revocable = any(offer.revocable for offer in offers)
            if revocable and not all(offer.revocable for offer in offers):
                raise CallError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    "revocable offers cannot be merged with others in one Accept: launch on "
                    "them apart (their tasks may be stopped at any time)",
                )
            if revocable:
                self._check_lent_room(plan)
            optimistic = not revocable and not all(offer.exclusive for offer in offers)
            if optimistic:
                # Checked against what is free now; the first Accept wins (OfferCycle.take).
                self.offers.take(framework_id, plan, offers)
        except CallError as e:
            if e.code == grpc.StatusCode.ABORTED:  # an optimistic conflict
                self.counts.accepts_aborted += 1
            raise
        agent = self.reg.agents[plan.agent_id]
        if not optimistic:
            for offer in offers:
                self.reg.drop_offer(offer.offer_id, "already accepted")
                self.offers.answered(offer)
        # That much less waits (offers sized by demand), on lent resources too.
        self.ledger.allocator.launched(framework_id, plan.offered - plan.unused)
        if revocable:
            # Lent, not allocated: the tasks' use is noted apart (allocator/revocable.py).
            self.ledger.allocator.use_revocable(
                framework_id, plan.agent_id, plan.offered - plan.unused
            )
        self.counts.offers_accepted += len(plan.offer_ids)
        launched = []
        for task_info, resources in plan.tasks:
            info = common_pb2.TaskInfo()
            info.CopyFrom(task_info)
            info.agent_id = plan.agent_id
            info.revocable = revocable  # the master's word, whatever the framework said
            task = Task(framework_id, plan.agent_id, info, resources)
            task.framework_name = framework.info.name
            task.last_status = master_status(
                info.task_id,
                common_pb2.TASK_STAGING,
                framework_id=framework_id,
                agent_id=plan.agent_id,
                message="launching",
                reason="",
                at=self.clock.wall(),
            )
            self.reg.add_task(task)
            self._published(task.last_status)
            agent.send(
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
        if plan.unused and not optimistic and not revocable:
            self.ledger.recover(
                framework_id, plan.agent_id, plan.unused, refuse=plan.refuse_seconds
            )
        if not revocable and self.ledger.allocator.lends_on(plan.agent_id):
            # Ordinary tasks may now need what is lent there (a dict lookup when nothing is).
            self.offers.rescind_lent(plan.agent_id)
            self.revoke_for(framework, plan.agent_id)
        log.debug(
            "offers accepted",
            framework_id=framework_id,
            agent_id=plan.agent_id,
            offers=list(plan.offer_ids),
            tasks=launched,
        )
        self.offers.wake(plan.agent_id)
        return launched

    def _check_lent_room(self, plan) -> None:
        """A revocable offer lends room no task used when it was made; if tasks launched since
        use it, it is no longer there to lend: ABORTED, as an optimistic conflict."""
        live = [t.resources for t in self.reg.tasks_of_agent(plan.agent_id)]
        wanted = [resources for _, resources in plan.tasks]
        if revocable_excess(self.reg.agents[plan.agent_id].total, live + wanted):
            raise CallError(
                grpc.StatusCode.ABORTED,
                f"the revocable offer on agent {plan.agent_id} lends room that tasks launched "
                "since it was made now use. Nothing was launched: re-plan with fresh offers",
                Reason.OFFER_CONFLICT,
            )

    def revoke_for(self, framework: Framework, agent_id: str) -> None:
        """An ordinary launch on `agent_id` needs room that revocable tasks use: as many of
        them as that takes are stopped at once, the youngest first (Mesos kills revocable
        tasks as soon as their resources are wanted: they were only lent)."""
        tasks = [t for t in self.reg.tasks_of_agent(agent_id) if not is_terminal(t.state)]
        # Tasks dying already (a revocation sent, or TASK_KILLING reported, which after a
        # failover is all the master knows of one) are not stopped again.
        dying = {t.key for t in tasks if t.state == common_pb2.TASK_KILLING} | self._revoking
        lent = [t for t in tasks if t.info.revocable and t.key not in dying]
        if not lent:
            return
        in_use = [t.resources for t in tasks if t.key not in dying]
        excess = revocable_excess(self.reg.agents[agent_id].total, in_use)
        if not excess:
            return
        for task in reversed(lent):  # launch order: the youngest first
            if not excess:
                break
            message = (
                f"revoked: framework {framework.info.name or framework.framework_id} (role "
                f"{framework.role}) launched on the revocable resources it used"
            )
            if not self.revoke(task, framework.role, message):
                continue  # its agent is away: it frees nothing now
            self._revoking.add(task.key)
            add_into(excess, scalar_vector(task.resources), -1)
            excess = {name: value for name, value in excess.items() if value > 0}
        self._revoking.intersection_update(self.reg.tasks)

    def _kill_revoked(self, task: Task, beneficiary: str, message: str) -> bool:
        return self.reg.agents[task.agent_id].kill(
            task.framework_id, task.task_id, reason=REASON_PREEMPTED, why=message
        )

    def kill(self, request: scheduler_pb2.KillRequest) -> None:
        framework = self.frameworks.for_call(request.framework_id, request.stream_id)
        self.kill_task(framework, request.task_id, request.agent_id, request.grace_period_seconds)

    def operator_kill(self, framework_key: str, task_id: str, grace: float) -> Framework:
        """An operator's kill of a live task of any framework (connected or not); NOT_FOUND for
        a task the master does not know as running. Returns the task's framework."""
        framework = self.frameworks.find(framework_key)
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
            self.frameworks.send_update(framework.framework_id, self._reconciled(ended))
            return
        if task is None and self._may_be_recovering(agent_id):
            raise CallError(
                grpc.StatusCode.UNAVAILABLE,
                f"task {task_id} may run on an agent that has not "
                "re-registered since the master restarted; retry the kill later",
            )
        if task is None:
            self.frameworks.send_update(
                framework.framework_id,
                master_status(
                    task_id,
                    common_pb2.TASK_LOST,
                    framework_id=framework.framework_id,
                    agent_id=agent_id,
                    reason="REASON_RECONCILIATION",
                    at=self.clock.wall(),
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
        agent.kill(framework.framework_id, task.task_id, grace)
        log.debug(
            "kill sent",
            framework_id=framework.framework_id,
            task_id=task.task_id,
            agent_id=task.agent_id,
        )

    def acknowledge(self, request: scheduler_pb2.AcknowledgeRequest) -> int:
        """Applies every acknowledgement of the call, or none if any is invalid; returns how
        many were sent on to agents."""
        framework = self.frameworks.for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        acks = check_acknowledgements(request, self.reg.agents)
        for ack in acks:
            task = self.reg.find_task(framework_id, ack.task_id)
            if task is not None and task.final_uuid == ack.uuid:
                task.final_uuid = b""  # its id may be used again
            self._send_ack(self.reg.agents[ack.agent_id], framework_id, ack.task_id, ack.uuid)
        self.counts.updates_acknowledged += len(acks)
        return len(acks)

    def reconcile(self, request: scheduler_pb2.ReconcileRequest) -> int:
        framework = self.frameworks.for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        statuses = []
        if not request.tasks:
            for task in self.reg.tasks_of_framework(framework_id):
                statuses.append(self._reconciled(task))
        # Once per call, not per task: it looks at every agent.
        anyone_recovering = bool(request.tasks) and self._may_be_recovering("")
        for wanted in request.tasks:
            known = self.reg.find_task(framework_id, wanted.task_id)
            if known is not None:
                statuses.append(self._reconciled(known))
                continue
            preempted = self.preempted(framework_id, wanted.task_id)
            if preempted is not None:  # ended so, perhaps before a failover: the same answer
                statuses.append(
                    master_status(
                        wanted.task_id,
                        common_pb2.TASK_KILLED,
                        framework_id=framework_id,
                        agent_id=preempted.agent_id,
                        reason="REASON_RECONCILIATION",
                        at=self.clock.wall(),
                        message=preempted.message,
                    )
                )
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
                    at=self.clock.wall(),
                    message="the master knows no such task",
                )
            )
        for status in statuses:
            self.frameworks.send_update(framework_id, status)
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
            at=self.clock.wall(),
            message=message,
        )
        if task.last_status is not None and task.last_status.HasField("exit_code"):
            status.exit_code = task.last_status.exit_code
        # As Mesos does: a framework that lost an update still learns the health verdict.
        if task.last_status is not None and task.last_status.HasField("healthy"):
            status.healthy = task.last_status.healthy
        return status

    def end_task(
        self,
        task: Task,
        state: common_pb2.TaskState,
        *,
        reason: str,
        message: str,
        recover: bool = True,
    ) -> None:
        """Ends a live task by the master's word (LOST: its agent is gone or forgot it) and
        tells its framework."""
        status = master_status(
            task.task_id,
            state,
            framework_id=task.framework_id,
            agent_id=task.agent_id,
            message=message,
            reason=reason,
            at=self.clock.wall(),
        )
        self._complete(task, status, recover=recover)
        self._published(status)
        self.frameworks.send_update(task.framework_id, status)

    def _published(self, status: common_pb2.TaskStatus) -> None:
        """A task's new state, as a cluster event."""
        self.events.publish(
            "task",
            common_pb2.TaskState.Name(status.state),
            status.task_id,
            framework_id=status.framework_id,
            agent_id=status.agent_id,
            reason=status.reason or None,
        )

    def _complete(self, task: Task, status: common_pb2.TaskStatus, *, recover: bool = True) -> None:
        """Ends a live task in `status` (terminal): its resources go back to the allocator
        (unless `recover` is False: its agent is going, and they with it) and it moves to the
        completed tasks."""
        task.state, task.last_status = status.state, status
        if recover:
            self.ledger.recover_task(task)
        self.reg.complete_task(task)

    def status_update(self, agent: Agent, update: agent_link_pb2.AgentMessage.StatusUpdate) -> None:
        self.counts.updates_received += 1
        status = common_pb2.TaskStatus()
        status.CopyFrom(update.status)
        framework_id = update.framework_id or status.framework_id
        status.framework_id, status.agent_id = framework_id, agent.agent_id
        if not status.task_id or status.state not in KNOWN_STATES:
            # Refuse it without breaking the stream (which made the agent reconnect and resend
            # it forever, holding back its other updates), and ack it so it is not resent.
            log.warning(
                "status update refused: no task_id or an unknown state",
                agent_id=agent.agent_id,
                framework_id=framework_id,
                task_id=status.task_id,
                state=status.state,
            )
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            return

        # Keywords, not log.bind(): every update passes here, and a filtered-out line then
        # costs only building them.
        context = {
            "agent_id": agent.agent_id,
            "framework_id": framework_id,
            "task_id": status.task_id,
            "state": common_pb2.TaskState.Name(status.state),
        }
        if framework_id not in self.reg.frameworks:
            # Nobody will acknowledge it: do so now, or the agent resends forever.
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            task = self.reg.tasks.get((framework_id, status.task_id))
            if task is not None and task.agent_id == agent.agent_id and is_terminal(status.state):
                # A torn-down framework's task is gone at last: its resources are free now.
                self._complete(task, status)
                self.ledger.forget_reaped()
                self.offers.wake(task.agent_id)
            log.debug("status update for a removed framework acknowledged", **context)
            return
        task = self.reg.find_task(framework_id, status.task_id)
        if task is not None and task.agent_id != agent.agent_id:
            # Only the agent that runs a task reports on it: another's "FINISHED" must not free
            # resources while the task runs on. Acked, so it is not resent.
            log.warning(
                "status update for a task on another agent refused",
                runs_on=task.agent_id,
                **context,
            )
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            return
        if task is None:
            # No framework launched it here, and the agent did not report it when it
            # registered: forwarding it would let an agent make up tasks (and their states)
            # for any framework. Acknowledged, so it is not resent; counted and said.
            self.counts.updates_for_unknown_tasks += 1
            if self._unknown_said.say(agent.agent_id) is not None:
                log.warning("status update for a task not launched here dropped", **context)
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            return
        if is_terminal(status.state) and status.uuid:
            task.final_uuid = status.uuid
        if self.reg.tasks.get(task.key) is task:  # live
            if is_terminal(status.state):
                self._complete(task, status)
                self.offers.wake(task.agent_id)
            else:
                task.state, task.last_status = status.state, status
        elif not is_terminal(status.state):
            # Older than the terminal state the task ended in: an agent that lost the ack of
            # an earlier update in a machine crash resends it. Nobody needs it any more.
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            log.debug("stale status update of an ended task acknowledged, not forwarded", **context)
            return
        else:
            task.last_status = status
        log.debug("status update", **context)
        self._published(status)
        self.frameworks.send_update(framework_id, status)

    def _send_ack(self, agent: Agent, framework_id: str, task_id: str, uuid: bytes) -> None:
        # A disconnected agent resends the update when it is back; the framework acks again.
        agent.send(
            MasterMessage(
                status_update_ack=MasterMessage.StatusUpdateAck(
                    framework_id=framework_id, task_id=task_id, uuid=uuid
                )
            )
        )


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
