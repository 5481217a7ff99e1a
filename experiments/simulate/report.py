"""The simulate experiment's plots, targets and summary.md, from its runs (plain dicts).

Plots on Omega's axes (the swept framework's decision time, log x): the other roles' median
job wait, each framework's busyness, the conflict fraction; then, for the quickest decision
time of each mode, utilisation and each role's dominant share against its DRF optimum over
time.
"""

from __future__ import annotations

from pathlib import Path

from agora.experiments import plots
from agora.experiments.results import Results, targets_md
from agora.experiments.simulate.metrics import class_names

__all__ = ["plots_of", "summary", "targets"]


def _by_mode(results: Results) -> dict[str, list[dict]]:
    modes: dict[str, list[dict]] = {}
    for run in results.runs:
        modes.setdefault(run["mode"], []).append(run)
    for runs in modes.values():
        runs.sort(key=lambda r: r["swept_decision_seconds"])
    return modes


def _roles(results: Results) -> list[str]:
    return list(results.data["config"]["trace_summary"]["roles"])


def _wait(run: dict, role: str, key: str = "p50") -> float | None:
    return run["job_wait_seconds"][role]["all"][key]


def _launched(run: dict, role: str) -> str:
    """'launched of all' for the role's jobs: the waits are those of the launched ones only."""
    waits = run["job_wait_seconds"][role]
    launched = waits["all"]["count"]
    return f"{launched} of {launched + sum(waits['not_launched'].values())}"


def _plotted(value: float | None) -> float:
    return float("nan") if value is None else value  # a gap in the line


def plots_of(results: Results, series: dict, swept: str) -> list[str]:
    out: Path = results.out
    modes = _by_mode(results)
    roles = _roles(results)
    others = [r for r in roles if r != swept] or roles
    files = []
    wait_series = []
    styles = []
    for mode, runs in modes.items():
        xs = [r["swept_decision_seconds"] for r in runs]
        for role in others:
            for key, style in (("p50", "o-"), ("p99", "s--")):
                values = [_wait(r, role, key) for r in runs]
                wait_series.append((f"{role} {key}, {mode}", xs, [_plotted(v) for v in values]))
                styles.append(style)
    files.append(
        plots.lines(
            out / "job_wait.png",
            f"Job wait of the other roles vs the {swept} framework's decision time",
            f"{swept} decision time per job (s)",
            "job wait, p50 and p99 (s)",
            wait_series,
            logx=True,
            logy=True,
            styles=styles,
        )
    )
    busy = []
    for mode, runs in modes.items():
        xs = [r["swept_decision_seconds"] for r in runs]
        for role in roles:
            busy.append((f"{role}, {mode}", xs, [r["busyness"][role] for r in runs]))
    files.append(
        plots.lines(
            out / "busyness.png",
            "Share of time each framework spends deciding",
            f"{swept} decision time per job (s)",
            "busyness",
            busy,
            logx=True,
        )
    )
    conflicts = [
        (mode, [r["swept_decision_seconds"] for r in runs], [r["conflict_fraction"] for r in runs])
        for mode, runs in modes.items()
    ]
    files.append(
        plots.lines(
            out / "conflicts.png",
            "Accepts that conflicted (optimistic offers only can)",
            f"{swept} decision time per job (s)",
            "conflict fraction",
            conflicts,
            logx=True,
        )
    )
    util = []
    shares = []
    for mode, runs in modes.items():
        quickest = runs[0]["swept_decision_seconds"]
        samples = series.get((mode, quickest), [])
        ts = [row["t"] / 3600 for row in samples]
        util.append((mode, ts, [row["cpu_utilisation"] for row in samples]))
        if mode == next(iter(modes)):
            for role in roles:
                shares.append((f"{role}", ts, [row[f"share_{role}"] for row in samples]))
                shares.append(
                    (f"{role} DRF optimum", ts, [row[f"optimum_{role}"] for row in samples])
                )
    files.append(
        plots.lines(
            out / "utilisation.png",
            "CPUs held by running tasks (quickest decision time of each mode)",
            "hours into the trace",
            "CPU utilisation",
            util,
            styles=["-"] * len(util),
        )
    )
    files.append(
        plots.lines(
            out / "shares.png",
            f"Dominant shares against the DRF optimum ({next(iter(modes))} mode)",
            "hours into the trace",
            "dominant share",
            shares,
            styles=["-", ":"] * len(roles),
        )
    )
    return files


def targets(results: Results) -> None:
    """How fast the simulator replays: virtual seconds per CPU second of the slowest run."""
    runs = [r for r in results.runs if r.get("virtual_seconds_per_cpu_second")]
    if not runs:
        return
    slowest = min(runs, key=lambda r: r["virtual_seconds_per_cpu_second"])
    trace = results.data["config"]["trace_summary"]
    results.target(
        f"simulated seconds per CPU second at {trace['agents']} agents (slowest mode: "
        f"{slowest['mode']}); a day in minutes needs >= 288",
        slowest["virtual_seconds_per_cpu_second"],
        288.0,
        "x",
        at_most=False,
        measured_in=f"{trace['seconds']:g} s of trace in {slowest['cpu_seconds']} s CPU",
    )


def _fmt(value, unit: str = "", digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}{unit}"


def summary(results: Results, swept: str) -> str:
    trace = results.data["config"]["trace_summary"]
    roles = _roles(results)
    lines = [
        "# simulate: the real allocator on a virtual clock",
        "",
        f"Trace: {trace['agents']} agents of {trace['agent']}, {trace['seconds']:g} s, "
        f"{trace['jobs']} jobs, {trace['tasks']} tasks; roles {trace['roles']}. "
        f"{trace['jobs_per_agent_day']} jobs and {trace['tasks_per_agent_day']} tasks per agent "
        f"per day (Google's 2011 trace: {trace['google_jobs_per_machine_day']} and "
        f"{trace['google_tasks_per_machine_day']} per machine per day).",
        "",
        f"Command: `{' '.join(results.data['command'])}`. Preemption: "
        + _preemption_setting(results.data["config"]["sim"])
        + " Offers: "
        + _offers_setting(results.data["config"]["sim"]),
        "",
        "| mode | "
        + swept
        + " decides (s) | CPU util | "
        + " | ".join(f"{r} wait p50 / p99 (s), jobs launched" for r in roles)
        + " | fairness gap | offers/s | cycles/s | allocator ms/cycle | conflicts | "
        "preempted | sim CPU (s) |",
        "|---" * (10 + len(roles)) + "|",
    ]
    for run in results.runs:
        waits = " | ".join(
            f"{_fmt(_wait(run, r))} / {_fmt(_wait(run, r, 'p99'))}, {_launched(run, r)}"
            for r in roles
        )
        gap = ", ".join(f"{r} {_fmt(v)}" for r, v in run["fairness_gap"].items())
        lines.append(
            f"| {run['mode']} | {run['swept_decision_seconds']:g} | "
            f"{run['utilisation'].get('cpus', 0):.1%} | {waits} | {gap} | "
            f"{run['offers_per_second']:g} | {run['cycles_per_second']:g} | "
            f"{_fmt(run['allocator_cpu_ms_per_cycle'])} | {run['conflicts']} | "
            f"{_preempted(run)} | {run['cpu_seconds']} |"
        )
    lines += ["", "## Median job wait by size class (tasks per job), s", ""]
    classes = class_names()
    lines.append("| mode | decides (s) | role | " + " | ".join(classes) + " | not launched |")
    lines.append("|---" * (4 + len(classes)) + "|")
    for run in results.runs:
        for role in roles:
            waits = run["job_wait_seconds"][role]
            cells = " | ".join(_fmt(waits["by_size"][c]["p50"]) for c in classes)
            left = sum(waits["not_launched"].values())
            lines.append(
                f"| {run['mode']} | {run['swept_decision_seconds']:g} | {role} | {cells} | {left} |"
            )
    lines += [
        "",
        "What is real: the master's allocator and its event-driven timing, the batch "
        "framework's queue order and planner. What is modelled: message latency, decision "
        "times (per job placed and per task), task run times (exact). The fairness gap is the "
        "mean |dominant share - DRF optimum| while every role wants something. A role's "
        "waits are those of its jobs that launched all their tasks within the trace (how many "
        "of its jobs did: jobs launched). Preempted: "
        "tasks stopped by the master's own preemption decision, per role (with "
        "`--preemption-timeout`; off, as the master's default, without it).",
    ]
    lines += _cross_check(results.data.get("cross_check"))
    lines += ["", targets_md(results.data["targets"])]
    return "\n".join(lines) + "\n"


def _preemption_setting(sim: dict) -> str:
    timeout = sim.get("preemption_timeout")
    if timeout is None:
        return "off (as the master's default; `--preemption-timeout S` turns it on)."
    return (
        f"for a role starved below its fair share for {timeout:g} s (`--preemption-timeout`), "
        f"checked every {sim['preemption_check_seconds']:g} s, at most "
        f"{sim['max_preemptions_per_minute']} tasks a minute."
    )


def _offers_setting(sim: dict) -> str:
    if sim.get("sized_offers", True):
        return (
            "sized by demand (each framework says what its queue waits for, as the batch "
            "framework does; `--unsized-offers`: every agent with room, as in Mesos)."
        )
    return "every agent with room on a revive, as in Mesos (`--unsized-offers`)."


def _preempted(run: dict) -> str:
    """Tasks preempted in the run, and whose ("-": none)."""
    if not run.get("preemptions"):
        return "-"
    whose = ", ".join(f"{role} {n}" for role, n in run["preempted"].items() if n)
    return f"{run['preemptions']} ({whose})"


def _cross_check(checked: dict | None) -> list[str]:
    if not checked:
        return []
    verdict = "agree" if checked["agree"] else "**do not agree**"
    lines = [
        "",
        f"## Cross-check: a real master and emulated agents on the same trace ({verdict})",
        "",
        f"Tolerance: {checked['tolerance']}.",
        "",
        "| figure | real | simulated | within |",
        "|---|---:|---:|---|",
    ]
    for c in checked["checks"]:
        lines.append(
            f"| {c['figure']} | {_fmt(c['real'])} | {_fmt(c['simulated'])} | "
            f"{'yes' if c['within'] else '**no**'} |"
        )
    return lines
