"""Decline filters, with Mesos' meaning: a framework's refusal of what an agent offered.

A decline (or the unused part of an Accept, with `refuse_seconds`) refuses the resources of
that offer on that agent for a time. The filter hides the agent's next offer from the framework
only while what would be offered is contained in what it refused: a task that ends there, or an
agent that grows, makes the offer larger and it goes out at once. (Mesos' RefusedOfferFilter;
Agora's first filters hid the whole agent, so a framework that declined the memory left on a
full agent did not see the CPUs of its own next finished task until the filter expired.)

`Refusal.hides` is the one rule; the allocation paths, optimistic offers and explanations all
ask it. One filter per (framework, agent): a newer refusal replaces the older, as it is the
framework's latest word on that agent (a Decline of several offers on one agent refuses their
sum: the master adds them up before it tells the allocator).
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

from agora.common import Resources


class Refusal(NamedTuple):
    """What a framework refused on an agent, and until when."""

    until: float
    refused: Resources

    def hides(self, offer: Resources, now: float) -> bool:
        """True while the filter holds and `offer` is no more than what was refused."""
        return self.until > now and self.refused.contains(offer)


class DeclineFilters:
    """(framework, agent) -> Refusal, with a heap of expiries for next_expiry()."""

    def __init__(self) -> None:
        # Read directly by the allocator's inner loops: framework_id -> {agent_id: Refusal},
        # and the same filters by agent (agent_id -> {framework_id: Refusal}).
        self.by_framework: dict[str, dict[str, Refusal]] = {}
        self.by_agent: dict[str, dict[str, Refusal]] = {}
        self._expiries: list[tuple[float, str, str]] = []

    def add(self, framework_id: str, agent_id: str, until: float, refused: Resources) -> None:
        refusal = Refusal(until, refused)
        self.by_framework.setdefault(framework_id, {})[agent_id] = refusal
        self.by_agent.setdefault(agent_id, {})[framework_id] = refusal
        heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def clear_framework(self, framework_id: str) -> None:
        for agent_id in self.by_framework.pop(framework_id, {}):
            self._drop_by_agent(agent_id, framework_id)

    def _drop_by_agent(self, agent_id: str, framework_id: str) -> None:
        table = self.by_agent.get(agent_id)
        if table is not None:
            table.pop(framework_id, None)
            if not table:
                del self.by_agent[agent_id]

    def active(self, framework_id: str, now: float) -> dict[str, Refusal]:
        """agent_id -> Refusal for the filters of a framework that still hold at `now`."""
        table = self.by_framework.get(framework_id, {})
        return {agent: r for agent, r in table.items() if r.until > now}

    def _is_current(self, until: float, framework_id: str, agent_id: str) -> bool:
        refusal = self.by_framework.get(framework_id, {}).get(agent_id)
        return refusal is not None and refusal.until == until

    def expire(self, now: float) -> set[str]:
        """Drops filters whose time has come (cheap: pops only what expired); returns the
        agents where one did, which may now be offered to someone they were hidden from."""
        heap = self._expiries
        agents = set()
        while heap and heap[0][0] <= now:
            until, framework_id, agent_id = heapq.heappop(heap)
            if self._is_current(until, framework_id, agent_id):
                table = self.by_framework[framework_id]
                del table[agent_id]
                if not table:
                    del self.by_framework[framework_id]
                self._drop_by_agent(agent_id, framework_id)
                agents.add(agent_id)
        return agents

    def next_expiry(self) -> float | None:
        heap = self._expiries
        while heap and not self._is_current(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
