"""The allocator benchmark (`agora bench allocator`): the pure allocator at a given size, in
memory, no network. It checks its set-up before it times anything and returns the figures.
"""

from __future__ import annotations

import dataclasses
import gc
import resource
import statistics
import sys
import time

__all__ = ["AGENT_RESOURCES", "BenchError", "run_allocator_bench"]

AGENT_RESOURCES = "cpus:24;mem:4096;disk:4096;ports:[31000-32000]"  # Mesos' benchmark agents


class BenchError(ValueError):
    """A set-up that cannot be benchmarked, or one that did not offer what it should."""


def _rss_mb() -> float:
    # ru_maxrss is in KiB on Linux: the peak resident set of this process so far.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "min": round(min(samples_ms), 3),
        "median": round(statistics.median(samples_ms), 3),
        "max": round(max(samples_ms), 3),
    }


def run_allocator_bench(
    agents: int,
    frameworks: int,
    roles: int = 1,
    cycles: int = 5,
    reoffers: int = 200,
    sorter: str = "drf",
    refuse_seconds: float = 0.0,
    preemption: bool = False,
) -> dict:
    """Builds the cluster, runs the cycles, returns the figures (see the command's help)."""
    from agora.common import Resources
    from agora.master.allocator import Allocator, AllocatorConfig

    try:
        config = AllocatorConfig(role_sorter=sorter, framework_sorter=sorter, seed=1)
    except ValueError as e:
        raise BenchError(str(e)) from None
    baseline_mb = _rss_mb()
    total = Resources.parse(AGENT_RESOURCES)
    now = 0.0

    started = time.perf_counter()
    alloc = Allocator(config)
    role_names = ["*"] if roles == 1 else [f"role{i}" for i in range(roles)]
    for i in range(frameworks):
        alloc.add_framework(f"framework-{i}", role=role_names[i % len(role_names)])
    for i in range(agents):
        alloc.add_agent(f"agent-{i}", total, {"rack": f"r{i % 40}"})
    setup_ms = (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    grants = alloc.allocate(now)
    first_ms = (time.perf_counter() - started) * 1000
    if len(grants) != agents:  # a benchmark checks its set-up before it times anything
        raise BenchError(f"first cycle offered {len(grants)} of {agents} agents; expected all")

    gc.collect()
    cycle_ms = []
    cycle_offers = []
    refuse = refuse_seconds or None
    for _ in range(cycles):
        for g in grants:
            alloc.recover(g.framework_id, g.agent_id, g.resources, now, refuse_seconds=refuse)
        started = time.perf_counter()
        grants = alloc.allocate(now)
        cycle_ms.append((time.perf_counter() - started) * 1000)
        cycle_offers.append(len(grants))
        if not grants:
            raise BenchError("a timed cycle offered nothing (fewer frameworks than cycles?)")

    # One freed agent at a time: recover its offer and allocate over just that agent.
    reoffer_ms = []
    by_agent = {g.agent_id: g for g in grants}
    agent_ids = list(by_agent)
    for k in range(reoffers):
        agent_id = agent_ids[(k * 7919) % len(agent_ids)]
        g = by_agent[agent_id]
        started = time.perf_counter()
        alloc.recover(g.framework_id, agent_id, g.resources, now)
        (again,) = alloc.allocate(now, agent_ids=[agent_id])
        reoffer_ms.append((time.perf_counter() - started) * 1000)
        by_agent[agent_id] = again

    figures = _preemption_figures(alloc, by_agent, role_names) if preemption else None
    return {
        "preemption": figures,
        "agents": agents,
        "frameworks": frameworks,
        "roles": roles,
        "sorter": sorter,
        "agent_resources": AGENT_RESOURCES,
        "setup_ms": round(setup_ms, 1),
        "first_cycle_offers": agents,
        "first_cycle_ms": round(first_ms, 3),
        "refuse_seconds": refuse_seconds,
        "cycles": cycles,
        "cycle_offers": cycle_offers,
        "cycle_ms": _summary(cycle_ms),
        "reoffers": reoffers,
        "reoffer_ms": _summary(reoffer_ms),
        "baseline_rss_mb": round(baseline_mb, 1),
        "peak_rss_mb": round(_rss_mb(), 1),
        "python": sys.version.split()[0],
    }


def _preemption_figures(alloc, held: dict, role_names: list[str]) -> dict:
    """With preemption on, the master also reads the allocator's snapshot every tick (the
    roles' allocations, then every agent's free room once a role has waited its timeout) and,
    when one is due, decides with the pure `plan`: both timed here on the full cluster, every
    agent's offer held as one running task, and a new role starved long enough to preempt;
    then again on a fragmented cluster, where every agent has some room free (too little for
    the starved role's task), so that what the role could be offered is worked out on each."""
    from agora.common import Resources

    # The starved role, guaranteed its task's size (the master reads what it could be offered
    # on each agent once it may preempt: preemption_room).
    alloc.set_quota("starved", Resources.parse("cpus:1;mem:128"), None)
    full = _time_preemption(alloc, held, role_names)
    # Fragment: each running task gives back half a cpu and 64 MB, on every agent.
    scrap = Resources.parse("cpus:0.5;mem:64")
    for agent_id, g in list(held.items()):
        alloc.recover(g.framework_id, agent_id, scrap, 0.0)
        held[agent_id] = dataclasses.replace(g, resources=g.resources - scrap)
    fragmented = _time_preemption(alloc, held, role_names)
    if fragmented["agents_with_room"] != len(held):
        raise BenchError("the fragmented cluster is not free on every agent; the set-up is wrong")
    return {
        **full,
        "fragmented": fragmented,
        "revocable": _revocable_figures(alloc, held),
    }


def _time_preemption(alloc, held: dict, role_names: list[str]) -> dict:
    """Times the snapshot the master reads on a check turn when the starved role may be due,
    and `plan` over it; checks that the role does preempt."""
    from agora.common import Resources
    from agora.master.allocator.drf import scalar_vector
    from agora.master.allocator.preemption import Candidate, RoleState, plan

    snapshot_ms, plan_ms = [], []
    for _ in range(20):
        started = time.perf_counter()
        role_inputs, total = alloc.preemption_roles()
        free = alloc.preemption_free()
        usable = alloc.preemption_room(["starved"])
        snapshot_ms.append((time.perf_counter() - started) * 1000)
    roles = {
        name: RoleState(name, weight, allocated, guarantee, None, limit=limit)
        for name, (weight, guarantee, allocated, limit) in role_inputs.items()
    }
    wants = scalar_vector(Resources.parse("cpus:1;mem:128"))
    roles["starved"] = RoleState(
        "starved", 1.0, {}, wants, wants, starved_since=-1000.0, waiting_since=-1000.0
    )
    candidates = [
        Candidate(
            g.framework_id,
            f"task-{n}",
            role_names[int(g.framework_id.rsplit("-", 1)[1]) % len(role_names)],
            g.agent_id,
            scalar_vector(g.resources),
            started_at=float(n),
        )
        for n, g in enumerate(held.values())
    ]
    made = []
    for _ in range(5):
        started = time.perf_counter()
        made = plan(roles, total, free, candidates, 0.0, 5.0, 5.0, max_victims=10,
                    usable=usable)  # fmt: skip
        plan_ms.append((time.perf_counter() - started) * 1000)
    if not made:  # a benchmark checks its set-up: the starved role must preempt
        raise BenchError("the starved role preempted nothing; the set-up is wrong")
    return {
        "running_tasks": len(candidates),
        "agents_with_room": len(usable.get("starved", {})),
        "snapshot_ms": _summary(snapshot_ms),
        "plan_ms": _summary(plan_ms),
        "victims": sum(len(p.victims) for p in made),
    }


def _revocable_figures(alloc, held: dict, cycles: int = 5) -> dict:
    """Full cycles with one framework that takes revocable offers, and a role guaranteed a
    tenth of the cluster with no framework: the headroom kept for it is lent, so each cycle
    also runs the lending step (allocator/revocable.py) on the agents that keep it."""
    from agora.common import Resources
    from agora.master.allocator import REVOCABLE_CAPABILITY

    now = 0.0
    for g in held.values():
        alloc.recover(g.framework_id, g.agent_id, g.resources, now)
    alloc.set_quota("starved", None, None)
    agents = len(held)
    tenth = Resources.parse(f"cpus:{24 * agents // 10};mem:{4096 * agents // 10}")
    alloc.set_quota("idle", tenth, None)
    alloc.add_framework("spot", role="spot", capabilities=[REVOCABLE_CAPABILITY])
    cycle_ms, lent = [], []
    for _ in range(cycles):
        started = time.perf_counter()
        grants = alloc.allocate(now)
        cycle_ms.append((time.perf_counter() - started) * 1000)
        lent.append(sum(1 for g in grants if g.revocable))
        for g in grants:
            if g.revocable:
                alloc.withdraw_revocable(g.framework_id, g.agent_id)
            else:
                alloc.recover(g.framework_id, g.agent_id, g.resources, now)
    if not any(lent):  # a benchmark checks its set-up: the headroom must be lent
        raise BenchError("nothing was lent to the revocable framework; the set-up is wrong")
    return {"cycle_ms": _summary(cycle_ms), "lent_offers": lent}
