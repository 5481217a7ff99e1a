"""The soak's report: results.json's run, samples.csv, the growth plots and summary.md."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from agora.experiments import plots
from agora.experiments.checks import record
from agora.experiments.results import Results, targets_md
from agora.experiments.soak_checks import SoakRun, Verdict

if TYPE_CHECKING:
    from agora.experiments.soak import SoakConfig

__all__ = ["run_entry", "summary", "write"]


def run_entry(cfg: SoakConfig, run: SoakRun, verdict: Verdict) -> dict:
    """The run as results.json records it."""
    return {
        "minutes": cfg.minutes,
        "kills": [asdict(k) for k in run.kills],
        "kills_by_victim": {v: sum(1 for k in run.kills if k.victim == v) for v in run.killable},
        "jobs_submitted": run.jobs_submitted,
        "jobs_refused_while_batch_down": run.jobs_refused,
        "batch": verdict.batch,
        "visitors": verdict.visitors,
        "app_healthy_at_end": run.app_healthy,
        "app_instances": cfg.app_instances,
        "rss_slope_mb_per_hour": verdict.rss,
        "fds_slope_per_hour": verdict.fds,
        "sandbox_disk_slope_mb_per_hour": (
            None if verdict.disk_slope is None else round(verdict.disk_slope, 2)
        ),
    }


def write(results: Results, cfg: SoakConfig, run: SoakRun, verdict: Verdict) -> None:
    """Writes results.json, samples.csv, the soak_*.png plots and summary.md."""
    entry = run_entry(cfg, run, verdict)
    results.add_run(entry)
    results.add_samples(run.samples)
    record(results, verdict.checks)
    names = _plots(results.out, run.samples)
    results.write(summary(cfg, results, entry), names)


def _plots(out: Path, samples: list[dict]) -> list[str]:
    names = []
    for key, title, unit, filename in (
        ("rss_mb", "RSS of each daemon (a drop is a kill and restart)", "MB", "soak_rss.png"),
        ("fds", "Open file descriptors of each daemon", "descriptors", "soak_fds.png"),
        ("disk_mb", "Disk used by the agents' sandboxes", "MB", "soak_disk.png"),
    ):
        by_daemon: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in samples:
            if key in row:
                by_daemon[row["daemon"]].append((row["at"] / 60, row[key]))
        series = [
            (daemon, [p[0] for p in points], [p[1] for p in points])
            for daemon, points in sorted(by_daemon.items())
        ]
        if series:
            names.append(
                plots.lines(
                    out / filename, title, "minutes", unit, series, styles=["-"] * len(series)
                )
            )
    return names


def summary(cfg: SoakConfig, results: Results, s: dict) -> str:
    """summary.md: the kills, the targets, the work done and lost, and the growth slopes."""
    b, v = s["batch"], s["visitors"]

    def listing(items: list[str]) -> str:
        return "none" if not items else "; ".join(items[:10]) + (" ..." if len(items) > 10 else "")

    rss_rows = "\n".join(
        f"| {d} | {e['median']} | {e['max']} | {s['fds_slope_per_hour'].get(d, {}).get('median')} |"
        for d, e in sorted(s["rss_slope_mb_per_hour"].items())
    )
    return f"""# soak

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

{cfg.minutes:g} minutes; {len(s["kills"])} kills (SIGKILL, restarted {cfg.restart_after:g} s later):
{", ".join(f"{k} {n}" for k, n in s["kills_by_victim"].items())}.

## Targets

{targets_md(results.data["targets"])}

## Work

- batch: {b["jobs"]} jobs, {b["instances"]} instances ({s["jobs_refused_while_batch_down"]}
  submissions refused while the batch daemon was down); lost: {listing(b["lost"])}; run twice:
  {listing(b["run_twice"])}; updates lost: {listing(b["updates_lost"])}.
- visitors: {v["visitors"]} frameworks came and went, {v["tasks_finished"]} of
  {v["tasks_expected"]} tasks finished ({v["relaunched"]} relaunched after LOST/UNKNOWN); lost:
  {listing(v["lost"])}; run twice: {listing(v["run_twice"])}.
- service app: {s["app_healthy_at_end"]} of {s["app_instances"]} instances healthy at the end.

## Growth after warm-up (per process lifetime, {cfg.warmup:g} s warm-up each)

| daemon | RSS slope median (MB/h) | RSS slope max (MB/h) | descriptors slope median (/h) |
|---|---:|---:|---:|
{rss_rows}

Sandboxes on disk: {s["sandbox_disk_slope_mb_per_hour"]} MB/h after {cfg.warmup:g} s (agents run
with --gc-delay {cfg.gc_delay:g}).
"""
