"""Backfill with declared time limits (Slurm's EASY backfill), for one framework's view. Pure.

Placing whatever fits, in queue order, starves a job whose instances are big: each core a
small job frees is taken again by the next small instance before enough free up on one agent
for the big one. So the first job of the queue left waiting (the "head") gets a reservation:
the agent and the time at which, by the time limits of our own tasks running there, enough
will be free for one of its instances (its "shadow time"). Until then, later jobs may still use
that agent's offered resources, but only an instance whose own time limit ends it by the
shadow time may use what the head will need; the rest of the agent (what the head will not
need) and every other agent stay free for all. A small job thus runs before the big one only
when it will end before the big one could start, as in Slurm.

What other frameworks' tasks will free is not known here, and a task without a time limit is
assumed never to end: the reservation is made only where our own declared limits prove it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Amounts = Mapping[str, float]


@dataclass(frozen=True)
class Reservation:
    job_id: str  # the head job it is for
    agent_id: str
    at: float  # the shadow time: when one of its instances fits there
    # Of the agent's offered resources, what only an instance ending by `at` may use.
    keep: dict[str, float]

    def allows(self, remaining: Amounts, needs: Amounts, limit_seconds: float, now: float) -> bool:
        """Whether an instance of another job (`needs`, its time limit: 0 is none) may be
        placed in the reserved agent's `remaining` resources now."""
        if limit_seconds and now + limit_seconds <= self.at:
            return True  # it ends before the head could start
        return all(
            remaining.get(name, 0.0) - self.keep.get(name, 0.0) + 1e-9 >= amount
            for name, amount in needs.items()
        )


def reserve(
    job_id: str,
    needs: Amounts,
    free_now: Mapping[str, Amounts],
    ends: Mapping[str, Sequence[tuple[float, Amounts]]],
    now: float,
) -> Reservation | None:
    """The earliest agent and time at which one instance of `needs` fits, from what each agent
    offers now (`free_now`) and what our tasks there free at their declared ends (`ends`:
    agent id -> (end time, resources)); None if no declared end makes room anywhere."""
    best: Reservation | None = None
    for agent_id in set(free_now) | set(ends):
        free = dict(free_now.get(agent_id, {}))
        for end, freed in sorted(ends.get(agent_id, ()), key=lambda e: e[0]):
            for name, amount in freed.items():
                free[name] = free.get(name, 0.0) + amount
            if _fits(free, needs):
                at = max(end, now)
                if best is None or at < best.at:
                    freed_by = {n: free.get(n, 0.0) - free_now.get(agent_id, {}).get(n, 0.0)
                                for n in needs}  # fmt: skip
                    keep = {
                        name: max(0.0, amount - freed_by.get(name, 0.0))
                        for name, amount in needs.items()
                    }
                    best = Reservation(job_id, agent_id, at, keep)
                break
    return best


def _fits(free: Amounts, needs: Amounts) -> bool:
    return all(free.get(name, 0.0) + 1e-9 >= amount for name, amount in needs.items())
