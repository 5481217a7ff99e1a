"""The DRF optimum by progressive filling, in pure code: the yardstick of the fairness run.

Resources are pooled (agent boundaries ignored, as in the DRF paper's analysis). Each step
gives one task to the framework with the lowest dominant share (weighted equally) whose task
still fits; filling stops when no task of anyone fits. With the paper's example (9 CPUs, 18 GB;
<1 CPU, 4 GB> and <3 CPUs, 1 GB>) it gives 3 and 2 tasks, dominant shares 2/3 each.
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
