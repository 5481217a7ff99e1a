"""The DRF optimum by progressive filling, in pure code: the yardstick of the fairness run.

Resources are pooled (agent boundaries ignored, as in the DRF paper's analysis). Each step
gives one task to the framework with the lowest dominant share (weighted equally) whose task
still fits; filling stops when no task of anyone fits. With the paper's example (9 CPUs, 18 GB;
<1 CPU, 4 GB> and <3 CPUs, 1 GB>) it gives 3 and 2 tasks, dominant shares 2/3 each.

`drf_optimum` is the same yardstick for divisible demands and weighted roles (the simulator's,
whose roles want the sum of many jobs' tasks of different shapes): shares rise continuously
at the rate of each role's weight, each capped by what the role wants.
"""

from __future__ import annotations

from collections.abc import Mapping

Demand = Mapping[str, float]  # resource name -> amount per task


def dominant_share(used: Mapping[str, float], total: Mapping[str, float]) -> float:
    return max(
        (used.get(name, 0.0) / amount for name, amount in total.items() if amount > 0), default=0.0
    )


def progressive_filling(
    total: Mapping[str, float], demands: Mapping[str, Demand], max_tasks: int = 1_000_000
) -> dict[str, dict]:
    """framework -> {"tasks": n, "used": {resource: amount}, "dominant_share": s}."""
    remaining = dict(total)
    used = {name: dict.fromkeys(total, 0.0) for name in demands}
    tasks = dict.fromkeys(demands, 0)
    blocked: set[str] = set()
    for _ in range(max_tasks):
        candidates = [name for name in demands if name not in blocked]
        if not candidates:
            break
        name = min(candidates, key=lambda n: (dominant_share(used[n], total), n))
        demand = demands[name]
        if all(remaining.get(r, 0.0) + 1e-9 >= amount for r, amount in demand.items()):
            for r, amount in demand.items():
                remaining[r] -= amount
                used[name][r] = used[name].get(r, 0.0) + amount
            tasks[name] += 1
        else:
            blocked.add(name)  # its next task no longer fits anywhere: it is done growing
    return {
        name: {
            "tasks": tasks[name],
            "used": used[name],
            "dominant_share": dominant_share(used[name], total),
        }
        for name in demands
    }


def drf_optimum(
    weights: Mapping[str, float],
    demands: Mapping[str, Mapping[str, float]],
    capacity: Mapping[str, float],
) -> dict[str, float]:
    """Each role's dominant share under weighted DRF with divisible demands: raise every
    role's dominant share at the rate of its weight, in the proportions of its own demand,
    until the role has all it wants or a resource runs out (progressive filling). Roles that
    want nothing get 0."""
    shares = {role: 0.0 for role in weights}
    wanted = {role: dominant_share(demands.get(role, {}), capacity) for role in weights}
    # Per role, how much of each resource one unit of dominant share takes.
    per_share: dict[str, dict[str, float]] = {}
    for role, want in wanted.items():
        if want > 0:
            d = demands[role]
            per_share[role] = {r: d.get(r, 0.0) / want / c for r, c in capacity.items() if c > 0}
    used = {r: 0.0 for r in capacity}
    active = {role for role in per_share}
    while active:
        # The level step every active role can take: until one is sated or a resource is full.
        rate = {r: sum(weights[x] * per_share[x].get(r, 0.0) for x in active) for r in capacity}
        steps = [(wanted[x] - shares[x]) / weights[x] for x in active]
        steps += [(1.0 - used[r]) / rate[r] for r in capacity if rate[r] > 1e-15]
        step = max(0.0, min(steps))
        for x in active:
            shares[x] += step * weights[x]
        for r in capacity:
            used[r] += step * rate[r]
        full = {r for r in capacity if used[r] >= 1.0 - 1e-9 and rate[r] > 1e-15}
        done = {x for x in active if shares[x] >= wanted[x] - 1e-12}
        done |= {x for x in active if any(per_share[x].get(r, 0.0) > 1e-15 for r in full)}
        if not done:
            break  # nothing limits anyone (all demands zero): cannot happen with step > 0
        active -= done
    return shares
