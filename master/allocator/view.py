"""A read-only view of the allocator's state, for code that explains its decisions.

`explain` (and any report) reads the allocator through this view rather than its private
members, so the allocator can change how it keeps its state without breaking them. The view
only reads; nothing it returns is to be modified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agora.master.allocator.allocator import Allocator
    from agora.master.allocator.filters import Refusal

__all__ = ["AllocatorView"]


class AllocatorView:
    def __init__(self, allocator: Allocator) -> None:
        self._a = allocator

    def framework(self, framework_id: str):
        """The framework's entry (role, active, suppressed, gpu, vec, allocated), or None."""
        return self._a._frameworks.get(framework_id)

    def role(self, name: str):
        """The role's entry (name, quota, vec)."""
        return self._a._roles[name]

    def agents(self) -> Iterable:
        """Every agent's entry (agent_id, active, free, gpus)."""
        return self._a._agents.values()

    def active_filters(self, framework_id: str, now: float) -> dict[str, Refusal]:
        """agent_id -> Refusal, for the framework's decline filters on agents still present,
        whether or not they hide what the agent has free now."""
        agents = self._a._agents
        return {a: r for a, r in self._a._filters.active(framework_id, now).items() if a in agents}

    def hidden_agents(self, framework_id: str, role, now: float) -> dict[str, float]:
        """agent_id -> until, for the agents whose offer to the framework (of `role`) a decline
        filter hides now: the allocator's own rule (Refusal.hides) on what it would offer."""
        hidden = {}
        agents = self._a._agents
        for agent_id, refusal in self._a._filters.active(framework_id, now).items():
            agent = agents.get(agent_id)
            if agent is None or not agent.active or not agent.free:
                continue
            offer = self.role_offer(agent, role)
            if offer is not None and refusal.hides(offer, now):
                hidden[agent_id] = refusal.until
        return hidden

    def consumption(self, role) -> Mapping[str, float]:
        return self._a._consumption(role)

    def fits_min(self, vector: Mapping[str, float]) -> bool:
        return self._a._fits_min(vector)

    def role_offer(self, agent, role):
        """What the role could be offered on the agent now, or None."""
        offer, _vector = self._a._role_offer(agent, role, False)
        return offer

    @property
    def has_quota_roles(self) -> bool:
        return bool(self._a._quota_roles)

    def plain_offer(self, agent, role):
        """What the agent has free for the role before quota caps (limit, headroom)."""
        return agent.free.allocatable_to(role.name) if agent.reserved else agent.free

    def headroom_roles(self) -> list[tuple[object, object]]:
        """(role entry, what it lacks of its guarantee as Resources) for every role below its
        quota guarantee: the roles the free resources are held back for."""
        out = []
        for name in sorted(self._a._quota_roles):
            role = self._a._roles[name]
            lack = self._a._headroom_of(role)
            if lack:
                out.append((role, lack))
        return out

    @property
    def inverse_totals(self) -> Mapping[str, float]:
        return self._a._inv_total

    @property
    def min_allocatable(self):
        return self._a.config.min_allocatable

    def framework_order(self) -> list[str]:
        return list(self._a.framework_order())
