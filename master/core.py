"""The master's state machine, assembled: the books of agents, frameworks and tasks, the offer
cycle, and the operator's calls on them.

Every call the services make into it is synchronous and runs on the event loop, so no two
changes interleave (only the offer cycle's own loop yields, between whole slices). Refused
calls raise CallError; the services turn it into a gRPC status. Messages leave through each
peer's Session queue. Time is read through one Clock (master/clock.py), so tests can drive the
whole machine without sleeping.

    services --> agents (AgentBook)       registration, silence, removal, draining
             --> frameworks (FrameworkBook) subscribe, failover, teardown, revive, suppress
             --> tasks (TaskBook)         accept, kill, status updates, acks, reconciliation
             --> offers (OfferCycle)      wake, cycle, offers out, decline, rescind, expiry
    all of them give resources back through ledger (Ledger) to the allocator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
import structlog

from agora.common import EMPTY, ResourceError, Resources, attributes_from_proto, new_id
from agora.common.masters import MasterInfo
from agora.master.agents import AgentBook
from agora.master.allocator import AllocatorProtocol
from agora.master.clock import Clock, LoopClock
from agora.master.config import MasterConfig
from agora.master.counters import MasterCounters
from agora.master.errors import CallError
from agora.master.events import EventLog
from agora.master.frameworks import FrameworkBook
from agora.master.holds import HoldBook
from agora.master.ledger import Ledger
from agora.master.offer_cycle import OfferCycle
from agora.master.preemptions import Preemptions
from agora.master.registry import RECOVERING, Agent, Bounds, Framework, Registry, Session
from agora.master.registry_store import RegistryStore, forget_removed
from agora.master.tasks import TaskBook
from agora.master.validation import check_role
from agora.v1 import operator_pb2

if TYPE_CHECKING:  # kazoo only where a set of masters runs
    from agora.master.event_store import ZkEventStore

log = structlog.get_logger(__name__)

__all__ = ["MasterCore", "hoarders"]


class MasterCore:
    """All master state and the decisions on it, as collaborators over one Registry."""

    def __init__(
        self,
        config: MasterConfig,
        allocator: AllocatorProtocol,
        store: RegistryStore,
        clock: Clock | None = None,
        master_id: str = "",
        new_session: Callable[[int], Session] = Session,
        epoch: int = 0,
        event_store: ZkEventStore | None = None,
    ) -> None:
        """`clock`: real time unless given (tests give a ManualClock); `new_session`: makes a
        framework's stream queue (tests give one that records what is sent); `epoch`: the
        leader's election sequence number (0 for a master alone), told to every agent and
        framework as it registers so they can tell a deposed leader's messages apart."""
        self.config = config
        self.allocator = allocator
        self.store = store
        self.clock: Clock = clock if clock is not None else LoopClock()
        self.master_id = master_id or new_id("master")
        self.started_at = self.clock.wall()
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
        self.counts = MasterCounters()
        self.ledger = Ledger(self.reg, allocator, self.clock)
        self.offers = OfferCycle(config, self.reg, allocator, self.ledger, self.clock, self.counts)
        self.frameworks = FrameworkBook(
            config,
            self.reg,
            allocator,
            store,
            self.ledger,
            self.offers,
            self.clock,
            self.counts,
            self.master_id,
            new_session,
        )
        self.holds = HoldBook(config, self.reg, allocator, self.offers, self.clock, self.counts)
        self.tasks = TaskBook(
            config, self.reg, self.ledger, self.offers, self.frameworks, self.clock, self.counts
        )
        self.agents = AgentBook(
            config,
            self.reg,
            allocator,
            store,
            self.ledger,
            self.offers,
            self.frameworks,
            self.tasks,
            self.clock,
            self.counts,
            self.master_id,
        )
        self.preemptions = Preemptions(
            config, self.reg, allocator, self.clock, wall=self.clock.wall, store=store
        )
        self.tasks.preempted = self.preemptions.ended
        self.tasks.revoke = self.preemptions.revoke
        self.epoch = self.frameworks.epoch = self.agents.epoch = epoch
        # What happens, for Operator.WatchEvents and the audit log (master/events.py).
        # A set's leader keeps them in ZooKeeper (`event_store`, loaded), numbered across leaders.
        self.events = EventLog(
            generation=epoch,
            clock=self.clock.wall,
            audit_path=config.audit_log_path,
            store=event_store,
        )
        self.frameworks.events = self.agents.events = self.tasks.events = self.events

    @property
    def stopping(self) -> bool:
        """Set by Master.stop: streams ending now are the master's doing, not peers leaving."""
        return self.agents.stopping

    @stopping.setter
    def stopping(self, value: bool) -> None:
        self.agents.stopping = self.frameworks.stopping = value

    # --- recovery after a restart ----------------------------------------------------------

    def recover_state(self) -> None:
        """Loads whom to expect from the store. Frameworks wait for their failover timeout, and
        at least as long as agents get to re-register, since their tasks come with the agents."""
        now = self.agents.attention.now(self.clock.now())  # agents' silence is measured on it
        for kind in ("agent", "framework"):
            forgotten: list[str] = []
            for removed_id, reason in self.store.removed(kind).items():  # oldest first
                forgotten += self.reg.note_removed(kind, removed_id, reason)
            forget_removed(self.store, kind, forgotten)
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
                drain_deadline=drained.get(stored.info.agent_id, 0.0),
                principal=stored.principal,  # only they may register under its id again
            )
            self.agents.arm_drain_deadline(self.reg.agents[stored.info.agent_id])
            if stored.principal:
                self.agents.by_principal[stored.principal] = stored.info.agent_id
        for stored_framework in self.store.frameworks():
            framework = Framework(
                info=stored_framework.info,
                registered_at=stored_framework.registered_at,
                principal=stored_framework.principal,  # only they may fail over to it
            )
            self.ledger.add_framework(framework)
            self.allocator.deactivate_framework(framework.framework_id)
            self.frameworks.start_failover_timer(
                framework, minimum=self.config.agent_timeout_seconds
            )
        log.info(
            "state recovered",
            agents=len(self.reg.agents),
            frameworks=len(self.reg.frameworks),
            store=self.store.describe(),
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
        self.offers.wake()

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
        self.offers.wake()

    def tick(self, step: float, check: bool) -> None:
        """One turn of the master's tick loop, meant to come `step` seconds after the last:
        the agents' attention clock moves; on a `check` turn silent agents are removed and
        offers and holds past their time expire. The server's loop and the test harness both
        turn the master through here (frameworks' heartbeats are the server's to send)."""
        self.agents.tick(step)
        if check:
            self.agents.check_silence()
            self.offers.expire()
            self.holds.expire()
        # Every turn (a fraction of a second), not every check: each need waits for the kill
        # before it, so a starved role's next task is not held up by the check period. Cheap
        # unless a role has waited its timeout; off unless a preemption timeout is set.
        self.preemptions.check()

    def explain_offers(self, framework_id: str) -> list[str]:
        """Why `framework_id` gets no offers: the allocator's reasons, then who holds the
        cluster's resources as offers it has not answered (the usual culprit on a full cluster)."""
        reasons = list(self.allocator.explain(framework_id, self.clock.now()))
        framework = self.reg.frameworks.get(framework_id)
        waiting = self.preemptions.explain(framework.role) if framework is not None else None
        if waiting is not None:
            reasons.insert(0, waiting)
        held = hoarders(
            self.reg.offers.values(), self.reg.frameworks, framework_id, self.clock.now()
        )
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
