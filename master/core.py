"""The master's state machine: agents, frameworks, tasks and offers, driven by the services.

Every method is synchronous and runs on the event loop, so no two changes interleave. Refused
calls raise CallError; the services turn it into a gRPC status. Messages leave through each
peer's Session queue.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable

import grpc
import structlog
from agora.v1 import agent_link_pb2, common_pb2, operator_pb2, scheduler_pb2

from common import EMPTY, ResourceError, Resources, attributes_from_proto, new_id
from common.rpc import parse_address
from master.config import MasterConfig
from master.offers import CallError, check_offers, plan_launch, refuse_seconds
from master.registry import (
    ACTIVE,
    DISCONNECTED,
    DRAINING,
    RECOVERING,
    Agent,
    Framework,
    Offer,
    Registry,
    Session,
    Task,
    is_terminal,
)
from master.state_store import StateStore

log = structlog.get_logger(__name__)

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage
_ROLE = re.compile(r"[A-Za-z0-9_*][A-Za-z0-9_.\-/*]*")


def _status(task_id: str, state: int, *, framework_id: str, agent_id: str, message: str,
            reason: str) -> common_pb2.TaskStatus:
    """A master-generated update: no uuid, so it needs no acknowledgement."""
    return common_pb2.TaskStatus(
        task_id=task_id, state=state, message=message, reason=reason,
        source=common_pb2.TaskStatus.SOURCE_MASTER, agent_id=agent_id,
        framework_id=framework_id, timestamp=time.time())


class MasterCore:
    def __init__(self, config: MasterConfig, allocator, store: StateStore,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.allocator = allocator
        self.store = store
        self.clock = clock
        self.master_id = new_id("master")
        self.started_at = time.time()
        self.reg = Registry()
        self.allocation_wanted = asyncio.Event()
        # Set by Master.stop: streams ending now are the master's doing, not peers leaving.
        self.stopping = False

    # --- helpers -------------------------------------------------------------------------

    def wake_allocation(self) -> None:
        self.allocation_wanted.set()

    def _send_update(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        framework = self.reg.frameworks.get(framework_id)
        if framework is not None and framework.connected:
            framework.session.send(Event(update=Event.Update(status=status)))

    def _in_allocator(self, agent: Agent | None) -> bool:
        return agent is not None and agent.state != RECOVERING

    def _recover(self, framework_id: str, agent_id: str, resources: Resources,
                 refuse: float | None = None) -> None:
        if resources and self._in_allocator(self.reg.agents.get(agent_id)) \
                and framework_id in self.reg.frameworks:
            try:
                self.allocator.recover(framework_id, agent_id, resources, self.clock(),
                                       refuse_seconds=refuse)
            except ValueError:
                # The books disagree (a bug): log it loudly but keep serving everyone.
                log.exception("allocator refused to recover resources",
                              framework_id=framework_id, agent_id=agent_id,
                              resources=str(resources))

    def _rescind(self, offer: Offer, why: str, *, notify: bool = True,
                 recover: bool = True) -> None:
        self.reg.drop_offer(offer.offer_id, why)
        if recover:
            self._recover(offer.framework_id, offer.agent_id, offer.resources)
        framework = self.reg.frameworks.get(offer.framework_id)
        if notify and framework is not None and framework.connected:
            framework.session.send(Event(rescind=Event.Rescind(offer_id=offer.offer_id)))
        log.info("offer rescinded", offer_id=offer.offer_id, framework_id=offer.framework_id,
                 agent_id=offer.agent_id, why=why)
        self.wake_allocation()

    # --- recovery after a restart ----------------------------------------------------------

    def recover_state(self) -> None:
        """Loads whom to expect from the store. Frameworks wait for their failover timeout, and
        at least as long as agents get to re-register, since their tasks come with the agents."""
        now = self.clock()
        self.reg.removed_agents = self.store.removed("agent")
        self.reg.removed_frameworks = self.store.removed("framework")
        for role, weight in self.store.weights().items():
            self.allocator.set_weight(role, weight)
        for role, quota in self.store.quotas().items():
            self.allocator.set_quota(role, Resources.from_proto(quota.guarantee),
                                     Resources.from_proto(quota.limit) if quota.limit else None)
        for stored in self.store.agents():
            self.reg.agents[stored.info.agent_id] = Agent(
                info=stored.info, total=Resources.from_proto(stored.info.resources),
                attributes=attributes_from_proto(stored.info.attributes),
                registered_at=stored.registered_at, last_seen=now, state=RECOVERING)
        for stored in self.store.frameworks():
            framework = Framework(info=stored.info, registered_at=stored.registered_at)
            self._add_framework_to_allocator(framework)
            self.allocator.deactivate_framework(framework.framework_id)
            self._start_failover_timer(framework, minimum=self.config.agent_timeout_seconds)
        log.info("state recovered", agents=len(self.reg.agents),
                 frameworks=len(self.reg.frameworks), path=str(self.store.path))

    def _add_framework_to_allocator(self, framework: Framework) -> None:
        self.reg.frameworks[framework.framework_id] = framework
        allocated: dict[str, Resources] = {}
        for task in self.reg.tasks_of_framework(framework.framework_id):
            if self._in_allocator(self.reg.agents.get(task.agent_id)):
                allocated[task.agent_id] = allocated.get(task.agent_id, EMPTY) + task.resources
        self.allocator.add_framework(framework.framework_id, role=framework.role,
                                     capabilities=frozenset(framework.info.capabilities),
                                     allocated=allocated)

    # --- agents ----------------------------------------------------------------------------

    def register_agent(self, register: agent_link_pb2.AgentMessage.Register,
                       session: Session) -> Agent:
        """Registers or re-registers; sends Registered (or Shutdown) on the session."""
        info = common_pb2.AgentInfo()
        info.CopyFrom(register.info)
        try:
            total = Resources.from_proto(info.resources)
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad agent resources: {e}") from None
        agent_id = info.agent_id
        if agent_id in self.reg.removed_agents:
            reason = (f"agent was removed ({self.reg.removed_agents[agent_id]}); "
                      "kill all tasks and register afresh without an agent_id")
            session.send(MasterMessage(shutdown=MasterMessage.Shutdown(reason=reason)))
            session.close()
            log.info("removed agent came back: shut down", agent_id=agent_id)
            return None  # type: ignore[return-value]
        if not agent_id:
            agent_id = info.agent_id = new_id("agent")
        bound = log.bind(agent_id=agent_id, hostname=info.hostname)
        now, wall = self.clock(), time.time()

        agent = self.reg.agents.get(agent_id)
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
            agent = Agent(info=info, total=total, attributes=attributes_from_proto(info.attributes),
                          registered_at=wall, last_seen=now)
            self.reg.agents[agent_id] = agent
        agent.session, agent.last_seen, agent.last_heartbeat_at = session, now, wall
        agent.state = DRAINING if agent.draining else ACTIVE

        shutdown_frameworks = self._reconcile_agent_tasks(agent, register.tasks)
        self.allocator.add_agent(agent_id, total, agent.attributes,
                                 allocated=self.reg.allocated_on_agent(agent_id))
        if agent.draining:
            self.allocator.deactivate_agent(agent_id)
        self.store.put_agent(info, agent.registered_at)
        session.send(MasterMessage(registered=MasterMessage.Registered(
            agent_id=agent_id, master_id=self.master_id,
            heartbeat_interval_seconds=self.config.heartbeat_interval_seconds)))
        for framework_id in sorted(shutdown_frameworks):
            session.send(MasterMessage(shutdown_framework=MasterMessage.ShutdownFramework(
                framework_id=framework_id)))
        bound.info("agent registered", resources=str(total), tasks=len(register.tasks),
                   reregistered=bool(register.info.agent_id))
        self.wake_allocation()
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
                framework = Framework(info=common_pb2.FrameworkInfo(framework_id=framework_id),
                                      registered_at=time.time())
                self._add_framework_to_allocator(framework)
                self.allocator.deactivate_framework(framework_id)
                self._start_failover_timer(framework, minimum=self.config.agent_timeout_seconds)
            seen.add((framework_id, task_info.task_id))
            task = self.reg.tasks.get((framework_id, task_info.task_id))
            if task is None:
                try:
                    resources = Resources.from_proto(task_info.resources)
                except ResourceError:
                    resources = EMPTY
                info = common_pb2.TaskInfo()
                info.CopyFrom(task_info)
                info.agent_id = agent_id
                task = Task(framework_id, agent_id, info, resources)
                self.reg.tasks[task.key] = task
            task.agent_id = agent_id
            if running.state:
                task.state = running.state
            if is_terminal(task.state):
                # Its final update is on its way (unacknowledged); resources are free already.
                self.reg.complete_task(task)
        for task in self.reg.tasks_of_agent(agent_id):
            if task.key not in seen:
                # Launched but never reached the agent (the stream broke), or it was lost.
                self._end_task(task, common_pb2.TASK_LOST, recover=False,
                               reason="REASON_TASK_UNKNOWN",
                               message=f"agent {agent_id} re-registered without this task")
        return shutdown

    def _end_task(self, task: Task, state: int, *, reason: str, message: str,
                  recover: bool = True) -> None:
        status = _status(task.task_id, state, framework_id=task.framework_id,
                         agent_id=task.agent_id, message=message, reason=reason)
        task.state, task.last_status = state, status
        if recover:
            self._recover(task.framework_id, task.agent_id, task.resources)
        self.reg.complete_task(task)
        self._send_update(task.framework_id, status)

    def agent_heartbeat(self, agent: Agent) -> None:
        agent.last_seen, agent.last_heartbeat_at = self.clock(), time.time()

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
            self._end_task(task, common_pb2.TASK_LOST, recover=False,
                           reason="REASON_AGENT_REMOVED",
                           message=f"agent {agent_id} removed: {reason}")
        if self._in_allocator(agent):
            self.allocator.remove_agent(agent_id)
        for framework in self.reg.frameworks.values():
            if framework.connected:
                framework.session.send(Event(failure=Event.Failure(agent_id=agent_id)))
        if agent.session is not None:
            agent.session.send(MasterMessage(shutdown=MasterMessage.Shutdown(
                reason=f"agent was removed ({reason}); kill all tasks and register afresh")))
            agent.session.close()
        del self.reg.agents[agent_id]
        self.reg.removed_agents[agent_id] = reason
        self.store.remove_agent(agent_id, reason)
        self.wake_allocation()

    def status_update(self, agent: Agent,
                      update: agent_link_pb2.AgentMessage.StatusUpdate) -> None:
        status = common_pb2.TaskStatus()
        status.CopyFrom(update.status)
        framework_id = update.framework_id or status.framework_id
        status.framework_id, status.agent_id = framework_id, agent.agent_id
        bound = log.bind(agent_id=agent.agent_id, framework_id=framework_id,
                         task_id=status.task_id, state=common_pb2.TaskState.Name(status.state))
        if framework_id not in self.reg.frameworks:
            # Nobody will acknowledge it: do so now, or the agent resends forever.
            if status.uuid:
                self._send_ack(agent, framework_id, status.task_id, status.uuid)
            bound.info("status update for a removed framework acknowledged")
            return
        task = self.reg.find_task(framework_id, status.task_id)
        if task is None:
            task = Task(framework_id, agent.agent_id,
                        common_pb2.TaskInfo(task_id=status.task_id, agent_id=agent.agent_id),
                        EMPTY, state=common_pb2.TASK_STATE_UNSPECIFIED)
            self.reg.tasks[task.key] = task
        if self.reg.tasks.get(task.key) is task:  # live
            task.state = status.state
            task.last_status = status
            if is_terminal(status.state):
                self._recover(framework_id, task.agent_id, task.resources)
                self.reg.complete_task(task)
                self.wake_allocation()
        else:
            task.last_status = status
        bound.info("status update")
        self._send_update(framework_id, status)

    def _send_ack(self, agent: Agent, framework_id: str, task_id: str, uuid: bytes) -> None:
        if agent.connected:
            agent.session.send(MasterMessage(status_update_ack=MasterMessage.StatusUpdateAck(
                framework_id=framework_id, task_id=task_id, uuid=uuid)))

    # --- frameworks ------------------------------------------------------------------------

    def subscribe(self, request_info: common_pb2.FrameworkInfo) -> tuple[Framework, Session]:
        info = common_pb2.FrameworkInfo()
        info.CopyFrom(request_info)
        _check_framework_info(info)
        info.role = info.role or "*"
        framework_id = info.framework_id
        if framework_id in self.reg.removed_frameworks:
            raise CallError(grpc.StatusCode.FAILED_PRECONDITION,
                            f"framework {framework_id} was torn down "
                            f"({self.reg.removed_frameworks[framework_id]}); subscribe without "
                            "a framework_id to start afresh")
        framework = self.reg.frameworks.get(framework_id) if framework_id else None
        if framework is not None:
            placeholder = not framework.info.name  # adopted from an agent's report
            if not placeholder and framework.role != info.role:
                raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                                f"framework {framework_id} has role {framework.role!r}; it "
                                f"cannot fail over into role {info.role!r}")
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
            if framework.suppressed:
                framework.suppressed = False
                self.allocator.revive(framework_id)
            failed_over = True
        else:
            framework_id = info.framework_id = framework_id or new_id("framework")
            framework = Framework(info=info, registered_at=time.time())
            self._add_framework_to_allocator(framework)
            failed_over = False
        session = Session()
        framework.session = session
        framework.stream_id = new_id("stream")
        self.store.put_framework(info, framework.registered_at)
        self.allocator.activate_framework(framework_id)
        session.send(Event(subscribed=Event.Subscribed(
            framework_id=framework_id, stream_id=framework.stream_id,
            heartbeat_interval_seconds=self.config.heartbeat_interval_seconds,
            master_id=self.master_id)))
        log.info("framework subscribed", framework_id=framework_id, name=info.name,
                 role=info.role, failed_over=failed_over)
        self.wake_allocation()
        return framework, session

    def framework_disconnected(self, framework: Framework, session: Session) -> None:
        session.close()
        if self.stopping:
            return
        if framework.session is not session or \
                self.reg.frameworks.get(framework.framework_id) is not framework:
            return  # failed over to a newer stream, or torn down
        framework.session = None
        self.allocator.deactivate_framework(framework.framework_id)
        for offer in self.reg.offers_of_framework(framework.framework_id):
            self._rescind(offer, "framework disconnected", notify=False)
        log.info("framework disconnected", framework_id=framework.framework_id,
                 failover_timeout=framework.info.failover_timeout_seconds)
        self._start_failover_timer(framework)

    def _start_failover_timer(self, framework: Framework, minimum: float = 0.0) -> None:
        delay = max(framework.info.failover_timeout_seconds, minimum)
        loop = asyncio.get_running_loop()
        framework.failover_timer = loop.call_later(delay, self._failover_expired,
                                                   framework.framework_id)

    def _failover_expired(self, framework_id: str) -> None:
        framework = self.reg.frameworks.get(framework_id)
        if framework is not None and not framework.connected:
            self.teardown(framework, "failover timeout expired")

    def teardown(self, framework: Framework, reason: str) -> None:
        framework_id = framework.framework_id
        log.info("tearing down framework", framework_id=framework_id, reason=reason)
        if framework.failover_timer is not None:
            framework.failover_timer.cancel()
        for offer in self.reg.offers_of_framework(framework_id):
            self.reg.drop_offer(offer.offer_id, "framework torn down")
        for agent in self.reg.agents.values():
            if agent.connected:
                agent.session.send(MasterMessage(shutdown_framework=MasterMessage.ShutdownFramework(
                    framework_id=framework_id)))
        for task in self.reg.tasks_of_framework(framework_id):
            task.state = common_pb2.TASK_KILLED
            task.last_status = _status(task.task_id, common_pb2.TASK_KILLED,
                                       framework_id=framework_id, agent_id=task.agent_id,
                                       message=f"framework torn down: {reason}",
                                       reason="REASON_FRAMEWORK_REMOVED")
            self.reg.complete_task(task)
        self.allocator.remove_framework(framework_id)
        if framework.connected:
            framework.session.send(Event(error=Event.Error(
                message=f"framework removed: {reason}")))
            framework.session.close()
        framework.session = None
        del self.reg.frameworks[framework_id]
        self.reg.removed_frameworks[framework_id] = reason
        self.store.remove_framework(framework_id, reason)
        self.wake_allocation()

    def framework_for_call(self, framework_id: str, stream_id: str) -> Framework:
        """The caller's framework, refusing unknown ids and stale or foreign streams."""
        framework = self.reg.frameworks.get(framework_id)
        if framework is None:
            if framework_id in self.reg.removed_frameworks:
                raise CallError(grpc.StatusCode.NOT_FOUND,
                                f"framework {framework_id} was torn down; subscribe afresh")
            raise CallError(grpc.StatusCode.NOT_FOUND,
                            f"framework {framework_id!r} is not subscribed; call Subscribe first")
        if not framework.connected or stream_id != framework.stream_id:
            raise CallError(grpc.StatusCode.PERMISSION_DENIED,
                            f"stream {stream_id!r} is not the current subscription of framework "
                            f"{framework_id}; use the stream_id from your latest SUBSCRIBED event")
        return framework

    # --- offers and tasks ------------------------------------------------------------------

    def allocate(self) -> int:
        """One allocation cycle: grants become offers, one OFFERS event per framework."""
        now = self.clock()
        by_framework: dict[str, list[common_pb2.Offer]] = defaultdict(list)
        for grant in self.allocator.allocate(now):
            framework = self.reg.frameworks.get(grant.framework_id)
            agent = self.reg.agents.get(grant.agent_id)
            if framework is None or not framework.connected or agent is None \
                    or not agent.connected:
                self._recover(grant.framework_id, grant.agent_id, grant.resources)
                continue
            offer = Offer(new_id("offer"), grant.framework_id, grant.agent_id, grant.resources,
                          created_at=now)
            self.reg.offers[offer.offer_id] = offer
            by_framework[grant.framework_id].append(self.offer_proto(offer))
        for framework_id, offers in by_framework.items():
            self.reg.frameworks[framework_id].session.send(
                Event(offers=Event.Offers(offers=offers)))
            log.debug("offers sent", framework_id=framework_id, count=len(offers))
        return sum(len(o) for o in by_framework.values())

    def offer_proto(self, offer: Offer) -> common_pb2.Offer:
        agent = self.reg.agents[offer.agent_id]
        return common_pb2.Offer(
            offer_id=offer.offer_id, framework_id=offer.framework_id, agent_id=offer.agent_id,
            hostname=agent.info.hostname, resources=offer.resources.to_proto(),
            attributes=agent.info.attributes, agent_address=agent.info.address)

    def expire_offers(self) -> None:
        timeout = self.config.offer_timeout_seconds
        if timeout is None:
            return
        now = self.clock()
        for offer in list(self.reg.offers.values()):
            if now - offer.created_at >= timeout:
                self._rescind(offer, f"offer timed out after {timeout:g} s")

    def check_agents(self) -> None:
        now = self.clock()
        for agent in list(self.reg.agents.values()):
            silent = now - agent.last_seen
            if silent > self.config.agent_timeout_seconds:
                what = "did not re-register" if agent.state == RECOVERING else "silent"
                self.remove_agent(agent, f"{what} for {silent:.1f} s "
                                         f"(agent timeout {self.config.agent_timeout_seconds:g} s)")

    def accept(self, request: scheduler_pb2.AcceptRequest) -> list[str]:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        active = {t.task_id for t in self.reg.tasks_of_framework(framework_id)}
        plan = plan_launch(framework_id, request, self.reg.offers, self.reg.gone_offers, active,
                           self.config.default_refuse_seconds)
        agent = self.reg.agents[plan.agent_id]
        for offer_id in plan.offer_ids:
            self.reg.drop_offer(offer_id, "already accepted")
        launched = []
        for task_info, resources in plan.tasks:
            info = common_pb2.TaskInfo()
            info.CopyFrom(task_info)
            info.agent_id = plan.agent_id
            task = Task(framework_id, plan.agent_id, info, resources)
            task.last_status = _status(info.task_id, common_pb2.TASK_STAGING,
                                       framework_id=framework_id, agent_id=plan.agent_id,
                                       message="launching", reason="")
            self.reg.tasks[task.key] = task
            agent.session.send(MasterMessage(run_task=MasterMessage.RunTask(
                framework_id=framework_id, task=info, framework=framework.info)))
            launched.append(info.task_id)
        if plan.unused:
            self._recover(framework_id, plan.agent_id, plan.unused, refuse=plan.refuse_seconds)
        log.info("offers accepted", framework_id=framework_id, agent_id=plan.agent_id,
                 offers=list(plan.offer_ids), tasks=launched)
        self.wake_allocation()
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
        offers = check_offers(framework.framework_id, live, self.reg.offers,
                              self.reg.gone_offers)
        for offer in offers:
            self.reg.drop_offer(offer.offer_id, "declined")
            self._recover(offer.framework_id, offer.agent_id, offer.resources, refuse=refuse)
        log.info("offers declined", framework_id=framework.framework_id,
                 offers=[o.offer_id for o in offers], refuse_seconds=refuse)
        self.wake_allocation()

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
        grace = request.grace_period_seconds
        if not math.isfinite(grace) or grace < 0:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"grace_period_seconds must be 0 or more, got {grace}")
        if not request.task_id:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "task_id is empty")
        task = self.reg.tasks.get((framework.framework_id, request.task_id))
        if task is None:
            self._send_update(framework.framework_id, _status(
                request.task_id, common_pb2.TASK_LOST, framework_id=framework.framework_id,
                agent_id=request.agent_id, reason="REASON_RECONCILIATION",
                message=f"kill of task {request.task_id}: the master knows no such active task"))
            return
        agent = self.reg.agents.get(task.agent_id)
        if agent is None or not agent.connected:
            raise CallError(grpc.StatusCode.UNAVAILABLE,
                            f"agent {task.agent_id} of task {task.task_id} is disconnected; "
                            "retry the kill later")
        agent.session.send(MasterMessage(kill_task=MasterMessage.KillTask(
            framework_id=framework.framework_id, task_id=task.task_id,
            grace_period_seconds=grace)))
        log.info("kill sent", framework_id=framework.framework_id, task_id=task.task_id,
                 agent_id=task.agent_id)

    def acknowledge(self, request: scheduler_pb2.AcknowledgeRequest) -> None:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        if not request.uuid:
            return  # master-generated updates need no acknowledgement
        if len(request.uuid) != 16:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                            "uuid must be the 16 bytes of the update being acknowledged")
        agent = self.reg.agents.get(request.agent_id)
        if agent is None:
            raise CallError(grpc.StatusCode.NOT_FOUND,
                            f"agent {request.agent_id!r} is not registered; the update's "
                            "agent_id names it")
        # A disconnected agent resends the update when it is back; the framework acks again.
        self._send_ack(agent, framework.framework_id, request.task_id, request.uuid)

    def reconcile(self, request: scheduler_pb2.ReconcileRequest) -> int:
        framework = self.framework_for_call(request.framework_id, request.stream_id)
        framework_id = framework.framework_id
        statuses = []
        if not request.tasks:
            for task in self.reg.tasks_of_framework(framework_id):
                statuses.append(self._reconciled(task))
        recovering = any(a.state == RECOVERING for a in self.reg.agents.values())
        for wanted in request.tasks:
            task = self.reg.find_task(framework_id, wanted.task_id)
            if task is not None:
                statuses.append(self._reconciled(task))
                continue
            named = self.reg.agents.get(wanted.agent_id) if wanted.agent_id else None
            if (named is not None and named.state == RECOVERING) or \
                    (not wanted.agent_id and recovering):
                continue  # its agent may still re-register with it: answer nothing yet
            statuses.append(_status(wanted.task_id, common_pb2.TASK_UNKNOWN,
                                    framework_id=framework_id, agent_id=wanted.agent_id,
                                    reason="REASON_RECONCILIATION",
                                    message="the master knows no such task"))
        for status in statuses:
            self._send_update(framework_id, status)
        return len(statuses)

    def _reconciled(self, task: Task) -> common_pb2.TaskStatus:
        message = task.last_status.message if task.last_status is not None else ""
        status = _status(task.task_id, task.state, framework_id=task.framework_id,
                         agent_id=task.agent_id, reason="REASON_RECONCILIATION", message=message)
        if task.last_status is not None and task.last_status.HasField("exit_code"):
            status.exit_code = task.last_status.exit_code
        return status

    # --- operator --------------------------------------------------------------------------

    def set_weight(self, role: str, weight: float) -> None:
        _check_role(role)
        if not math.isfinite(weight) or weight <= 0:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"weight must be a positive number, got {weight}")
        self.allocator.set_weight(role, weight)
        self.store.put_weight(role, weight)
        self.wake_allocation()

    def set_quota(self, role: str, quota: operator_pb2.Quota) -> None:
        _check_role(role)
        try:
            guarantee = Resources.from_proto(quota.guarantee)
            limit = Resources.from_proto(quota.limit) if quota.limit else None
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad quota: {e}") from None
        if limit is not None and not limit.contains(guarantee):
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"quota guarantee {guarantee} exceeds its limit {limit}")
        try:
            self.allocator.set_quota(role, guarantee, limit)
        except ValueError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        self.store.put_quota(role, quota if (guarantee or limit is not None) else None)
        self.wake_allocation()

    def drain_agent(self, agent_id: str) -> None:
        agent = self.reg.agents.get(agent_id)
        if agent is None:
            raise CallError(grpc.StatusCode.NOT_FOUND, f"agent {agent_id!r} is not registered")
        agent.draining = True
        if self._in_allocator(agent):
            self.allocator.deactivate_agent(agent_id)
        if agent.connected:
            agent.state = DRAINING
        for offer in self.reg.offers_of_agent(agent_id):
            self._rescind(offer, "agent draining")

    def find_framework(self, text: str) -> Framework:
        if text in self.reg.frameworks:
            return self.reg.frameworks[text]
        named = [f for f in self.reg.frameworks.values() if f.info.name == text]
        if len(named) == 1:
            return named[0]
        if named:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                            f"{len(named)} frameworks are named {text!r}; give a framework id")
        raise CallError(grpc.StatusCode.NOT_FOUND, f"no framework with id or name {text!r}")


def _check_role(role: str) -> None:
    if not role or not _ROLE.fullmatch(role) or role in (".", ".."):
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"role {role!r} is not valid: use letters, digits, _ . - / or '*'")


def _check_framework_info(info: common_pb2.FrameworkInfo) -> None:
    if not info.name:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT, "framework name is empty; name it")
    if info.role:
        _check_role(info.role)
    timeout = info.failover_timeout_seconds
    if not math.isfinite(timeout) or timeout < 0:
        raise CallError(grpc.StatusCode.INVALID_ARGUMENT,
                        f"failover_timeout_seconds must be 0 or more, got {timeout}")
    if info.service_address:
        try:
            parse_address(info.service_address)
        except ValueError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"service_address: {e}") from None
