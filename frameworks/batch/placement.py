"""Placing waiting instances into one round of offers, gang jobs all-or-nothing. Pure.

Jobs come in queue order. A plain job places as many of its ready instances as fit; a gang job
places all of its instances in this round or none of them (its trial placements are rolled
back), and later jobs may still use what it could not (backfill).

A job's instances all need the same resources, so once one fits nowhere the rest do not either:
a group's wants are read lazily and no further than that, and a round of offers costs what it
places, not what waits (a 10,000-instance job builds a few task specs per offer, not 10,000).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agora.common import UNRESERVED, Resources
from agora.frameworks.sdk import OfferPacker, TaskSpec
from agora.frameworks.sdk.constraints import AgentFacts, Constraint, first_violation
from agora.v1 import common_pb2


@dataclass(frozen=True)
class Want:
    """One instance to place: `spec.task_id` is the task id it will launch as."""

    job_id: str
    index: int
    spec: TaskSpec


@dataclass
class Group:
    """The ready instances of one job, in the order the queue serves jobs. `wants` may be lazy
    (read once, no further than the first that fits nowhere); they share one shape."""

    job_id: str
    wants: Iterable[Want]
    gang: bool = False
    constraints: Sequence[Constraint] = ()
    # The agents the job's live instances run on, one entry per instance (UNIQUE, MAX_PER).
    placed: Sequence[AgentFacts] = ()
    gpus: bool = False  # its instances ask for GPUs: only they may use a GPU agent


@dataclass
class AgentLaunch:
    """What to launch on one agent, and from which offers."""

    agent_id: str
    offers: list[common_pb2.Offer]
    tasks: list[common_pb2.TaskInfo]
    wants: list[Want]


@dataclass
class Plan:
    launches: list[AgentLaunch]
    unused: list[common_pb2.Offer]  # offers on agents that got nothing
    placed: int = 0
    waiting: list[str] = field(default_factory=list)  # job ids with instances left unplaced
    # Of those, the ones whose next instance would have fit the round's offers had the jobs
    # ahead of them in the queue not taken them (their pending reason is PRIORITY).
    behind: set[str] = field(default_factory=set)
    # Of those, the ones whose next instance had room on some agent but broke its constraints
    # there: job id -> the first constraint it broke, in words.
    constrained: dict[str, str] = field(default_factory=dict)


def plan(
    offers: Sequence[common_pb2.Offer],
    groups: Sequence[Group],
    role: str = UNRESERVED,
    facts: dict[str, AgentFacts] | None = None,
) -> Plan:
    """Places the groups into the offers; agents take turns so that a job spreads out.
    `facts`: the hostname and attributes of agents, for constraints (the offers' own when
    not given; GROUP_BY counts the values of all agents given)."""
    by_agent: dict[str, list[common_pb2.Offer]] = {}
    for offer in offers:
        by_agent.setdefault(offer.agent_id, []).append(offer)
    packers = [OfferPacker(group, role) for group in by_agent.values()]
    agents = [(facts or {}).get(p.agent_id) or offer_facts(p.offers[0]) for p in packers]
    gpu_agents = {i for i, p in enumerate(packers) if p.remaining.scalar("gpus") > 0}
    constrained: dict[str, str] = {}
    placed: list[list[Want]] = [[] for _ in packers]
    offered = [p.remaining for p in packers]  # what the round offered, before any placement
    waiting: list[str] = []
    behind: set[str] = set()
    start = 0
    for group in groups:
        if not packers:
            waiting.append(group.job_id)
            continue
        saved = [(p.remaining, len(p.tasks), len(w)) for p, w in zip(packers, placed, strict=True)]
        saved_start = start
        left: Want | None = None
        where = list(group.placed)  # the job's instances: live ones, then this round's
        values = _known_values(group.constraints, facts, agents)
        broke = ""
        for want in group.wants:
            for step in range(len(packers)):
                i = (start + step) % len(packers)
                if i in gpu_agents and not group.gpus:
                    continue
                if group.constraints:
                    why = first_violation(group.constraints, agents[i], where, values)
                    if why is not None:
                        broke = broke or (why if packers[i].fits(want.spec) else "")
                        continue
                if packers[i].pack(want.spec) is not None:
                    placed[i].append(want)
                    where.append(agents[i])
                    start = i + 1
                    break
            else:
                left = want
                break  # the rest are the same shape: none fits either
        if left is not None:
            waiting.append(group.job_id)
            at_start = [remaining for remaining, _, _ in saved]
            skip = set() if group.gpus else gpu_agents
            if broke:
                constrained[group.job_id] = broke
            elif _fits_any(packers, offered, left.spec, skip) and not _fits_any(
                packers, at_start, left.spec, skip
            ):
                behind.add(group.job_id)
            if group.gang:
                for packer, wants, (remaining, tasks, count) in zip(
                    packers, placed, saved, strict=True
                ):
                    packer.remaining = remaining
                    del packer.tasks[tasks:]
                    del wants[count:]
                start = saved_start
    launches, unused = [], []
    for packer, wants in zip(packers, placed, strict=True):
        if packer.tasks:
            launches.append(AgentLaunch(packer.agent_id, packer.offers, list(packer.tasks), wants))
        else:
            unused.extend(packer.offers)
    return Plan(launches, unused, sum(len(w) for w in placed), waiting, behind, constrained)


def offer_facts(offer: common_pb2.Offer) -> AgentFacts:
    return AgentFacts(offer.agent_id, offer.hostname, {a.name: a.text for a in offer.attributes})


def _known_values(
    constraints: Sequence[Constraint],
    facts: dict[str, AgentFacts] | None,
    offered: Sequence[AgentFacts],
) -> dict[str, set[str]] | None:
    """Each GROUP_BY field's values over the agents known (None: no GROUP_BY)."""
    fields = {c.field for c in constraints if c.operator == "GROUP_BY"}
    if not fields:
        return None
    agents = list((facts or {}).values()) or list(offered)
    return {f: {v for a in agents if (v := a.value(f)) is not None} for f in fields}


def _fits_any(
    packers: list[OfferPacker], offered: list[Resources], spec: TaskSpec, skip: set[int]
) -> bool:
    """Whether one task of `spec` fits some agent's offers (but those in `skip`) as given."""
    for i, (packer, whole) in enumerate(zip(packers, offered, strict=True)):
        if i in skip:
            continue
        now, packer.remaining = packer.remaining, whole
        try:
            if packer.fits(spec):
                return True
        finally:
            packer.remaining = now
    return False


def largest_fit(
    agent_totals: Sequence[tuple[str, Resources]], spec: TaskSpec, role: str = UNRESERVED
) -> bool:
    """True if some agent, when empty, could hold one task of `spec`."""
    for _, total in agent_totals:
        offer = common_pb2.Offer(
            offer_id="probe", agent_id="probe", resources=total.allocatable_to(role).to_proto()
        )
        if OfferPacker(offer, role).fits(spec):
            return True
    return False


def capacity(
    agent_totals: Sequence[tuple[str, Resources]],
    spec: TaskSpec,
    role: str = UNRESERVED,
    limit: int | None = None,
) -> int:
    """How many tasks of `spec` the agents could hold at once when idle (counting stops at
    `limit`)."""
    count = 0
    for _, total in agent_totals:
        offer = common_pb2.Offer(
            offer_id="probe", agent_id="probe", resources=total.allocatable_to(role).to_proto()
        )
        packer = OfferPacker(offer, role)
        while (limit is None or count < limit) and packer.pack(spec) is not None:
            count += 1
        if limit is not None and count >= limit:
            break
    return count
