"""The failover experiment's report: results.json's run, samples.csv, the plot, summary.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agora.experiments.checks import record
from agora.experiments.failover_checks import METRICS, FailoverRun, Verdict
from agora.experiments.results import Results, stats_table, targets_md
from agora.v1 import common_pb2

if TYPE_CHECKING:
    from agora.experiments.failover import FailoverConfig

__all__ = ["run_entry", "summary", "write"]


def run_entry(cfg: FailoverConfig, run: FailoverRun, verdict: Verdict) -> dict:
    """The run as results.json records it."""
    entry = {
        "kills": len(verdict.samples),
        "session_timeout_seconds": cfg.session_timeout,
        "seconds": {m: verdict.stats[m] for m in verdict.metrics},
        "tasks_launched": len(run.states),
        "tasks_finished": sum(s == common_pb2.TASK_FINISHED for s in run.states.values()),
        "tasks_lost": len(verdict.lost),
        "lost_task_ids": verdict.lost[:20],
        "tasks_run_twice": len(verdict.ran_twice),
        "run_twice_ids": verdict.ran_twice[:20],
        "launches_dropped_by_a_dying_master": run.relaunched,
        "framework_kept_its_id": verdict.kept_its_id,
        "fault": cfg.fault,
    }
    if cfg.fault == "pause":
        # What reached the framework from a master whose successor was already elected: the
        # SDK drops such a stream's events itself, so these are counted as they arrive.
        entry["events_from_a_deposed_leader"] = run.from_deposed
    return entry


def _setting(cfg: FailoverConfig, kills: int) -> str:
    """The run's set-up in one sentence."""
    if cfg.masters == 1:
        return (
            f"One master (SQLite registry), {cfg.agents} real agents, one framework "
            f"launching {cfg.task_seconds:g} s tasks; the master killed {kills} "
            "times and restarted at once. 'elected' is when it listens again."
        )
    fault = (
        f"the leader paused {kills} times until a successor was elected, then resumed 0.5 s later."
        if cfg.fault == "pause"
        else f"the leader killed {kills} times, each time restarted at once to stand by."
    )
    return (
        f"{cfg.masters} masters on a real ZooKeeper (session timeout "
        f"{cfg.session_timeout:g} s), {cfg.agents} real agents, one framework launching "
        f"{cfg.task_seconds:g} s tasks; " + fault
    )


def summary(cfg: FailoverConfig, entry: dict, verdict: Verdict, targets: list[dict]) -> str:
    """summary.md: the set-up, the figures per milestone, the task counts and the targets."""
    title = (
        "SIGSTOP of the leading master across an election"
        if cfg.fault == "pause"
        else "SIGKILL of the leading master"
    )
    return "\n".join(
        [
            "# failover: " + title,
            "",
            _setting(cfg, len(verdict.samples)),
            "",
            stats_table(
                [(m.replace("_", " "), verdict.stats[m]) for m in verdict.metrics], unit="s"
            ),
            "",
            f"Tasks launched {entry['tasks_launched']}, finished "
            f"{entry['tasks_finished']}, lost {len(verdict.lost)}, run twice "
            f"{len(verdict.ran_twice)}; launches dropped by a dying master and relaunched: "
            f"{entry['launches_dropped_by_a_dying_master']}; framework kept its id: "
            f"{verdict.kept_its_id}.",
            "",
            targets_md(targets),
            "",
        ]
    )


def write(results: Results, cfg: FailoverConfig, run: FailoverRun, verdict: Verdict) -> None:
    """Writes results.json, samples.csv, failover.png and summary.md into results.out."""
    entry = run_entry(cfg, run, verdict)
    results.add_run(entry)
    results.add_samples(verdict.samples)
    record(results, verdict.checks)
    plots = _plot(results.out, verdict.samples)
    results.write(summary(cfg, entry, verdict, results.data["targets"]), plots)


def _plot(out: Path, samples: list[dict]) -> list[str]:
    try:
        from agora.experiments import plots
    except ImportError:  # matplotlib is the [experiments] extra
        return []
    kills = [s["kill"] for s in samples]
    series = [(m.replace("_", " "), kills, [s[m] for s in samples]) for m in METRICS[:5]]
    return [
        plots.lines(
            out / "failover.png",
            "SIGKILL of the leader -> back (seconds)",
            "kill",
            "seconds after the kill",
            series,
            hline=(2.0, "target p50 2 s"),
        )
    ]
