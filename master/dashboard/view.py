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

    def explain(self, framework_id: str) -> list[str]:
        return list(self.core.allocator.explain(framework_id, self.core.clock()))
