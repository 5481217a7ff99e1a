"""The dashboard's ClusterView of a running master: the Operator service's own views."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from agora.common import EMPTY
from agora.master import views
from agora.v1 import operator_pb2

if TYPE_CHECKING:
    from agora.master.core import MasterCore


AGENTS_PER_SLICE = 50


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

    def framework_principal(self, framework_id: str) -> str:
        framework = self.core.reg.frameworks.get(framework_id)
        return framework.principal if framework is not None else ""

    def explain(self, framework_id: str) -> list[str]:
        return self.core.explain_offers(framework_id)
