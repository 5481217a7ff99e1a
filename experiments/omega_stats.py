"""The omega experiment's book of decisions, launch attempts and jobs, and its figures. Pure.

The frameworks write into a `Ledger` as they work (times from one monotonic clock); the runner
turns it into the figures of one run with `framework_figures`. Words:

- **job wait**: a job's submission -> the moment its last task was launched (Accept answered
  OK). A job of the measured window still not fully launched when the run ends counts with its
  wait so far (a lower bound) and is also counted as `not_launched`.
- **busyness**: the share of the window a framework spent deciding (its modelled decision
  time, the think before a commit; not the Accept round trips).
- **attempt**: one Accept (one agent's launches) of a decision. A **conflict** is an attempt
  the master refused because another framework had taken the resources first or had priority
  on them (ABORTED), or whose offer the master rescinded while the framework was deciding: in
  both cases nothing was launched and the decision must be made again with fresh offers.
- **wasted work**: decision seconds spent on conflicted attempts: a decision's time is shared
  evenly among its attempts, and the conflicted ones' shares are wasted.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from agora.experiments.results import percentile, summarize

LAUNCHED, CONFLICT, REFUSED = "launched", "conflict", "refused"


@dataclass
class Decision:
    framework: str
    job_id: str
    started: float
    seconds: float
    attempts: int = 0  # Accept calls the decision made (one per agent it placed tasks on)
    conflicts: int = 0


@dataclass(frozen=True)
class Attempt:
    framework: str
    at: float
    tasks: int
    outcome: str  # LAUNCHED, CONFLICT or REFUSED
    reason: str = ""  # the master's reason (ErrorInfo) or "RESCINDED"


@dataclass
class JobRecord:
    framework: str
    job_id: str
    tasks: int
    submitted: float
    launched: float | None = None  # when its last task was launched


@dataclass
class Ledger:
    decisions: list[Decision] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    jobs: dict[str, JobRecord] = field(default_factory=dict)

    def submitted(self, framework: str, job_id: str, tasks: int, at: float) -> None:
        self.jobs[job_id] = JobRecord(framework, job_id, tasks, at)

    def job_launched(self, job_id: str, at: float) -> None:
        self.jobs[job_id].launched = at

    def decided(self, framework: str, job_id: str, started: float, seconds: float) -> Decision:
        decision = Decision(framework, job_id, started, seconds)
        self.decisions.append(decision)
        return decision

    def attempted(
        self,
        decision: Decision,
        at: float,
        tasks: int,
        outcome: str,
        reason: str = "",
    ) -> None:
        decision.attempts += 1
        if outcome == CONFLICT:
            decision.conflicts += 1
        self.attempts.append(Attempt(decision.framework, at, tasks, outcome, reason))


def job_waits(
    jobs: Iterable[JobRecord], framework: str, window: tuple[float, float], end: float
) -> tuple[list[float], int]:
    """Waits of the framework's jobs submitted in the window, and how many of them were not
    fully launched by `end` (counted with their wait so far)."""
    waits: list[float] = []
    censored = 0
    for job in jobs:
        if job.framework != framework or not window[0] <= job.submitted <= window[1]:
            continue
        if job.launched is None:
            censored += 1
            waits.append(max(0.0, end - job.submitted))
        else:
            waits.append(job.launched - job.submitted)
    return waits, censored


def overlap(start: float, seconds: float, window: tuple[float, float]) -> float:
    return max(0.0, min(start + seconds, window[1]) - max(start, window[0]))


def busyness(decisions: Iterable[Decision], framework: str, window: tuple[float, float]) -> float:
    """Share of the window spent deciding (decisions cut at the window's edges)."""
    length = window[1] - window[0]
    if length <= 0:
        return math.nan
    busy = sum(overlap(d.started, d.seconds, window) for d in decisions if d.framework == framework)
    return busy / length


def wasted_seconds(decisions: Iterable[Decision], framework: str, window: tuple[float, float]):
    """Decision seconds (inside the window) spent on attempts that conflicted."""
    return sum(
        overlap(d.started, d.seconds, window) * d.conflicts / d.attempts
        for d in decisions
        if d.framework == framework and d.attempts
    )


def conflict_figures(
    attempts: Iterable[Attempt], framework: str, window: tuple[float, float]
) -> dict:
    """Attempts made in the window: how many, how many conflicted (and why), the fraction."""
    mine = [a for a in attempts if a.framework == framework and window[0] <= a.at <= window[1]]
    outcomes = Counter(a.outcome for a in mine)
    reasons = Counter(a.reason or "(none)" for a in mine if a.outcome == CONFLICT)
    refusals = Counter(a.reason or "(none)" for a in mine if a.outcome == REFUSED)
    return {
        "attempts": len(mine),
        "launched": outcomes[LAUNCHED],
        "conflicts": outcomes[CONFLICT],
        "refused": outcomes[REFUSED],
        "conflict_fraction": outcomes[CONFLICT] / len(mine) if mine else 0.0,
        "conflicts_by_reason": dict(sorted(reasons.items())),
        "refused_by_reason": dict(sorted(refusals.items())),
    }


def framework_figures(
    ledger: Ledger, framework: str, window: tuple[float, float], end: float
) -> dict:
    """Everything one run reports about one framework."""
    waits, censored = job_waits(ledger.jobs.values(), framework, window, end)
    decisions = [d for d in ledger.decisions if d.framework == framework]
    wasted = wasted_seconds(decisions, framework, window)
    return {
        "jobs": len(waits),
        "not_launched": censored,
        "job_wait_seconds": summarize(waits),
        "busyness": round(busyness(decisions, framework, window), 4),
        "decisions": sum(1 for d in decisions if window[0] <= d.started <= window[1]),
        "wasted_decision_seconds": round(wasted, 3),
        **conflict_figures(ledger.attempts, framework, window),
    }


def median(values: Iterable[float]) -> float | None:
    data = sorted(values)
    return percentile(data, 50) if data else None


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is missing or the denominator is 0."""
    if numerator is None or denominator is None or denominator <= 0:
        return None
    return numerator / denominator


def jobs_per_second(
    load: float, cluster_cpus: float, task_cpus: float, mean_tasks: float, mean_duration: float
) -> float:
    """The arrival rate that keeps `load` of the cluster's CPUs busy on average (Little's law:
    busy CPUs = jobs/s x tasks per job x CPUs per task x mean duration)."""
    per_job = mean_tasks * task_cpus * mean_duration
    if per_job <= 0:
        raise ValueError("a job must ask for some CPU time")
    return load * cluster_cpus / per_job
