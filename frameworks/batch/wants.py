"""What the batch framework waits to launch, as the master's Wants (scheduler.proto): the sum
of the instances ready now, so that a revive for one small job is offered the agents that
cover it, not every agent with room; and the least of each resource they ask for, so that
the scraps of a busy cluster, too small for any of them, are not offered at all. Pure.

An offer a job cannot use was also how the framework learnt that the job waits: the round
said its reason (PENDING_RESOURCES, its message) and told the master its unmet demand (for
preemption). With no offer at all, the scheduler says both itself (BatchScheduler._unoffered).
"""

from __future__ import annotations

from collections.abc import Iterable

from agora.common import UNRESERVED, Resources
from agora.v1 import batch_pb2


def wants_of(
    ready: Iterable[tuple[batch_pb2.Job, int]],
) -> tuple[Resources, Resources] | None:
    """(in total, the least of each resource an instance asks for) over (job, instances ready
    to launch now) pairs. None when a job needs a choice among agents that a total cannot
    carry (placement constraints, a gang placed all at once): then every agent with room is
    offered, as without wants, and the planner chooses among them."""
    total: dict[str, float] = {}
    smallest: dict[str, float] | None = None
    for job, count in ready:
        if count <= 0:
            continue
        if job.spec.constraints or job.spec.gang:
            return None
        one = dict(shape_of(job.spec))
        for name, value in one.items():
            total[name] = total.get(name, 0.0) + value * count
        if smallest is None:
            smallest = one
        else:  # a resource some instance does not ask for bounds nothing
            smallest = {n: min(v, one[n]) for n, v in smallest.items() if n in one}
    if not any(v > 0 for v in total.values()):
        return None  # nothing to size offers by: no limit
    return _resources(total), _resources(smallest or {})


def shape_of(spec: batch_pb2.JobSpec) -> tuple[tuple[str, float], ...]:
    """One instance's scalar needs as (name, amount) pairs, sorted and hashable: what
    validation.needs gives, read off the spec without building Resources (it runs for every
    waiting job each time a task ends)."""
    task = spec.task
    amounts = (("cpus", task.cpus), ("disk", task.disk), ("gpus", task.gpus), ("mem", task.mem))
    rounded = ((name, round(value, 3)) for name, value in amounts)
    return tuple((name, value) for name, value in rounded if value > 0)


def _resources(amounts: dict[str, float]) -> Resources:
    return Resources({(name, UNRESERVED): amount for name, amount in amounts.items()})
