"""Agents as the master sees them: registration, re-registration, silence, status updates."""

from __future__ import annotations

import time

import grpc
import structlog

from agora.common import EMPTY, ResourceError, Resources, attributes_from_proto, new_id
from agora.common.task_states import is_terminal
from agora.master.errors import CallError, Reason
from agora.master.registry import (
    ACTIVE,
    DISCONNECTED,
    DRAINING,
    RECOVERING,
    Agent,
    Framework,
    Session,
    Task,
    master_status,
)
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage
_KNOWN_STATES = frozenset(common_pb2.TaskState.values()) - {common_pb2.TASK_STATE_UNSPECIFIED}


class AgentHandling:
    """MasterCore's agent side (a mixin: state lives on MasterCore)."""

    def register_agent(
        self, register: agent_link_pb2.AgentMessage.Register, session: Session, principal: str = ""
    ) -> Agent:
        """Registers or re-registers; sends Registered (or Shutdown) on the session.

        `principal` is the caller's name: an agent id once registered by one principal may be
        registered again only by the same (a certificate cannot take over another's agent).
        """
        info = common_pb2.AgentInfo()
        info.CopyFrom(register.info)
        try:
            total = Resources.from_proto(info.resources)
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad agent resources: {e}") from None
        agent_id = info.agent_id
        if agent_id in self.reg.removed_agents:
            reason = (
                f"agent was removed ({self.reg.removed_agents[agent_id]}); "
                "kill all tasks and register afresh without an agent_id"
            )
            session.send(MasterMessage(shutdown=MasterMessage.Shutdown(reason=reason)))
            session.close()
            log.info("removed agent came back: shut down", agent_id=agent_id)
            return None  # type: ignore[return-value]
        if not agent_id:
            agent_id = info.agent_id = new_id("agent")
        bound = log.bind(agent_id=agent_id, hostname=info.hostname)
        now, wall = self.clock(), time.time()

        agent = self.reg.agents.get(agent_id)
        if agent is not None and agent.principal and agent.principal != principal:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal or 'an anonymous caller'} may not register as agent {agent_id}, "
                f"which {agent.principal} registered",
                Reason.PERMISSION_DENIED,
            )
        if agent is not None:
            for offer in self.reg.offers_of_agent(agent_id):
                self._rescind(offer, "agent re-registered", recover=False)
            if agent.session is not None and agent.session is not session:
                agent.session.close()
            if self._in_allocator(agent):
                self.allocator.remove_agent(agent_id)
            agent.info, agent.total = info, total
            agent.attributes = attributes_from_proto(info.attributes)
        else:
            agent = Agent(
                info=info,
                total=total,
                attributes=attributes_from_proto(info.attributes),
                registered_at=wall,
                last_seen=now,
            )
            self.reg.agents[agent_id] = agent
        agent.session, agent.last_seen, agent.last_heartbeat_at = session, now, wall
        agent.principal = principal
        agent.state = DRAINING if agent.draining else ACTIVE

        shutdown_frameworks = self._reconcile_agent_tasks(agent, register.tasks)
        try:
            self.allocator.add_agent(
                agent_id, total, agent.attributes, allocated=self.reg.allocated_on_agent(agent_id)
            )
        except ValueError as e:
            # Its tasks use more than it now reports (resources shrank across a restart): keep
            # the tasks, offer nothing on it until they end rather than refuse the agent.
            bound.warning("agent reports less than its tasks use", error=str(e))
            used = EMPTY
            for resources in self.reg.allocated_on_agent(agent_id).values():
                used = used + resources
            self.allocator.add_agent(
                agent_id,
                total + used,
                agent.attributes,
                allocated=self.reg.allocated_on_agent(agent_id),
            )
            self.allocator.deactivate_agent(agent_id)
        if agent.draining:
            self.allocator.deactivate_agent(agent_id)
        self.store.put_agent(info, agent.registered_at)
        session.send(
            MasterMessage(
                registered=MasterMessage.Registered(
                    agent_id=agent_id,
                    master_id=self.master_id,
                    heartbeat_interval_seconds=self.config.heartbeat_interval_seconds,
                    master_principal=self.config.credentials.principal,
                )
            )
        )
        for framework_id in sorted(shutdown_frameworks):
            session.send(
                MasterMessage(
                    shutdown_framework=MasterMessage.ShutdownFramework(framework_id=framework_id)
                )
            )
        bound.info(
            "agent registered",
            resources=str(total),
            tasks=len(register.tasks),
            reregistered=bool(register.info.agent_id),
        )
        self.wake_allocation(agent_id)
        return agent

    def _reconcile_agent_tasks(self, agent: Agent, reported) -> set[str]:
        """Makes the task table agree with what the agent runs; returns frameworks to shut
        down on it (torn down while the agent was away)."""
        agent_id = agent.agent_id
        seen: set[tuple[str, str]] = set()
        shutdown: set[str] = set()
        for running in reported:
            framework_id, task_info = running.framework_id, running.task
            if framework_id in self.reg.removed_frameworks:
                shutdown.add(framework_id)
                continue
            if framework_id not in self.reg.frameworks:
                # Its record was lost: keep its tasks and wait for it like a recovered one.
                framework = Framework(
                    info=common_pb2.FrameworkInfo(framework_id=framework_id),
                    registered_at=time.time(),
                )
                self._add_framework_to_allocator(framework)
                self.allocator.deactivate_framework(framework_id)
                self._start_failover_timer(framework, minimum=self.config.agent_timeout_seconds)
            task = self.reg.tasks.get((framework_id, task_info.task_id))
            if task is not None and task.agent_id != agent_id and task.agent_id in self.reg.agents:
                # Another registered agent runs it: an agent reports only on its own tasks, so
                # one cannot move another's task (and its launch) onto itself.
                log.warning(
                    "agent reported a task that runs on another agent; ignored",
                    agent_id=agent_id,
                    task_id=task_info.task_id,
                    framework_id=framework_id,
                    runs_on=task.agent_id,
                )
                continue
            seen.add((framework_id, task_info.task_id))
            if task is None:
                try:
                    resources = Resources.from_proto(task_info.resources)
                except ResourceError:
                    resources = EMPTY
                info = common_pb2.TaskInfo()
                info.CopyFrom(task_info)
                info.agent_id = agent_id
                task = Task(framework_id, agent_id, info, resources)
                self.reg.add_task(task)
            self.reg.move_task(task, agent_id)
            if running.state in _KNOWN_STATES:  # else keep what we knew (operators print it)
                task.state = running.state
            if is_terminal(task.state):
                # Its final update is on its way (unacknowledged); resources are free already.
                self.reg.complete_task(task)
        for task in self.reg.tasks_of_agent(agent_id):
            if task.key not in seen:
                # Launched but never reached the agent (the stream broke), or it was lost.
                self._end_task(
                    task,
                    common_pb2.TASK_LOST,
                    recover=False,
                    reason="REASON_TASK_UNKNOWN",
                    message=f"agent {agent_id} re-registered without this task",
                )
        for framework_id in list(self._reaping):  # a torn-down framework's last task may be gone
            self._reaped(framework_id)
        return shutdown

    def _end_task(
        self, task: Task, state: int, *, reason: str, message: str, recover: bool = True
    ) -> None:
        status = master_status(
            task.task_id,
            state,
            framework_id=task.framework_id,
            agent_id=task.agent_id,
            message=message,
            reason=reason,
        )
        task.state, task.last_status = state, status
        if recover:
            self._recover(task.framework_id, task.agent_id, task.resources)
        self.reg.complete_task(task)
        self._send_update(task.framework_id, status)

    def agent_heartbeat(self, agent: Agent) -> None:
        agent.last_seen, agent.last_heartbeat_at = self.clock(), time.time()
        agent.removal_deferred = False

    def agent_disconnected(self, agent: Agent, session: Session) -> None:
        """The stream broke: no new offers until it comes back; removed after the timeout."""
        session.close()
        if self.stopping:
            return
        if agent.session is not session or self.reg.agents.get(agent.agent_id) is not agent:
            return  # replaced by a newer stream, or already removed
        agent.session = None
        agent.state = DISCONNECTED
        self.allocator.deactivate_agent(agent.agent_id)
        for offer in self.reg.offers_of_agent(agent.agent_id):
            self._rescind(offer, "agent disconnected")
        log.info("agent disconnected", agent_id=agent.agent_id)

    def remove_agent(self, agent: Agent, reason: str) -> None:
        agent_id = agent.agent_id
        log.warning("removing agent", agent_id=agent_id, reason=reason)
        for offer in self.reg.offers_of_agent(agent_id):
            self._rescind(offer, f"agent {agent_id} removed", recover=False)
        for task in self.reg.tasks_of_agent(agent_id):
            self._end_task(
                task,
                common_pb2.TASK_LOST,
                recover=False,
                reason="REASON_AGENT_REMOVED",
                message=f"agent {agent_id} removed: {reason}",
            )
        for framework_id in list(self._reaping):  # tasks of torn-down frameworks went too
            self._reaped(framework_id)
        if self._in_allocator(agent):
            self.allocator.remove_agent(agent_id)
        for framework in self.reg.frameworks.values():
            if framework.connected:
                framework.session.send(Event(failure=Event.Failure(agent_id=agent_id)))
        if agent.session is not None:
            agent.session.send(
                MasterMessage(
                    shutdown=MasterMessage.Shutdown(
                        reason=f"agent was removed ({reason}); kill all tasks and register afresh"
                    )
                )
            )
            agent.session.close()
        del self.reg.agents[agent_id]
        self.store.remove_agent(agent_id, reason)
        self.forget_removed("agent", self.reg.note_removed("agent", agent_id, reason))
        self.wake_allocation()

    def status_update(self, agent: Agent, update: agent_link_pb2.AgentMessage.StatusUpdate) -> None:
        self.counts.updates_received += 1
        status = common_pb2.TaskStatus()
        status.CopyFrom(update.status)
        framework_id = update.framework_id or status.framework_id
        status.framework_id, status.agent_id = framework_id, agent.agent_id
        if not status.task_id or status.state not in _KNOWN_STATES:
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
        bound = log.bind(
            agent_id=agent.agent_id,
            framework_id=framework_id,
            task_id=status.task_id,
            state=common_pb2.TaskState.Name(status.state),
        )
        if framework_id not in self.reg.frameworks:
            # Nobody will acknowledge it: do so now, or the agent resends forever.
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            task = self.reg.tasks.get((framework_id, status.task_id))
            if task is not None and task.agent_id == agent.agent_id and is_terminal(status.state):
                # A torn-down framework's task is gone at last: its resources are free now.
                task.state, task.last_status = status.state, status
                self._recover(framework_id, task.agent_id, task.resources)
                self.reg.complete_task(task)
                self._reaped(framework_id)
                self.wake_allocation(task.agent_id)
            bound.info("status update for a removed framework acknowledged")
            return
        task = self.reg.find_task(framework_id, status.task_id)
        if task is not None and task.agent_id != agent.agent_id:
            # Only the agent that runs a task reports on it: another's "FINISHED" must not free
            # resources while the task runs on. Acked, so it is not resent.
            bound.warning(
                "status update for a task on another agent refused", runs_on=task.agent_id
            )
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            return
        if task is None:
            task = Task(
                framework_id,
                agent.agent_id,
                common_pb2.TaskInfo(task_id=status.task_id, agent_id=agent.agent_id),
                EMPTY,
                state=common_pb2.TASK_STATE_UNSPECIFIED,
            )
            self.reg.add_task(task)
        if is_terminal(status.state) and status.uuid:
            task.final_uuid = status.uuid
        if self.reg.tasks.get(task.key) is task:  # live
            task.state = status.state
            task.last_status = status
            if is_terminal(status.state):
                self._recover(framework_id, task.agent_id, task.resources)
                self.reg.complete_task(task)
                self.wake_allocation(task.agent_id)
        elif not is_terminal(status.state):
            # Older than the terminal state the task ended in: an agent that lost the ack of
            # an earlier update in a machine crash resends it. Nobody needs it any more.
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            bound.info("stale status update of an ended task acknowledged, not forwarded")
            return
        else:
            task.last_status = status
        bound.info("status update")
        self._send_update(framework_id, status)

    def _send_ack(self, agent: Agent, framework_id: str, task_id: str, uuid: bytes) -> None:
        if agent.connected:
            agent.session.send(
                MasterMessage(
                    status_update_ack=MasterMessage.StatusUpdateAck(
                        framework_id=framework_id, task_id=task_id, uuid=uuid
                    )
                )
            )

    def check_agents(self) -> None:
        now = self.clock()
        for agent in list(self.reg.agents.values()):
            silent = now - agent.last_seen
            if silent > self.config.agent_timeout_seconds:
                limit = self.removal_limit
                if limit is not None and not limit.allow(now):
                    if not agent.removal_deferred:
                        agent.removal_deferred = True
                        log.warning(
                            "agent removal deferred by the removal rate limit",
                            agent_id=agent.agent_id,
                            silent=round(silent, 1),
                            next_removal_in=round(limit.next_allowed(now) - now, 1),
                        )
                    continue
                what = "did not re-register" if agent.state == RECOVERING else "silent"
                self.remove_agent(
                    agent,
                    f"{what} for {silent:.1f} s "
                    f"(agent timeout {self.config.agent_timeout_seconds:g} s)",
                )
