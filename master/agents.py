"""Agents as the master sees them: registration, re-registration, silence, removal, draining."""

from __future__ import annotations

import grpc
import structlog

from agora.common import EMPTY, ResourceError, Resources, attributes_from_proto, new_id
from agora.common.task_states import REASON_AGENT_DRAINED, is_terminal
from agora.master.admission import refusal_delay
from agora.master.allocator import AllocatorProtocol
from agora.master.attention import Attention, IntakeLag
from agora.master.clock import Clock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.events import EventLog
from agora.master.frameworks import FrameworkBook
from agora.master.ledger import Ledger
from agora.master.offer_cycle import OfferCycle, offer_template
from agora.master.registry import (
    ACTIVE,
    DISCONNECTED,
    DRAINING,
    RECOVERING,
    Agent,
    Registry,
    Session,
    Task,
)
from agora.master.registry_store import RegistryStore, forget_removed
from agora.master.removal_limit import RemovalLimit
from agora.master.tasks import KNOWN_STATES, TaskBook
from agora.v1 import agent_link_pb2, common_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

# Distinct agent shapes (resource totals) shared between agents before the table starts over.
SHAPES_KEPT = 1024

__all__ = ["AgentBook"]

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage


class AgentBook:
    """The agents' side of the master: their sessions, what they run, their silence."""

    def __init__(
        self,
        config: MasterConfig,
        reg: Registry,
        allocator: AllocatorProtocol,
        store: RegistryStore,
        ledger: Ledger,
        offers: OfferCycle,
        frameworks: FrameworkBook,
        tasks: TaskBook,
        clock: Clock,
        counts: MasterCounters,
        master_id: str,
    ) -> None:
        self.config, self.reg, self.allocator, self.store = config, reg, allocator, store
        self.ledger, self.offers, self.frameworks, self.tasks = ledger, offers, frameworks, tasks
        self.clock, self.counts, self.master_id = clock, counts, master_id
        self.epoch = 0  # the leader's election epoch (MasterCore sets it)
        # principal -> the agent its certificate registered last (one each, under ACLs)
        self.by_principal: dict[str, str] = {}
        self.events = EventLog()  # MasterCore gives the master's one
        self.removal_limit = (
            RemovalLimit(*config.agent_removal_rate_limit)
            if config.agent_removal_rate_limit is not None
            else None
        )
        # Set when the master stops: streams ending now are its doing, not agents leaving.
        self.stopping = False
        # Silence is measured in the time the master kept up (attention.py); `last_seen` too.
        self.attention = Attention(clock.now())
        self.intake = IntakeLag(cap=config.agent_timeout_seconds)
        # Agents of one shape share one (immutable) Resources: fleets are mostly a few machine
        # types, and at 50,000 agents a copy each is 2 KB apiece.
        self._shapes: dict[Resources, Resources] = {}

    def register(
        self, register: agent_link_pb2.AgentMessage.Register, session: Session, principal: str = ""
    ) -> Agent:
        """Registers or re-registers; sends Registered (or Shutdown) on the session.

        `principal` is the caller's name: an agent id once registered by one principal may be
        registered again only by the same (a certificate cannot take over another's agent).
        """
        info = common_pb2.AgentInfo()
        info.CopyFrom(register.info)
        try:
            total = self._shape(Resources.from_proto(info.resources))
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad agent resources: {e}") from None
        agent_id = info.agent_id
        if agent_id not in self.reg.agents:
            self._admit()
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
        now, wall = self.attention.now(self.clock.now()), self.clock.wall()

        agent = self.reg.agents.get(agent_id)
        known = agent is not None
        if agent is not None and agent.principal and agent.principal != principal:
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal or 'an anonymous caller'} may not register as agent {agent_id}, "
                f"which {agent.principal} registered",
                Reason.PERMISSION_DENIED,
            )
        if agent is None and principal and self.config.acls_path is not None:
            self._one_agent_a_certificate(principal, agent_id)
        if agent is not None:
            for offer in self.reg.offers_of_agent(agent_id):
                self.offers.rescind(offer, "agent re-registered", recover=False)
            if agent.session is not None and agent.session is not session:
                agent.session.close()
            if self.ledger.in_allocator(agent):
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
        if principal:
            self.by_principal[principal] = agent_id
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
        for framework_id, used in self.reg.allocated_on_agent(agent_id, revocable=True).items():
            self.allocator.set_revocable(framework_id, agent_id, used)
        if agent.draining:
            self.allocator.deactivate_agent(agent_id)
            # Frameworks that subscribed before it came back (a new leader) learn of it now.
            self._tell_drain(agent)
        self.store.put_agent(info, agent.registered_at, agent.principal)
        self.events.publish(
            "agent",
            "AGENT_REREGISTERED" if known else "AGENT_ADDED",
            agent_id,
            principal,
            hostname=info.hostname,
            address=info.address,
        )
        offer_template(agent)
        session.send(
            MasterMessage(
                registered=MasterMessage.Registered(
                    agent_id=agent_id,
                    master_id=self.master_id,
                    heartbeat_interval_seconds=self.config.agent_heartbeat_seconds,
                    master_principal=self.config.credentials.principal,
                    accepts_batches=True,
                    epoch=self.epoch,
                )
            )
        )
        for framework_id in sorted(shutdown_frameworks):
            session.send(
                MasterMessage(
                    shutdown_framework=MasterMessage.ShutdownFramework(framework_id=framework_id)
                )
            )
        if agent.draining and agent.drain_deadline and self.clock.wall() >= agent.drain_deadline:
            self._drain_deadline_passed(agent_id)  # passed while it was away
        bound.info(
            "agent registered",
            resources=str(total),
            tasks=len(register.tasks),
            reregistered=bool(register.info.agent_id),
        )
        self.offers.wake(agent_id)
        return agent

    def _admit(self) -> None:
        """Refuses a new agent while the master is behind (admission.py): MASTER_BUSY, with
        the seconds after which to register again."""
        behind = self.attention.behind(self.clock.now())
        delay = refusal_delay(behind)
        if delay is None:
            return
        self.counts.agents_refused_busy += 1
        raise CallError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"the master is {behind:.1f} s behind on its work and takes no new agents now; "
            f"register again in {delay:.1f} s",
            Reason.MASTER_BUSY,
            {"retry_after_seconds": f"{delay:.2f}"},
        )

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
                self.frameworks.adopt(framework_id)
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
            if running.state in KNOWN_STATES:  # else keep what we knew (operators print it)
                task.state = running.state
            if is_terminal(task.state):
                # Its final update is on its way (unacknowledged); resources are free already.
                self.reg.complete_task(task)
        for task in self.reg.tasks_of_agent(agent_id):
            if task.key not in seen:
                # Launched but never reached the agent (the stream broke), or it was lost.
                self.tasks.end_task(
                    task,
                    common_pb2.TASK_LOST,
                    recover=False,
                    reason="REASON_TASK_UNKNOWN",
                    message=f"agent {agent_id} re-registered without this task",
                )
        if self.ledger.forget_reaped():  # a torn-down framework's last task may be gone
            self.offers.wake()
        return shutdown

    def _shape(self, total: Resources) -> Resources:
        """The shared Resources equal to `total` (at most SHAPES_KEPT kinds are kept)."""
        shared = self._shapes.get(total)
        if shared is not None:
            return shared
        if len(self._shapes) >= SHAPES_KEPT:
            self._shapes.clear()
        self._shapes[total] = total
        return total

    def heartbeat(self, agent: Agent, sent_at: float = 0.0) -> None:
        """The agent said something (a heartbeat sent at `sent_at` on its wall clock, or any
        other message: 0)."""
        agent.last_seen = self.attention.now(self.clock.now())
        agent.last_heartbeat_at = wall = self.clock.wall()
        self.intake.observe(sent_at, wall)
        agent.removal_deferred = False

    def disconnected(self, agent: Agent, session: Session) -> None:
        """The stream broke: no new offers until it comes back; removed after the timeout."""
        session.close()
        if self.stopping:
            return
        if agent.session is not session or self.reg.agents.get(agent.agent_id) is not agent:
            return  # replaced by a newer stream, or already removed
        agent.session = None
        agent.state = DISCONNECTED
        self.events.publish("agent", "AGENT_DISCONNECTED", agent.agent_id)
        self.allocator.deactivate_agent(agent.agent_id)
        for offer in self.reg.offers_of_agent(agent.agent_id):
            self.offers.rescind(offer, "agent disconnected")
        log.info("agent disconnected", agent_id=agent.agent_id)

    def _one_agent_a_certificate(self, principal: str, new_agent_id: str) -> None:
        """Under ACLs a certificate registers one agent (issue 37: a stolen or shared agent
        certificate must not add agents at will). A new agent of a principal that already
        holds a connected one is refused; one whose agent is disconnected replaces it (a
        machine whose work dir was lost), as the agent timeout would have removed it."""
        held = self.reg.agents.get(self.by_principal.get(principal, ""))
        if held is None or held.principal != principal:
            return
        if held.session is not None or held.state == RECOVERING:
            # Connected, or known from before a master restart and not back yet (it may be on
            # its way with its id): the newcomer is the one turned away.
            raise CallError(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{principal} already runs agent {held.agent_id} ({held.info.hostname}); one "
                "certificate registers one agent: restart that agent with its work dir, or "
                "give this machine a certificate of its own",
                Reason.PERMISSION_DENIED,
            )
        self.remove(
            held,
            f"replaced by agent {new_agent_id}, registered with the same certificate ({principal})",
        )

    def remove(self, agent: Agent, reason: str) -> None:
        agent_id = agent.agent_id
        if agent.principal and self.by_principal.get(agent.principal) == agent_id:
            del self.by_principal[agent.principal]
        self.events.publish("agent", "AGENT_REMOVED", agent_id, reason=reason)
        log.warning("removing agent", agent_id=agent_id, reason=reason)
        for offer in self.reg.offers_of_agent(agent_id):
            self.offers.rescind(offer, f"agent {agent_id} removed", recover=False)
        for task in self.reg.tasks_of_agent(agent_id):
            self.tasks.end_task(
                task,
                common_pb2.TASK_LOST,
                recover=False,
                reason="REASON_AGENT_REMOVED",
                message=f"agent {agent_id} removed: {reason}",
            )
        self.ledger.forget_reaped()  # tasks of torn-down frameworks went too (woken below)
        if self.ledger.in_allocator(agent):
            self.allocator.remove_agent(agent_id)
        failure = Event(failure=Event.Failure(agent_id=agent_id))
        for framework in self.reg.frameworks.values():
            framework.send(failure)
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
        forget_removed(self.store, "agent", self.reg.note_removed("agent", agent_id, reason))
        self.offers.wake()

    def tick(self, step: float) -> None:
        """The master's tick loop ran, meaning to run `step` seconds after its last run."""
        self.attention.tick(self.clock.now(), step)
        self.counts.loop_lag_seconds = self.attention.lag
        self.counts.intake_lag_seconds = self.intake.lag(self.clock.wall())

    def check_silence(self) -> None:
        """Removes the agents silent for longer than the agent timeout, in attention time (at
        most --agent-removal-rate-limit of them)."""
        clock_now = self.clock.now()  # the removal rate limit is in clock time
        now = self.attention.now(clock_now)
        backlog = self.intake.lag(self.clock.wall())  # what may still wait in the master's queues
        for agent in list(self.reg.agents.values()):
            silent = now - agent.last_seen - backlog
            if silent > self.config.agent_timeout_seconds:
                limit = self.removal_limit
                if limit is not None and not limit.allow(clock_now):
                    if not agent.removal_deferred:
                        agent.removal_deferred = True
                        log.warning(
                            "agent removal deferred by the removal rate limit",
                            agent_id=agent.agent_id,
                            silent=round(silent, 1),
                            next_removal_in=round(limit.next_allowed(clock_now) - clock_now, 1),
                        )
                    continue
                what = "did not re-register" if agent.state == RECOVERING else "silent"
                self.remove(
                    agent,
                    f"{what} for {silent:.1f} s "
                    f"(agent timeout {self.config.agent_timeout_seconds:g} s)",
                )

    def _known(self, agent_id: str) -> Agent:
        agent = self.reg.agents.get(agent_id)
        if agent is None:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"agent {agent_id!r} is not registered",
                Reason.AGENT_UNKNOWN,
            )
        return agent

    def drain(self, agent_id: str, deadline_seconds: float = 0.0) -> tuple[float, int]:
        """Offers nothing more of the agent and tells the frameworks with tasks there (Nomad's
        node drain). With `deadline_seconds`, what still runs there then is killed; without,
        its tasks run on. Draining again sets the deadline anew. Returns the deadline (wall
        clock; 0: none) and how many tasks the agent runs."""
        agent = self._known(agent_id)
        deadline = self.clock.wall() + deadline_seconds if deadline_seconds > 0 else 0.0
        self.store.put_drained(agent_id, True, deadline)
        agent.draining, agent.drain_deadline = True, deadline
        if self.ledger.in_allocator(agent):
            self.allocator.deactivate_agent(agent_id)
        if agent.connected:
            agent.state = DRAINING
        for offer in self.reg.offers_of_agent(agent_id):
            self.offers.rescind(offer, "agent draining")
        self.arm_drain_deadline(agent)
        tasks = self.reg.tasks_of_agent(agent_id)
        self._tell_drain(agent)
        log.info(
            "agent draining",
            agent_id=agent_id,
            deadline=f"in {deadline_seconds:g} s" if deadline else "none",
            tasks=len(tasks),
        )
        self.events.publish("agent", "AGENT_DRAINING", agent_id, deadline=deadline or None)
        return deadline, len(tasks)

    def undrain(self, agent_id: str) -> None:
        """Ends a drain: the agent's free resources are offered again."""
        agent = self._known(agent_id)
        if not agent.draining:
            return
        self.store.put_drained(agent_id, False)
        agent.draining, agent.drain_deadline = False, 0.0
        self.arm_drain_deadline(agent)  # disarms it
        self._tell_drain(agent)
        log.info("agent undrained", agent_id=agent_id)
        self.events.publish("agent", "AGENT_UNDRAINED", agent_id)
        if agent.connected:
            agent.state = ACTIVE
            if self.ledger.in_allocator(agent):
                self.allocator.activate_agent(agent_id)
            self.offers.wake(agent_id)

    def arm_drain_deadline(self, agent: Agent) -> None:
        """(Re)sets the timer of the agent's drain deadline, or clears it when it has none."""
        if agent.drain_timer is not None:
            agent.drain_timer.cancel()
            agent.drain_timer = None
        if agent.draining and agent.drain_deadline:
            agent_id = agent.agent_id
            agent.drain_timer = self.clock.call_later(
                max(0.0, agent.drain_deadline - self.clock.wall()),
                lambda: self._drain_deadline_passed(agent_id),
            )

    def _drain_deadline_passed(self, agent_id: str) -> None:
        """Kills what still runs on a drained agent whose deadline passed. Its tasks end
        TASK_KILLED with reason REASON_AGENT_DRAINED; a disconnected agent's are killed when
        it registers again (register calls this too)."""
        agent = self.reg.agents.get(agent_id)
        if agent is None or not agent.draining or not agent.drain_deadline:
            return
        agent.drain_timer = None
        live = [t for t in self.reg.tasks_of_agent(agent_id) if not is_terminal(t.state)]
        if not live or not agent.connected:
            return
        log.info(
            "drain deadline passed: killing the agent's tasks", agent_id=agent_id, tasks=len(live)
        )
        why = f"agent {agent_id} was drained and its deadline passed"
        for task in live:
            agent.kill(task.framework_id, task.task_id, reason=REASON_AGENT_DRAINED, why=why)

    def _tell_drain(self, agent: Agent) -> None:
        """Tells each framework with tasks on the agent that its drain started or ended."""
        event = agent.drain_event()
        for framework_id in {t.framework_id for t in self.reg.tasks_of_agent(agent.agent_id)}:
            framework = self.reg.frameworks.get(framework_id)
            if framework is not None:
                framework.send(event)
