"""Placing app instances into offers, and explaining why instances cannot be placed. Pure.

`place()` fills one round of offers with the instances apps want, agent by agent, honouring each
app's constraints (counting instances already running and those placed this round) and spreading
an app's instances over agents. `explain()` looks at every agent of the cluster, not only those
offered, to say why an app's instances wait, and whether they can ever be placed with the agents
there are (too big for every agent, or constraints no agent satisfies).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agora.common import Resources
from agora.common.resources import ranges_count
from agora.frameworks.sdk import OfferPacker, TaskSpec
from agora.frameworks.sdk.constraints import (
    AgentFacts,
    Constraint,
    first_violation,
    known_values,
)
from agora.v1 import common_pb2

Offer = common_pb2.Offer


@dataclass(frozen=True)
class Needs:
    """What one instance needs."""

    cpus: float
    mem: float
    disk: float = 0.0
    ports: int = 0

    def describe(self) -> str:
        parts = [f"cpus:{self.cpus:g}", f"mem:{self.mem:g}"]
        if self.disk:
            parts.append(f"disk:{self.disk:g}")
        if self.ports:
            parts.append(f"ports:{self.ports}")
        return ";".join(parts)

    def shortfall(self, total: Resources) -> str | None:
        """What `total` lacks for one instance, or None if it has enough."""
        missing = []
        for name in ("cpus", "mem", "disk"):
            need, have = getattr(self, name), total.scalar(name)
            if need > have + 1e-9:
                missing.append(f"{name} {need:g} > {have:g}")
        have_ports = ranges_count(total.port_ranges())
        if self.ports > have_ports:
            missing.append(f"ports {self.ports} > {have_ports}")
        return ", ".join(missing) or None


@dataclass(frozen=True)
class AgentSlot:
    """An agent of the cluster as placement sees it: facts for constraints, and its total."""

    facts: AgentFacts
    total: Resources


@dataclass
class Request:
    """Instances of one app to place this round."""

    app_id: str
    count: int
    needs: Needs
    constraints: Sequence[Constraint]
    placed: list[AgentFacts]  # where the app's live instances are
    make_spec: Callable[[], TaskSpec]


@dataclass
class Launch:
    """Tasks to launch on one agent from its offers."""

    agent_id: str
    offers: list[Offer]
    tasks: list[tuple[str, common_pb2.TaskInfo, AgentFacts]]  # (app_id, task, agent)


@dataclass
class Placement:
    launches: list[Launch]
    unused: list[Offer]
    placed: dict[str, int] = field(default_factory=dict)  # app_id -> instances placed
    # app_id -> why the rest did not fit in these offers (the first reason per agent)
    reasons: dict[str, list[str]] = field(default_factory=dict)


def offer_facts(offer: Offer) -> AgentFacts:
    return AgentFacts(offer.agent_id, offer.hostname, {a.name: a.text for a in offer.attributes})


def offer_host(offer: Offer) -> str:
    """The address clients use to reach tasks on the offer's agent."""
    host = offer.agent_address.rpartition(":")[0].strip("[]")
    return host or offer.hostname


def place(
    offers: Sequence[Offer],
    requests: Sequence[Request],
    role: str = "*",
    all_agents: Sequence[AgentFacts] = (),
) -> Placement:
    by_agent: dict[str, list[Offer]] = {}
    for offer in offers:
        by_agent.setdefault(offer.agent_id, []).append(offer)
    agents = list(by_agent)
    packers = {agent_id: OfferPacker(group, role) for agent_id, group in by_agent.items()}
    facts = {agent_id: offer_facts(group[0]) for agent_id, group in by_agent.items()}
    launches = {agent_id: Launch(agent_id, by_agent[agent_id], []) for agent_id in agents}
    result = Placement([], [])
    universe = list(all_agents) or list(facts.values())
    start = 0
    for request in requests:
        fields = {c.field for c in request.constraints}
        values = known_values(universe, fields)
        placed = list(request.placed)
        reasons: dict[str, str] = {}
        count = 0
        for _ in range(request.count):
            chosen = None
            for step in range(len(agents)):
                agent_id = agents[(start + step) % len(agents)]
                agent = facts[agent_id]
                why = first_violation(request.constraints, agent, placed, values)
                if why is None:
                    short = request.needs.shortfall(packers[agent_id].remaining)
                    if short is not None:
                        why = f"offer of {agent.hostname} too small ({short})"
                if why is not None:
                    reasons.setdefault(agent_id, why)
                    continue
                spec = request.make_spec()
                task = packers[agent_id].pack(spec)
                if task is None:
                    reasons.setdefault(agent_id, f"offer of {agent.hostname} too small")
                    continue
                chosen = agent_id
                launches[agent_id].tasks.append((request.app_id, task, agent))
                placed.append(agent)
                count += 1
                start = (start + step + 1) % len(agents)  # spread: the next agent goes first
                break
            if chosen is None:
                break
        result.placed[request.app_id] = count
        if count < request.count:
            result.reasons[request.app_id] = list(reasons.values())
    for agent_id in agents:
        if launches[agent_id].tasks:
            result.launches.append(launches[agent_id])
        else:
            result.unused.extend(by_agent[agent_id])
    return result


def explain(
    missing: int,
    needs: Needs,
    constraints: Sequence[Constraint],
    placed: Sequence[AgentFacts],
    agents: Sequence[AgentSlot],
    role: str = "*",
) -> tuple[str, bool]:
    """(why `missing` instances wait, whether they can never be placed on these agents)."""
    what = f"{missing} instance(s) cannot be placed"
    if not agents:
        return f"{what}: no agents are registered with the master", True
    big_enough = []
    too_small = []
    for slot in agents:
        short = needs.shortfall(slot.total.allocatable_to(role))
        if short is None:
            big_enough.append(slot)
        else:
            too_small.append(f"{slot.facts.hostname} ({short})")
    if not big_enough:
        return (
            f"{what}: each needs {needs.describe()}, more than any of the {len(agents)} "
            f"agent(s) has: {'; '.join(too_small[:5])}"
        ), True
    values = known_values([s.facts for s in agents], {c.field for c in constraints})
    ruled_out = []
    allowed = 0
    for slot in big_enough:
        why = first_violation(constraints, slot.facts, placed, values)
        if why is None:
            allowed += 1
        else:
            ruled_out.append(f"{slot.facts.hostname}: {why}")
    if allowed == 0:
        extra = f" ({len(too_small)} more too small)" if too_small else ""
        return (
            f"{what}: the constraints rule out every agent big enough{extra}: "
            f"{'; '.join(ruled_out[:5])}"
        ), True
    return (
        f"{what} yet: waiting for offers with {needs.describe()} free on one of "
        f"{allowed} suitable agent(s)"
    ), False
