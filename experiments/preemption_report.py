"""The preemption experiment's report: the plots of running tasks and shares, summary.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agora.experiments import plots
from agora.experiments.results import Results, targets_md

if TYPE_CHECKING:
    from agora.experiments.preemption import PreemptionConfig

__all__ = ["plot", "summary"]


def plot(
    cfg: PreemptionConfig,
    out: Path,
    samples: list[dict],
    total: float,
    guarantee: float,
    c_target: int,
    runs: dict,
) -> list[str]:
    series = []
    styles = []
    for mode in runs:
        for role in ("a", "b", "c") if cfg.third_role else ("a", "b"):
            points = [
                (s["t"], s["running"]) for s in samples if s["mode"] == mode and s["role"] == role
            ]
            if points:
                series.append((f"{role} ({mode})", [p[0] for p in points], [p[1] for p in points]))
                styles.append("-" if mode == "preemption" else ":")
    return [
        plots.lines(
            out / "preemption_running.png",
            "Running tasks per role (solid: with preemption; dotted: without)"
            + (f"; c's share: {c_target}" if cfg.third_role else ""),
            "seconds",
            "running tasks",
            series,
            styles=styles,
            hline=(guarantee / cfg.task_cpus, "b's guarantee"),
        ),
        _shares_plot(cfg, out, samples, total, guarantee, c_target),
    ]


def _shares_plot(
    cfg: PreemptionConfig,
    out: Path,
    samples: list[dict],
    total: float,
    guarantee: float,
    c_target: int,
) -> str:
    """Each role's share of the CPUs with preemption (solid), against what it is owed
    (dashed, the same colour): b's guarantee, c's weighted share, a's fair share (a floor:
    a's tasks are victims only above it)."""
    roles = ("a", "b", "c") if cfg.third_role else ("a", "b")
    runs = [s for s in samples if s["mode"] == "preemption"]
    end = max((s["t"] for s in runs), default=cfg.seconds)
    weights = 1.0 + cfg.b_weight + (cfg.c_weight if cfg.third_role else 0.0)
    owed = {
        "a": (total / weights, "a's fair share"),
        "b": (guarantee, "b's guarantee"),
        "c": (c_target * cfg.task_cpus, "c's weighted share"),
    }
    series, styles = [], []
    for i, role in enumerate(roles):
        points = [(s["t"], s["running"] * cfg.task_cpus / total) for s in runs if s["role"] == role]
        if points:
            series.append((f"{role}", [p[0] for p in points], [p[1] for p in points]))
            styles.append(f"C{i}-")
        cpus, label = owed[role]
        series.append((label, [0.0, end], [cpus / total] * 2))
        styles.append(f"C{i}--")
    weights_text = f"weights a 1, b {cfg.b_weight:g}" + (
        f", c {cfg.c_weight:g}" if cfg.third_role else ""
    )
    return plots.lines(
        out / "preemption_shares.png",
        f"Share of the CPUs per role with preemption, against what it is owed ({weights_text})",
        "seconds",
        "share of the cluster's CPUs",
        series,
        styles=styles,
    )


_HEADER = (
    "| run | b's arrival -> guarantee (s) | preempted for b | after b held it "
    "| c's arrival -> share (s) | preempted for c | after c held it "
    "| running at the end a / b / c | work lost (cpu s) | run (s) "
    "| watched after converging (s) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def summary(
    cfg: PreemptionConfig,
    results: Results,
    runs: dict,
    guarantee: float,
    fewest: int,
    c_target: int,
) -> str:
    rows = "\n".join(
        f"| {r['mode']} | {r['to_guarantee_seconds']} | {r['preempted']} | "
        f"{r['preempted_after_convergence']} | {r['c_to_share_seconds']} | "
        f"{r['preempted_for_c']} | {r['preempted_after_c_converged']} | "
        f"{r['running_at_end']['a']} / {r['running_at_end']['b']} / "
        f"{r['running_at_end']['c']} | {r['work_lost_cpu_seconds']} | {r['seconds']} | "
        f"{r['settled_seconds']} |"
        for r in runs.values()
    )
    third = (
        f"""At {cfg.c_arrives * cfg.seconds:g} s role c arrives, of weight {cfg.c_weight:g}
(a weighs 1, b {cfg.b_weight:g}), wanting more than its share; with preemption the master
also has `--fair-share-preemption-timeout {cfg.fair_timeout or cfg.timeout:g}`. c's weighted
share is {c_target} tasks (its weight's part of the cluster, but no more than a leaves once
a keeps its own fair share beside b's guarantee), a's the rest."""
        if cfg.third_role
        else ""
    )
    settle = (
        f"""Each run lasts {cfg.seconds:g} s, or longer: until {cfg.settle:g} s have passed since
the last role converged (b to its guarantee, c to its share), {cfg.seconds + cfg.settle:g} s
at most; any preemption in that window is oscillation."""
        if cfg.settle > 0
        else ""
    )
    return f"""# preemption

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

## What is measured, and how

{cfg.agents} emulated agents of `{cfg.agent_resources}` and a real master. Role a's load
framework fills the cluster with tasks of {cfg.task_cpus:g} cpus and {cfg.task_mem:g} MB
(exponential durations, mean {cfg.mean_duration:g} s, so few end during the run). At
{cfg.b_arrives * cfg.seconds:g} s role b arrives, guaranteed `cpus:{guarantee:g}`
({cfg.guarantee_fraction:.0%} of the CPUs) and wanting exactly that ({fewest} tasks), and
tells the master what it cannot place. With preemption the master has
`--guarantee-preemption-timeout {cfg.timeout:g}` and `--max-preemptions-per-minute
{cfg.max_per_minute}`; without, b waits for a's tasks to end.
{third}
{settle}
Every {cfg.sample_interval:g} s the runner lists the master's tasks. Work lost: the CPU
seconds each preempted task had run, from the first sample that saw it running (so within
{cfg.sample_interval:g} s).

## Targets

{targets_md(results.data["targets"])}

## Figures

{_HEADER}
{rows}

![running tasks](preemption_running.png)

![shares against what each role is owed](preemption_shares.png)
"""
