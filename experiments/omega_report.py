"""The omega experiment's targets, plots and summary.md, from its runs (plain dicts).

The plots use the axes of Omega's figures: the service scheduler's decision time on a log x
axis, and on y the batch scheduler's job wait, each scheduler's busyness, and the conflict
fraction in optimistic mode. The summary's sentences are written from the figures, so they say
what this run showed, whichever way it went.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agora.experiments import plots
from agora.experiments.omega_stats import ratio
from agora.experiments.results import Results, targets_md

if TYPE_CHECKING:
    from agora.experiments.omega import OmegaConfig

MODES_ORDER = ("pessimistic", "optimistic")
GANG_TARGET_SECONDS = 30.0
WAIT_RATIO_LIMIT = 2.0


def sweep(runs: list[dict], mode: str) -> list[dict]:
    """The mode's sweep runs, by decision time."""
    found = [r for r in runs if r["kind"] == "sweep" and r["mode"] == mode]
    return sorted(found, key=lambda r: r["service_decision_seconds"])


def gangs(runs: list[dict]) -> dict[bool, dict]:
    return {r["holds"]: r for r in runs if r["kind"] == "gang"}


def median_wait(run: dict, framework: str) -> float | None:
    return run[framework]["job_wait_seconds"]["p50"]


def wait_ratio(runs: list[dict], mode: str) -> tuple[float | None, dict | None, dict | None]:
    """Batch median wait with the slowest service decisions over that with the quickest."""
    found = sweep(runs, mode)
    if len(found) < 2:
        return None, None, None
    fast, slow = found[0], found[-1]
    return ratio(median_wait(slow, "batch"), median_wait(fast, "batch")), fast, slow


# targets ---------------------------------------------------------------------------------


def targets(cfg: OmegaConfig, results: Results) -> None:
    runs = results.runs
    for mode, at_most, limit, name in (
        ("optimistic", True, WAIT_RATIO_LIMIT, "stays within 2x"),
        ("pessimistic", False, 1.0, "shown to degrade: > 1"),
    ):
        figure, fast, slow = wait_ratio(runs, mode)
        if fast is None or slow is None:
            continue
        t_fast, t_slow = fast["service_decision_seconds"], slow["service_decision_seconds"]
        results.target(
            f"batch median job wait, service deciding in {t_slow:g} s / in {t_fast:g} s, "
            f"{mode} ({name})",
            figure,
            limit,
            "ratio",
            at_most=at_most,
            measured_in=f"{mode} mode: {median_wait(slow, 'batch')} s / "
            f"{median_wait(fast, 'batch')} s",
        )
    gang = gangs(runs)
    with_holds = gang.get(True)
    if with_holds is not None:
        without = gang.get(False)
        entry = results.target(
            f"{with_holds['tasks']}-task gang on a busy cluster, submit -> all launched, "
            "with holds",
            with_holds["wait_seconds"],
            GANG_TARGET_SECONDS,
            "s",
            measured_in=f"{gang_words(with_holds)}; without holds: "
            + (gang_words(without) if without else "not run"),
        )
        if not with_holds["started"]:
            entry["met"] = False  # no figure, but it certainly did not start in time


def gang_words(run: dict) -> str:
    if run["started"]:
        return f"started in {run['wait_seconds']:g} s"
    words = f"did not start within {run['timeout_seconds']:g} s"
    if run["error"]:
        words += f" ({run['error']})"
    return words


# plots -----------------------------------------------------------------------------------


def _xs(found: list[dict]) -> list[float]:
    return [r["service_decision_seconds"] for r in found]


def draw(cfg: OmegaConfig, out: Path, runs: list[dict]) -> list[str]:
    """The PNGs of the runs there are; returns their names."""
    written: list[str] = []
    modes = [m for m in cfg.modes if sweep(runs, m)]
    if modes:
        series, styles = [], []
        for mode in modes:
            found = sweep(runs, mode)
            for stat, style in (("p50", "o-"), ("p90", "x:")):
                ys = [_nan(r["batch"]["job_wait_seconds"][stat]) for r in found]
                series.append((f"{mode}, {'median' if stat == 'p50' else 'p90'}", _xs(found), ys))
                styles.append(style)
        written.append(
            plots.lines(
                out / "omega_batch_wait.png",
                "Batch job wait (submit -> all tasks launched) vs service decision time",
                "service framework's decision time per job (s)",
                "batch job wait (s)",
                series,
                logx=True,
                styles=styles,
            )
        )
        series = []
        for mode in modes:
            found = sweep(runs, mode)
            for framework in ("batch", "service"):
                ys = [r[framework]["busyness"] for r in found]
                series.append((f"{framework} ({mode})", _xs(found), ys))
        written.append(
            plots.lines(
                out / "omega_busyness.png",
                "Scheduler busyness (share of time spent deciding)",
                "service framework's decision time per job (s)",
                "busyness",
                series,
                logx=True,
            )
        )
        series = []
        for mode in modes:
            found = sweep(runs, mode)
            ys = [_nan(median_wait(r, "service")) for r in found]
            series.append((f"service median ({mode})", _xs(found), ys))
        written.append(
            plots.lines(
                out / "omega_service_wait.png",
                "Service job wait (submit -> all tasks launched) vs its decision time",
                "service framework's decision time per job (s)",
                "service job wait (s)",
                series,
                logx=True,
            )
        )
    optimistic = sweep(runs, "optimistic")
    if optimistic:
        series = [
            (framework, _xs(optimistic), [r[framework]["conflict_fraction"] for r in optimistic])
            for framework in ("batch", "service")
        ]
        written.append(
            plots.lines(
                out / "omega_conflicts.png",
                "Conflict fraction in optimistic mode (conflicted / all launch attempts)",
                "service framework's decision time per job (s)",
                "conflict fraction",
                series,
                logx=True,
            )
        )
    gang = gangs(runs)
    if gang:
        order = [h for h in (True, False) if h in gang]
        names = ["with holds" if h else "without holds" for h in order]
        values = [
            gang[h]["wait_seconds"] if gang[h]["started"] else gang[h]["timeout_seconds"]
            for h in order
        ]
        notes = [
            f"{gang[h]['wait_seconds']:.1f} s"
            if gang[h]["started"]
            else f"did not start in {gang[h]['timeout_seconds']:g} s"
            for h in order
        ]
        first = gang[order[0]]
        written.append(
            plots.bars(
                out / "omega_gang.png",
                f"{first['tasks']}-task gang ({first['task']}) on a cluster kept busy by "
                "small jobs",
                "submit -> all tasks launched (s)",
                names,
                [("gang wait", values)],
                notes=[notes],
                hline=(GANG_TARGET_SECONDS, f"target {GANG_TARGET_SECONDS:g} s"),
            )
        )
    return written


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


# summary ---------------------------------------------------------------------------------


def _s(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def one_line(results: Results) -> str:
    parts = []
    for mode in MODES_ORDER:
        figure, _, _ = wait_ratio(results.runs, mode)
        if figure is not None:
            parts.append(f"{mode} batch wait ratio {figure:.2f}")
    for holds, run in sorted(gangs(results.runs).items(), reverse=True):
        parts.append(f"gang {'with' if holds else 'without'} holds {gang_words(run)}")
    return "; ".join(parts) or "no runs"


def _run_table(runs: list[dict]) -> str:
    lines = [
        "| mode | service decision (s) | batch wait p50 / p90 (s) | batch jobs (not launched) "
        "| service wait p50 (s) | service jobs (not launched) | busyness batch / service "
        "| conflicts batch | conflicts service | wasted decision s (service) | CPU used |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode in MODES_ORDER:
        for r in sweep(runs, mode):
            b, s = r["batch"], r["service"]
            lines.append(
                f"| {mode} | {r['service_decision_seconds']:g} "
                f"| {_s(b['job_wait_seconds']['p50'])} / {_s(b['job_wait_seconds']['p90'])} "
                f"| {b['jobs']} ({b['not_launched']}) "
                f"| {_s(s['job_wait_seconds']['p50'])} | {s['jobs']} ({s['not_launched']}) "
                f"| {b['busyness']:.3f} / {s['busyness']:.3f} "
                f"| {b['conflicts']}/{b['attempts']} ({b['conflict_fraction']:.1%}) "
                f"| {s['conflicts']}/{s['attempts']} ({s['conflict_fraction']:.1%}) "
                f"| {s['wasted_decision_seconds']:g} "
                f"| {_s(r['mean_cpu_utilization'], 2)} |"
            )
    return "\n".join(lines)


def _findings(runs: list[dict]) -> list[str]:
    """What the plots show, in sentences made from the figures."""
    out = []
    for mode in MODES_ORDER:
        figure, fast, slow = wait_ratio(runs, mode)
        if fast is None or slow is None:
            continue
        direction = (
            "unmeasurable (no batch job launched at one end)"
            if figure is None
            else "grows"
            if figure > 1.1
            else "shrinks"
            if figure < 0.9
            else "stays about level"
        )
        out.append(
            f"- **Batch job wait, {mode}** (`omega_batch_wait.png`): the median goes from "
            f"{_s(median_wait(fast, 'batch'))} s with the service framework deciding in "
            f"{fast['service_decision_seconds']:g} s to {_s(median_wait(slow, 'batch'))} s at "
            f"{slow['service_decision_seconds']:g} s (x{_s(figure)}): it {direction}."
        )
    for mode in MODES_ORDER:
        found = sweep(runs, mode)
        if found:
            steps = ", ".join(
                f"{r['service']['busyness']:.2f} at {r['service_decision_seconds']:g} s"
                for r in found
            )
            batch = max(r["batch"]["busyness"] for r in found)
            out.append(
                f"- **Busyness, {mode}** (`omega_busyness.png`): the service framework is busy "
                f"{steps}; the batch framework at most {batch:.3f}."
            )
    optimistic = sweep(runs, "optimistic")
    if optimistic:
        for framework in ("service", "batch"):
            steps = ", ".join(
                f"{r[framework]['conflict_fraction']:.1%} ({r[framework]['conflicts']} of "
                f"{r[framework]['attempts']}) at {r['service_decision_seconds']:g} s"
                for r in optimistic
            )
            reasons: dict[str, int] = {}
            for r in optimistic:
                for reason, n in r[framework]["conflicts_by_reason"].items():
                    reasons[reason] = reasons.get(reason, 0) + n
            why = ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items()))
            out.append(
                f"- **Conflicts, optimistic, {framework}** (`omega_conflicts.png`): {steps}"
                + (
                    f" (by reason: {why}; RESCINDED: another framework's commit took the "
                    "resources and the master took our offer back before we sent ours)."
                    if why
                    else "."
                )
            )
        wasted = ", ".join(
            f"{r['service']['wasted_decision_seconds']:g} s at {r['service_decision_seconds']:g} s"
            for r in optimistic
        )
        out.append(
            f"- **Wasted work, optimistic, service**: decision seconds lost to conflicts: {wasted}."
        )
    for mode in MODES_ORDER:
        found = sweep(runs, mode)
        if found:
            steps = ", ".join(
                f"{_s(median_wait(r, 'service'))} s at {r['service_decision_seconds']:g} s "
                f"({r['service']['not_launched']} of {r['service']['jobs']} not launched)"
                for r in found
            )
            out.append(
                f"- **Service job wait, {mode}** (`omega_service_wait.png`): the median is {steps}."
            )
    if optimistic:
        out.append(
            "- **The price of optimism**: a framework that thinks longer than the others take "
            "to commit loses the race for what it planned on, and its decisions are wasted. "
            "A framework below its fair share keeps priority only for --optimistic-grace after "
            "its offer (docs/allocator.md), so a 10 s decider cannot block the batch framework, "
            "and pays for its slowness itself rather than making everyone wait."
        )
    pessimistic = sweep(runs, "pessimistic")
    if pessimistic:
        total = sum(r[f]["conflicts"] for r in pessimistic for f in ("batch", "service"))
        out.append(f"- **Conflicts, pessimistic**: {total} in all (offers are exclusive).")
    gang = gangs(runs)
    for holds in (True, False):
        run = gang.get(holds)
        if run is None:
            continue
        extra = ""
        if not holds:
            rounds = run["rounds"]
            extra = (
                f"; it looked at {rounds} round{'s' if rounds != 1 else ''} of offers, the "
                f"best of which fitted {run['best_round_tasks']} of its {run['tasks']} tasks"
            )
        small = run["small_jobs_while_gang_waits"]["job_wait_seconds"]
        meanwhile = (
            f"small jobs submitted meanwhile waited {_s(small['p50'])} s (median)"
            if small["count"]
            else "no small job was submitted meanwhile"
        )
        out.append(
            f"- **Gang {'with' if holds else 'without'} holds** (`omega_gang.png`): "
            f"{gang_words(run)}{extra} (cluster {run['busy_cpus_fraction_at_submit']:.0%} busy "
            f"at submission; {meanwhile})."
        )
    return out


def summary(cfg: OmegaConfig, results: Results) -> str:
    machine = results.data["machine"]
    b, s, g = cfg.batch, cfg.service, cfg.small
    cpus = cfg.cluster_cpus
    rates = {
        name: w.stream(name, cpus, 0, w.decision).jobs_per_second
        for name, w in (("batch", b), ("service", s), ("small", g))
    }
    findings = "\n".join(_findings(results.runs))
    return f"""# omega

Machine: {machine["cpu_model"]}, {machine["cores"]} cores, Python {machine["python"]}.
Command: `{" ".join(results.data["command"])}`

## What is measured, and how

Omega's experiment (Schwarzkopf et al., EuroSys 2013) on a real Agora master with
{cfg.agents} emulated agents of `{cfg.agent_resources}` ({cpus:g} CPUs). Two frameworks on the
real SDK, each deciding one job at a time (it takes its first queued job and the offers in hand,
places the job's tasks, thinks for its decision time while holding those offers, then sends one
Accept per agent):

- **batch**: {rates["batch"]:.2f} jobs/s (Poisson), {b.tasks_min}-{b.tasks_max} tasks of
  <{b.cpus:g} cpus, {b.mem:g} MB>, exponential durations (mean {b.mean_duration:g} s), keeping
  about {b.load:.0%} of the CPUs busy; {b.decision * 1000:g} ms per decision.
- **service**: {rates["service"]:.3f} jobs/s, {s.tasks_min}-{s.tasks_max} tasks of
  <{s.cpus:g} cpus, {s.mem:g} MB>, mean duration {s.mean_duration:g} s (about {s.load:.0%} of
  the CPUs when it keeps up); its decision time per job is swept:
  {", ".join(f"{t:g}" for t in cfg.decision_times)} s.

Each decision time runs in each offer mode ({", ".join(cfg.modes)}) on a fresh master and fleet:
{cfg.warmup:g} s of warm-up, then a {cfg.seconds:g} s window; the window's batch jobs then get up
to {cfg.grace:g} s more to launch. Same job arrivals (same seeds) in every run. Figures:

- **job wait**: submit -> the job's last task launched (Accept answered OK), for jobs submitted
  in the window. A job not fully launched when the run ends counts with its wait so far (a
  lower bound) and is counted as "not launched".
- **busyness**: the share of the window a framework spent thinking (its decision time).
- **conflict fraction**: conflicted launch attempts / all launch attempts (one attempt = one
  Accept). A conflict is the master's ABORTED (another framework was first, or one below its
  fair share has priority) or an offer rescinded while the framework was deciding; nothing is
  launched and the job's tasks are decided again with fresh offers.
- **wasted work**: decision seconds spent on conflicted attempts (a decision's time shared
  evenly over its attempts).

Gang part ({cfg.gang_mode} mode, a fresh master and fleet for each way): small jobs
({rates["small"]:.2f} jobs/s, {g.tasks_min}-{g.tasks_max} tasks of <{g.cpus:g} cpus,
{g.mem:g} MB>, mean {g.mean_duration:g} s, about {g.load:.0%} of the CPUs) run for
{cfg.gang_warmup:g} s, then one gang job of {cfg.gang_tasks} tasks of `{cfg.gang_task}` (all of
them fit the idle cluster) is submitted; the figure is the time from submission until all
{cfg.gang_tasks} are launched, within {cfg.gang_timeout:g} s. With holds the gang framework asks
the master to hold resources as they free up (`driver.hold`); without, it launches only when
one round of offers fits the whole gang, declining otherwise (as frameworks/batch does).

## Targets

{targets_md(results.data["targets"])}

## What the plots show

{findings}

## All runs

{_run_table(results.runs)}

`samples.csv` has the frameworks' state every {cfg.sample_interval:g} s (busy CPUs, queued jobs,
offers held) and every job's wait; `logs/` the masters' and fleets' logs.
"""
