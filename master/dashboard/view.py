"""The dashboard's ClusterView of a running master: the Operator service's own views."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agora.master import views
from agora.v1 import operator_pb2

if TYPE_CHECKING:
    from agora.master.core import MasterCore


class MasterView:
    def __init__(self, core: MasterCore, leader: str = "") -> None:
        self.core = core
        self.leader = leader

    def state(self) -> operator_pb2.ClusterState:
        return views.cluster_state(self.core, self.leader)

    def shares(self) -> tuple[dict[str, float], dict[str, float]]:
        """Dominant shares by role and by framework name, straight from the allocator: the
        chart samples them every few seconds, so no per-agent or per-task walk here."""
        roles = {row["role"]: row["dominant_share"] for row in self.core.allocator.role_summaries()}
        frameworks = {}
        for framework_id, framework in self.core.reg.frameworks.items():
            try:
                share = float(self.core.allocator.dominant_share(framework_id))
            except (KeyError, ValueError):
                share = 0.0
            frameworks[framework.info.name or framework_id] = share
        return roles, frameworks

    def framework_principal(self, framework_id: str) -> str:
        framework = self.core.reg.frameworks.get(framework_id)
        return framework.principal if framework is not None else ""

    def explain(self, framework_id: str) -> list[str]:
        return list(self.core.allocator.explain(framework_id, self.core.clock()))
