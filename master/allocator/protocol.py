"""What the master asks of an allocator: the protocol it is typed against.

`Allocator` (allocator.py) is the one implementation today; a different policy engine (or a
recording fake in a test) that offers these calls plugs in with `Master(config, allocator=...)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from agora.common import Resources
from agora.master.allocator.types import OfferGrant

__all__ = ["AllocatorProtocol"]


class AllocatorProtocol(Protocol):
    # agents
    def add_agent(
        self,
        agent_id: str,
        total: Resources,
        attributes: Mapping[str, str] | None = None,
        allocated: Mapping[str, Resources] | None = None,
    ) -> None: ...
    def remove_agent(self, agent_id: str) -> None: ...
    def activate_agent(self, agent_id: str) -> None: ...
    def deactivate_agent(self, agent_id: str) -> None: ...

    # frameworks
    def add_framework(
        self,
        framework_id: str,
        role: str = ...,
        capabilities: Iterable[str] = ...,
        allocated: Mapping[str, Resources] | None = None,
        suppressed: bool = False,
    ) -> None: ...
    def remove_framework(self, framework_id: str) -> None: ...
    def update_framework(self, framework_id: str, capabilities: Iterable[str]) -> None: ...
    def activate_framework(self, framework_id: str) -> None: ...
    def deactivate_framework(self, framework_id: str) -> None: ...
    def suppress(self, framework_id: str) -> None: ...
    def revive(self, framework_id: str) -> None: ...

    # resources and policy
    def recover(
        self,
        framework_id: str,
        agent_id: str,
        resources: Resources,
        now: float,
        refuse_seconds: float | None = None,
    ) -> None: ...
    def set_weight(self, role: str, weight: float) -> None: ...
    def set_quota(
        self, role: str, guarantee: Resources | None, limit: Resources | None = None
    ) -> None: ...

    # the cycle, and what it tells operators
    def allocate(self, now: float, agent_ids: Iterable[str] | None = None) -> list[OfferGrant]: ...
    def next_wakeup(self) -> float | None: ...
    def dominant_share(self, framework_id: str) -> float: ...
    def free(self, agent_id: str) -> Resources: ...
    def role_summaries(self) -> list[dict]: ...
    def explain(self, framework_id: str, now: float) -> list[str]: ...
