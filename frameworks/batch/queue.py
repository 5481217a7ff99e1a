"""Queue ordering policies by name: which waiting job gets the next offers first.

A policy is a sort key over `QueuedJob`; every policy breaks ties by submission order, so the
order is total and stable. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

DEFAULT_POLICY = "fifo"


@dataclass(frozen=True)
class QueuedJob:
    """What a policy may look at."""

    job_id: str
    sequence: int  # submission order: lower came first
    priority: int = 0  # higher goes first under "priority"
    duration_seconds: float = 0.0  # declared run time for "sjf"; 0 or less = unknown


SortKey = Callable[[QueuedJob], tuple]


def _fifo(job: QueuedJob) -> tuple:
    return (job.sequence,)


def _priority(job: QueuedJob) -> tuple:
    return (-job.priority, job.sequence)


def _shortest_first(job: QueuedJob) -> tuple:
    # A job that declared no duration cannot be judged short: it goes after those that did.
    unknown = job.duration_seconds <= 0
    return (unknown, 0.0 if unknown else job.duration_seconds, job.sequence)


POLICIES: dict[str, SortKey] = {
    "fifo": _fifo,
    "priority": _priority,
    "sjf": _shortest_first,
}


def get_policy(name: str) -> SortKey:
    """The sort key registered as `name`; ValueError naming the choices otherwise."""
    try:
        return POLICIES[name]
    except KeyError:
        choices = ", ".join(sorted(POLICIES))
        raise ValueError(f"unknown queue policy {name!r}; choose one of {choices}") from None


def order(jobs: Iterable[QueuedJob], policy: str = DEFAULT_POLICY) -> list[QueuedJob]:
    """The jobs in the order `policy` serves them."""
    return sorted(jobs, key=get_policy(policy))
