"""The preemption experiment's checks: pure functions over what one run measured (ModeRun).

The run (preemption.py) records when each role arrived and was first seen at what it is
owed, the samples of running tasks and the master's list of preemptions; these functions
turn them into the run's figures and the targets, and preemption_report.py writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agora.experiments.checks import Check

if TYPE_CHECKING:
    from agora.experiments.preemption import PreemptionConfig
    from agora.v1 import operator_pb2

__all__ = ["ModeRun", "c_share_cpus", "checks", "fewest_tasks", "figures"]


@dataclass
class ModeRun:
    """One run (with preemption or without), before any judgement. Times named `*_at` are
    seconds into the run; `*_wall` are wall-clock times (time.time()), comparable with the
    master's preemption times."""

    mode: str  # "preemption" or "none"
    samples: list[dict] = field(default_factory=list)  # {mode, t, role, running}
    first_running: dict[str, float] = field(default_factory=dict)  # task id -> wall time
    preempted: list[operator_pb2.PreemptionSummary] = field(default_factory=list)
    ended_at: float = 0.0
    b_arrived_at: float | None = None
    b_reached_at: float | None = None  # first sample with b holding its guarantee
    b_reached_wall: float | None = None
    c_arrived_at: float | None = None
    c_reached_at: float | None = None  # first sample with c within one task of its share
    c_reached_wall: float | None = None
    launched: int = 0


def c_share_cpus(total: float, guarantee: float, b_weight: float, c_weight: float) -> float:
    """The CPUs c converges to: its weighted fair share of the cluster (weight over the
    weights of a, b and c, all holding resources), but no more than a leaves it once a keeps
    its own fair share beside b's guarantee (a's tasks are victims only while a keeps that).
    Tasks' memory is small: the CPUs are everyone's dominant resource."""
    weights = 1.0 + b_weight + c_weight
    return min(total * c_weight / weights, total - guarantee - total / weights)


def fewest_tasks(guarantee: float, task_cpus: float) -> int:
    """The fewest tasks that hold `guarantee` CPUs (and so the fewest to preempt for it)."""
    return math.ceil(guarantee / task_cpus - 1e-9)


def _after(preempted: list, wall: float | None, slack: float, beneficiary: str = "") -> int:
    """Preemptions (for `beneficiary`, or any) later than `wall` plus a sample's resolution:
    a kill sent just before a role was seen at its share is not counted as after it."""
    if wall is None:
        return 0
    return sum(
        1
        for p in preempted
        if (not beneficiary or p.beneficiary == beneficiary) and p.at > wall + slack
    )


def _since(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else round(later - earlier, 3)


def figures(cfg: PreemptionConfig, run: ModeRun) -> dict:
    """The run as results.json records it."""
    preempted = run.preempted
    lost = sum(
        max(0.0, p.at - run.first_running.get(p.task_id, p.at)) * cfg.task_cpus for p in preempted
    )
    last = {role: 0 for role in ("a", "b", "c")}
    for sample in run.samples:  # the run's last sample per role
        if sample["mode"] == run.mode:
            last[sample["role"]] = sample["running"]
    converged = [run.b_reached_at, run.c_reached_at] if cfg.third_role else [run.b_reached_at]
    return {
        "mode": run.mode,
        "seconds": round(run.ended_at, 3),
        # How long the run watched after the last role converged: the oscillation window.
        "settled_seconds": (
            None
            if any(at is None for at in converged)
            else round(run.ended_at - max(at for at in converged if at is not None), 3)
        ),
        "b_arrived_seconds": run.b_arrived_at,
        "to_guarantee_seconds": _since(run.b_reached_at, run.b_arrived_at),
        "preempted": sum(1 for p in preempted if p.beneficiary == "b"),
        "preempted_for_c": sum(1 for p in preempted if p.beneficiary == "c"),
        "preempted_other": sum(1 for p in preempted if p.beneficiary not in ("b", "c")),
        "c_arrived_seconds": run.c_arrived_at,
        "c_to_share_seconds": _since(run.c_reached_at, run.c_arrived_at),
        "preempted_after_c_converged": _after(preempted, run.c_reached_wall, cfg.sample_interval),
        "running_at_end": last,
        "preempted_after_convergence": _after(
            preempted, run.b_reached_wall, cfg.sample_interval, beneficiary="b"
        ),
        "work_lost_cpu_seconds": round(lost, 1),
        "tasks_launched": run.launched,
    }


def checks(cfg: PreemptionConfig, on: dict, fewest: int) -> list[Check]:
    """The targets over the run with preemption (`on`, as `figures` made it), in order."""
    out = [
        Check(
            "seconds from b's arrival until it runs its guarantee, with preemption",
            on["to_guarantee_seconds"],
            cfg.timeout + 2.0,
            "s",
            measured_in="the first sample with b's running tasks holding its guarantee",
            not_measured="b did not reach its guarantee within the run",
        ),
        Check(
            "tasks preempted beyond the fewest that free b's guarantee",
            on["preempted"] - fewest,
            0,
            "tasks",
            measured_in="Operator.ListPreemptions at the end of the run",
        ),
        Check(
            "tasks preempted after b first held its guarantee (oscillation)",
            on["preempted_after_convergence"],
            0,
            "tasks",
            measured_in="ListPreemptions times against the first sample with b at its guarantee",
        ),
    ]
    if cfg.third_role:
        out += [
            Check(
                "seconds from c's arrival until it runs within one task of its weighted share",
                on["c_to_share_seconds"],
                (cfg.fair_timeout or cfg.timeout) + 2.0,
                "s",
                measured_in="the first sample with c's running tasks within one of its share",
                not_measured="c did not reach its share within the run",
            ),
            Check(
                "tasks preempted after c first ran its share (oscillation between a and c)",
                on["preempted_after_c_converged"],
                0,
                "tasks",
                measured_in="ListPreemptions times against the first sample with c at its share",
            ),
        ]
    return out
