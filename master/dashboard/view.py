"""The dashboard's ClusterView of a running master: the Operator service's own views."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agora.common import EMPTY, Resources
from agora.master import views
from agora.v1 import operator_pb2

if TYPE_CHECKING:
    from agora.master.core import MasterCore


AGENTS_PER_SLICE = 50


@dataclass(frozen=True)
class OutstandingOffer:
    """An offer sent to a framework and not yet accepted, declined or rescinded."""

    offer_id: str
    framework_id: str
    agent_id: str
    resources: Resources
    age_seconds: float


@dataclass(frozen=True)
class AgentUse:
    """What one agent's resources are doing now, by framework id."""

    free: Resources  # unallocated (offered to no one while the agent drains)
    draining: bool
    in_use: dict[str, Resources]  # by its live tasks there
    offered: dict[str, Resources]  # in its outstanding offers there


def framework_label(name: str, framework_id: str) -> str:
    """ "batch (3f9c1a)": the name people know, and enough of the id to tell two apart."""
    short = framework_id.removeprefix("framework-")[:6]
    return f"{name} ({short})" if name else framework_id


class MasterView:
    def __init__(self, core: MasterCore, leader: str = "") -> None:
        self.core = core
        self.leader = leader

    async def state(self) -> operator_pb2.ClusterState:
        """The Operator's ClusterState, its agents built a slice at a time: with thousands of
        agents the whole build holds the master's loop for tens of milliseconds, which would
        delay offers; between slices the loop serves everything else."""
        ids = sorted(self.core.reg.agents)
        agents: list[operator_pb2.AgentSummary] = []
        total = EMPTY
        for start in range(0, len(ids), AGENTS_PER_SLICE):
            chunk = ids[start : start + AGENTS_PER_SLICE]
            agents += views.agent_summaries(self.core, chunk)
            for agent_id in chunk:
                agent = self.core.reg.agents.get(agent_id)
                if agent is not None:
                    total = total + agent.total
            await asyncio.sleep(0)
        return views.cluster_state(self.core, self.leader, agents, total)

    def shares(self) -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
        """Dominant shares by role and by framework id, and each framework's label (its name and
        short id), straight from the allocator: the chart samples them every few seconds, so no
        per-agent or per-task walk here."""
        roles = {row["role"]: row["dominant_share"] for row in self.core.allocator.role_summaries()}
        frameworks: dict[str, float] = {}
        labels: dict[str, str] = {}
        for framework_id, framework in self.core.reg.frameworks.items():
            try:
                share = float(self.core.allocator.dominant_share(framework_id))
            except (KeyError, ValueError):
                share = 0.0
            frameworks[framework_id] = share
            labels[framework_id] = framework_label(framework.info.name, framework_id)
        return roles, frameworks, labels

    def offers(self, framework_id: str = "", agent_id: str = "") -> list[OutstandingOffer]:
        """Every outstanding offer (or one framework's, or one agent's), the oldest first."""
        reg = self.core.reg
        if framework_id:
            offers = reg.offers_of_framework(framework_id)
        elif agent_id:
            offers = reg.offers_of_agent(agent_id)
        else:
            offers = list(reg.offers.values())
        now = self.core.clock.now()  # the clock of the offers' created_at
        rows = [
            OutstandingOffer(
                o.offer_id, o.framework_id, o.agent_id, o.resources, now - o.created_at
            )
            for o in offers
            if not agent_id or o.agent_id == agent_id
        ]
        return sorted(rows, key=lambda o: -o.age_seconds)

    def offer_count(self) -> int:
        return len(self.core.reg.offers)

    def preemptions(self) -> list:
        """The latest tasks stopped for another role, oldest first (master/preemptions.py)."""
        return list(self.core.preemptions.history)

    def offer_timeout(self) -> float | None:
        """Seconds after which an unanswered offer is rescinded (None: never)."""
        return self.core.config.offer_timeout_seconds

    def agent_use(self, agent_id: str) -> AgentUse | None:
        """None for an agent the master does not know. Free as Scheduler.GetClusterView says
        (master.views.cluster_view): nothing for an agent recovered from the store and not yet
        re-registered, whose tasks are not known yet."""
        core = self.core
        agent = core.reg.agents.get(agent_id)
        if agent is None:
            return None
        in_use: dict[str, Resources] = {}
        offered: dict[str, Resources] = {}
        for task in core.reg.tasks_of_agent(agent_id):
            in_use[task.framework_id] = in_use.get(task.framework_id, EMPTY) + task.resources
        for offer in core.reg.offers_of_agent(agent_id):
            offered[offer.framework_id] = offered.get(offer.framework_id, EMPTY) + offer.resources
        free = core.allocator.free(agent_id) if core.ledger.in_allocator(agent) else EMPTY
        return AgentUse(free, agent.draining, in_use, offered)

    # actions: the Operator service's calls (the caller has passed the same ACL check) ----

    def kill_task(self, framework_id: str, task_id: str, grace: float = 0.0) -> None:
        """As Operator.KillTask: CallError NOT_FOUND for a task not running."""
        self.core.tasks.operator_kill(framework_id, task_id, grace)

    def drain(self, agent_id: str) -> None:
        self.core.agents.drain(agent_id)

    def undrain(self, agent_id: str) -> None:
        self.core.agents.undrain(agent_id)

    def framework_principal(self, framework_id: str) -> str:
        framework = self.core.reg.frameworks.get(framework_id)
        return framework.principal if framework is not None else ""

    def explain(self, framework_id: str) -> list[str]:
        return self.core.explain_offers(framework_id)
