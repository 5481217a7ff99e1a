"""The master's state machine: agents, frameworks, tasks and offers, driven by the services.

Every method is synchronous and runs on the event loop, so no two changes interleave. Refused
calls raise CallError; the services turn it into a gRPC status. Messages leave through each
peer's Session queue.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

import grpc
import structlog

from agora.common import EMPTY, ResourceError, Resources, attributes_from_proto, new_id
from agora.common.masters import MasterInfo
from agora.master.agents import AgentHandling
from agora.master.allocator import AllocatorProtocol
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError, Reason
from agora.master.frameworks import FrameworkHandling
from agora.master.registry import (
    ACTIVE,
    DRAINING,
    RECOVERING,
    Agent,
    Bounds,
    Framework,
    Offer,
    Registry,
)
from agora.master.registry_store import RegistryStore
from agora.master.removal_limit import RemovalLimit
from agora.master.scheduler_calls import SchedulerCalls
from agora.master.validation import check_role
from agora.v1 import agent_link_pb2, common_pb2, operator_pb2, scheduler_pb2

log = structlog.get_logger(__name__)

Event = scheduler_pb2.Event
MasterMessage = agent_link_pb2.MasterMessage


class MasterCore(AgentHandling, FrameworkHandling, SchedulerCalls):
    """All master state and the decisions on it; the agent, framework and scheduler-call
    halves live in their own modules as mixins over this state."""

    def __init__(
        self,
        config: MasterConfig,
        allocator: AllocatorProtocol,
        store: RegistryStore,
        clock: Callable[[], float] = time.monotonic,
        master_id: str = "",
    ) -> None:
        self.config = config
        self.allocator = allocator
        self.store = store
        self.clock = clock
        self.master_id = master_id or new_id("master")
        self.started_at = time.time()
        # Every master of the set, the leader first (Master sets it: the election's view with
        # --zk, else this master alone).
        self.masters: Callable[[], list[MasterInfo]] = lambda: [
            MasterInfo(
                self.master_id, f"{config.host}:{config.port}", self.started_at, self.started_at
            )
        ]
        self.reg = Registry(
            bounds=Bounds(
                completed_tasks_per_framework=config.max_completed_tasks_per_framework,
                removed_frameworks=config.max_removed_frameworks,
                removed_agents=config.max_removed_agents,
            )
        )
        self.allocation_wanted = asyncio.Event()
        # Agents whose free resources changed since the last cycle, which is all an event-driven
        # cycle needs to look at; None: every agent (a framework-level change, such as a
        # subscription or a revive, can make any agent offerable).
        self._changed_agents: set[str] | None = set()
        # When each agent's resources (or, with the key None, everyone's) last became free
        # and have not been looked at by a cycle since: the start of the offer latency.
        self._freed_at: dict[str | None, float] = {}
        self.counts = MasterCounters()
        # Torn-down frameworks whose tasks' processes have not ended yet: the allocator keeps
        # their resources in use until the agents report each task gone (frameworks.teardown).
        self._reaping: set[str] = set()
        self.removal_limit = (
            RemovalLimit(*config.agent_removal_rate_limit)
            if config.agent_removal_rate_limit is not None
            else None
        )
        # Set by Master.stop: streams ending now are the master's doing, not peers leaving.
        self.stopping = False

    # --- helpers -------------------------------------------------------------------------

    def wake_allocation(self, agent_id: str | None = None) -> None:
        """Asks for an allocation over `agent_id` (a change on that agent only), or over every
        agent when None."""
        if agent_id is None:
            self._changed_agents = None
        elif self._changed_agents is not None:
            self._changed_agents.add(agent_id)
        self._freed_at.setdefault(agent_id, self.clock())
        self.allocation_wanted.set()

    def take_changed_agents(self) -> list[str] | None:
        """The agents to allocate over now (None: all), resetting the set."""
        changed, self._changed_agents = self._changed_agents, set()
        return None if changed is None else list(changed)

    def _send_update(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        framework = self.reg.frameworks.get(framework_id)
        if framework is None:
            return
        if framework.connected:
            framework.session.send(Event(update=Event.Update(status=status)))
            self.counts.updates_forwarded += 1
        elif not status.uuid:
            # An agent resends its own updates until acknowledged, but nobody resends the
            # master's (TASK_LOST of a removed agent), and implicit reconciliation reports live
            # tasks only: keep it for the re-subscription or the framework never hears of it.
            framework.missed_updates.append(status)

    def _in_allocator(self, agent: Agent | None) -> bool:
        return agent is not None and agent.state != RECOVERING

    def _recover(
        self, framework_id: str, agent_id: str, resources: Resources, refuse: float | None = None
    ) -> None:
        if (
            resources
            and self._in_allocator(self.reg.agents.get(agent_id))
            and (framework_id in self.reg.frameworks or framework_id in self._reaping)
        ):
            try:
                self.allocator.recover(
                    framework_id, agent_id, resources, self.clock(), refuse_seconds=refuse
                )
            except ValueError:
                # The books disagree (a bug): log it loudly but keep serving everyone.
                log.exception(
                    "allocator refused to recover resources",
                    framework_id=framework_id,
                    agent_id=agent_id,
                    resources=str(resources),
                )

    def _reaped(self, framework_id: str) -> None:
        """A torn-down framework's last task is gone: the allocator forgets it now."""
        if framework_id in self._reaping and not self.reg.tasks_of_framework(framework_id):
            self._reaping.discard(framework_id)
            self.allocator.remove_framework(framework_id)
            log.info("torn-down framework's tasks all ended", framework_id=framework_id)
            self.wake_allocation()

    def _rescind(
        self, offer: Offer, why: str, *, notify: bool = True, recover: bool = True
    ) -> None:
        self.reg.drop_offer(offer.offer_id, why)
        self.counts.offers_rescinded += 1
        if recover:
            self._recover(offer.framework_id, offer.agent_id, offer.resources)
        framework = self.reg.frameworks.get(offer.framework_id)
        if notify and framework is not None and framework.connected:
            framework.session.send(Event(rescind=Event.Rescind(offer_id=offer.offer_id)))
        log.info(
            "offer rescinded",
            offer_id=offer.offer_id,
            framework_id=offer.framework_id,
            agent_id=offer.agent_id,
            why=why,
        )
        self.wake_allocation(offer.agent_id)

    def forget_removed(self, kind: str, ids: list[str]) -> None:
        """Drops removals past the bounds from the store too (Registry.note_removed)."""
        if ids:
            self.store.forget_removed(kind, ids)
            log.info(f"forgot removed {kind}s past the bound", count=len(ids))

    # --- recovery after a restart ----------------------------------------------------------

    def recover_state(self) -> None:
        """Loads whom to expect from the store. Frameworks wait for their failover timeout, and
        at least as long as agents get to re-register, since their tasks come with the agents."""
        now = self.clock()
        for kind in ("agent", "framework"):
            forgotten: list[str] = []
            for removed_id, reason in self.store.removed(kind).items():  # oldest first
                forgotten += self.reg.note_removed(kind, removed_id, reason)
            self.forget_removed(kind, forgotten)
        for role, weight in self.store.weights().items():
            self.allocator.set_weight(role, weight)
        for role, quota in self.store.quotas().items():
            self.allocator.set_quota(
                role,
                Resources.from_proto(quota.guarantee),
                Resources.from_proto(quota.limit) if quota.limit else None,
            )
        drained = self.store.drained()
        for stored in self.store.agents():
            self.reg.agents[stored.info.agent_id] = Agent(
                info=stored.info,
                total=Resources.from_proto(stored.info.resources),
                attributes=attributes_from_proto(stored.info.attributes),
                registered_at=stored.registered_at,
                last_seen=now,
                state=RECOVERING,
                draining=stored.info.agent_id in drained,
            )
        for stored in self.store.frameworks():
            framework = Framework(info=stored.info, registered_at=stored.registered_at)
            self._add_framework_to_allocator(framework)
            self.allocator.deactivate_framework(framework.framework_id)
            self._start_failover_timer(framework, minimum=self.config.agent_timeout_seconds)
        log.info(
            "state recovered",
            agents=len(self.reg.agents),
            frameworks=len(self.reg.frameworks),
            store=self.store.describe(),
        )

    def _add_framework_to_allocator(self, framework: Framework) -> None:
        self.reg.frameworks[framework.framework_id] = framework
        allocated: dict[str, Resources] = {}
        for task in self.reg.tasks_of_framework(framework.framework_id):
            if self._in_allocator(self.reg.agents.get(task.agent_id)):
                allocated[task.agent_id] = allocated.get(task.agent_id, EMPTY) + task.resources
        self.allocator.add_framework(
            framework.framework_id,
            role=framework.role,
            capabilities=frozenset(framework.info.capabilities),
            allocated=allocated,
        )

    # --- operator --------------------------------------------------------------------------

    def set_weight(self, role: str, weight: float) -> None:
        check_role(role)
        if not math.isfinite(weight) or weight <= 0:
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT, f"weight must be a positive number, got {weight}"
            )
        self.allocator.set_weight(role, weight)
        self.store.put_weight(role, weight)
        self.wake_allocation()

    def set_quota(self, role: str, quota: operator_pb2.Quota) -> None:
        check_role(role)
        try:
            guarantee = Resources.from_proto(quota.guarantee)
            limit = Resources.from_proto(quota.limit) if quota.limit else None
        except ResourceError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, f"bad quota: {e}") from None
        if limit is not None and not limit.contains(guarantee):
            raise CallError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"quota guarantee {guarantee} exceeds its limit {limit}",
            )
        try:
            self.allocator.set_quota(role, guarantee, limit)
        except ValueError as e:
            raise CallError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        self.store.put_quota(role, quota if (guarantee or limit is not None) else None)
        self.wake_allocation()

    def drain_agent(self, agent_id: str) -> None:
        agent = self.reg.agents.get(agent_id)
        if agent is None:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"agent {agent_id!r} is not registered",
                Reason.AGENT_UNKNOWN,
            )
        if not agent.draining:
            self.store.put_drained(agent_id, True)
        agent.draining = True
        if self._in_allocator(agent):
            self.allocator.deactivate_agent(agent_id)
        if agent.connected:
            agent.state = DRAINING
        for offer in self.reg.offers_of_agent(agent_id):
            self._rescind(offer, "agent draining")

    def undrain_agent(self, agent_id: str) -> None:
        """Ends a drain: the agent's free resources are offered again."""
        agent = self.reg.agents.get(agent_id)
        if agent is None:
            raise CallError(
                grpc.StatusCode.NOT_FOUND,
                f"agent {agent_id!r} is not registered",
                Reason.AGENT_UNKNOWN,
            )
        if not agent.draining:
            return
        self.store.put_drained(agent_id, False)
        agent.draining = False
        if agent.connected:
            agent.state = ACTIVE
            if self._in_allocator(agent):
                self.allocator.activate_agent(agent_id)
            self.wake_allocation(agent_id)

    def explain_offers(self, framework_id: str) -> list[str]:
        """Why `framework_id` gets no offers: the allocator's reasons, then who holds the
        cluster's resources as offers it has not answered (the usual culprit on a full cluster)."""
        reasons = list(self.allocator.explain(framework_id, self.clock()))
        held = hoarders(self.reg.offers.values(), self.reg.frameworks, framework_id, self.clock())
        timeout = self.config.offer_timeout_seconds
        for name, resources, agents, oldest in held[:3]:
            back = (
                f"the offer timeout ({timeout:g} s) returns them"
                if timeout
                else "no offer timeout is set (--offer-timeout)"
            )
            reasons.append(
                f"{name} holds {resources} in unanswered offers on {agents} agent(s), the "
                f"oldest for {oldest:.0f} s; {back}"
            )
        return reasons

    def find_framework(self, text: str) -> Framework:
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


def hoarders(offers, frameworks, asking: str, now: float) -> list[tuple[str, str, int, float]]:
    """(framework, resources, agents, oldest offer's age) of every other framework holding
    outstanding offers, the largest holder first. Pure: offers and frameworks as the registry
    has them, `now` on the same clock as the offers' created_at."""
    by_framework: dict[str, list] = {}
    for offer in offers:
        if offer.framework_id != asking:
            by_framework.setdefault(offer.framework_id, []).append(offer)
    rows = []
    for framework_id, held in by_framework.items():
        total = sum((offer.resources for offer in held), EMPTY)
        framework = frameworks.get(framework_id)
        name = (
            f"{framework.info.name} ({framework_id})"
            if framework and framework.info.name
            else framework_id
        )
        agents = len({o.agent_id for o in held})
        oldest = max(now - o.created_at for o in held)
        rows.append((total.scalar("cpus"), name, total.format() or "-", agents, oldest))
    rows.sort(key=lambda row: -row[0])
    return [(name, text, agents, oldest) for _, name, text, agents, oldest in rows]
