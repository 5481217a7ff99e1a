"""A run's figures, from what it recorded: one plain dict per run, for results.json.

Shared by the simulator and the cross-check's real run, so that both are judged by the same
arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable

from agora.experiments.results import summarize
from agora.experiments.simulate.metrics import Recorder, class_names, size_class

__all__ = ["fairness_gap", "job_waits", "run_figures"]


def job_waits(recorder: Recorder, roles: Iterable[str]) -> dict:
    """Per role and size class: the waits (s) of the jobs whose tasks all launched, and how
    many never launched them all within the run."""
    out: dict = {}
    for role in roles:
        by_class: dict[str, list[float]] = {name: [] for name in class_names()}
        left = {name: 0 for name in class_names()}
        for job in recorder.jobs.values():
            if job.role != role:
                continue
            cls = size_class(job.tasks)
            if job.launched is None:
                left[cls] += 1
            else:
                by_class[cls].append(job.launched - job.arrived)
        everything = [w for waits in by_class.values() for w in waits]
        out[role] = {
            "all": summarize(everything),
            "by_size": {c: summarize(by_class[c]) for c in class_names()},
            "not_launched": left,
        }
    return out


def fairness_gap(samples: list[dict], roles: Iterable[str]) -> dict[str, float | None]:
    """Per role, the mean of |dominant share - DRF optimum| over the samples where every role
    wanted something (where DRF has a say); None when there was no such moment."""
    roles = list(roles)
    gaps: dict[str, list[float]] = {role: [] for role in roles}
    for row in samples:
        if all(row[f"optimum_{role}"] > 0 for role in roles):
            for role in roles:
                gaps[role].append(abs(row[f"share_{role}"] - row[f"optimum_{role}"]))
    return {role: (round(sum(g) / len(g), 4) if g else None) for role, g in gaps.items()}


def run_figures(recorder: Recorder, seconds: float, roles: list[str]) -> dict:
    util = recorder.utilisation(seconds)
    cycles = recorder.cycles
    accepts = recorder.launches + recorder.conflicts + recorder.priority_refusals
    return {
        "utilisation": {r: round(v, 4) for r, v in util.items()},
        "job_wait_seconds": job_waits(recorder, roles),
        "fairness_gap": fairness_gap(recorder.samples, roles),
        "tasks_launched": recorder.tasks_launched,
        "offers_per_second": round(recorder.offers / seconds, 2),
        "cycles_per_second": round(cycles / seconds, 2),
        "conflicts": recorder.conflicts,
        "priority_refusals": recorder.priority_refusals,
        # Tasks stopped by preemption (0 with it off), all told, by their role and by the role
        # they were stopped for.
        "preemptions": recorder.preemptions,
        "preempted": dict(recorder.preempted),
        "preempted_for": dict(recorder.preempted_for),
        # Of all Accepts: launched, conflicted, refused for a rival.
        "conflict_fraction": round(recorder.conflicts / accepts, 4) if accepts else 0.0,
        "busyness": {r: round(v / seconds, 4) for r, v in recorder.decide_seconds.items()},
        "allocator_cpu_ms_per_cycle": round(recorder.allocate_cpu_seconds / cycles * 1000, 4)
        if cycles
        else None,
        "allocator_cpu_us_per_offer": round(
            recorder.allocate_cpu_seconds / recorder.offers * 1e6, 2
        )
        if recorder.offers
        else None,
    }
