"""Holds against fragmentation: a framework's request that resources be kept for it as they free
up, until a shape is met. Pure: the allocator decides, here is what a hold is and how many of
its tasks an agent's free resources can take.

A large job offered freed resources piece by piece rarely sees them all at once: each piece is
offered away to smaller jobs first (the fragmentation Omega's authors point at). A hold keeps
what frees up, counted as the framework's (so DRF sees it), until `count` tasks of `size` fit;
then everything held is offered to the framework in one go. It is bounded: the framework's
fair share (or its role's quota guarantee, where that is more) caps it when it is asked for and
as it collects, and a deadline releases what it collected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agora.common import EMPTY, Resources

__all__ = ["Hold", "slots", "times"]


@dataclass
class Hold:
    hold_id: str
    framework_id: str
    count: int  # tasks the shape needs
    size: Resources  # each task's resources (scalars only)
    distinct: bool  # at most one task per agent
    deadline: float
    # agent_id -> (resources taken there, tasks they fit)
    taken: dict[str, tuple[Resources, int]] = field(default_factory=dict)

    @property
    def remaining(self) -> int:
        return self.count - sum(n for _, n in self.taken.values())

    @property
    def held(self) -> Resources:
        total = EMPTY
        for resources, _ in self.taken.values():
            total = total + resources
        return total


def slots(free: Resources, size: Resources, limit: int) -> int:
    """How many tasks of `size` fit in `free`, at most `limit`."""
    n = limit
    for key, amount in size.scalars.items():
        if amount <= 0:
            continue
        n = min(n, math.floor(free.scalars.get(key, 0.0) / amount + 1e-9))
        if n <= 0:
            return 0
    return max(0, n)


def times(size: Resources, n: int) -> Resources:
    """`n` tasks' worth of `size`."""
    return Resources({key: amount * n for key, amount in size.scalars.items()})
