"""Decline filters: an agent hidden from one framework until a time given by the caller."""

from __future__ import annotations

import heapq


class DeclineFilters:
    """(framework, agent) -> refuse_until, with a heap of expiries for next_wakeup()."""

    def __init__(self) -> None:
        # Read directly by the allocator's inner loops: framework_id -> {agent_id: until},
        # and the same filters by agent (agent_id -> {framework_id: until}).
        self.by_framework: dict[str, dict[str, float]] = {}
        self.by_agent: dict[str, dict[str, float]] = {}
        self._expiries: list[tuple[float, str, str]] = []

    def add(self, framework_id: str, agent_id: str, until: float) -> None:
        # A newer decline replaces the older filter, as in Mesos.
        self.by_framework.setdefault(framework_id, {})[agent_id] = until
        self.by_agent.setdefault(agent_id, {})[framework_id] = until
        heapq.heappush(self._expiries, (until, framework_id, agent_id))

    def is_filtered(self, framework_id: str, agent_id: str, now: float) -> bool:
        table = self.by_framework.get(framework_id)
        if not table:
            return False
        until = table.get(agent_id)
        return until is not None and until > now

    def clear_framework(self, framework_id: str) -> None:
        for agent_id in self.by_framework.pop(framework_id, {}):
            self._drop_by_agent(agent_id, framework_id)

    def _drop_by_agent(self, agent_id: str, framework_id: str) -> None:
        table = self.by_agent.get(agent_id)
        if table is not None:
            table.pop(framework_id, None)
            if not table:
                del self.by_agent[agent_id]

    def active(self, framework_id: str, now: float) -> dict[str, float]:
        """agent_id -> until for the filters of a framework that still hold at `now`."""
        table = self.by_framework.get(framework_id, {})
        return {agent: until for agent, until in table.items() if until > now}

    def _is_current(self, until: float, framework_id: str, agent_id: str) -> bool:
        return self.by_framework.get(framework_id, {}).get(agent_id) == until

    def expire(self, now: float) -> None:
        """Drops filters whose time has come (cheap: pops only what expired)."""
        heap = self._expiries
        while heap and heap[0][0] <= now:
            until, framework_id, agent_id = heapq.heappop(heap)
            if self._is_current(until, framework_id, agent_id):
                table = self.by_framework[framework_id]
                del table[agent_id]
                if not table:
                    del self.by_framework[framework_id]
                self._drop_by_agent(agent_id, framework_id)

    def next_expiry(self) -> float | None:
        heap = self._expiries
        while heap and not self._is_current(*heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None
