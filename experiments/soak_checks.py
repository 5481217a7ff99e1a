"""The soak's checks: pure functions over what a run measured (SoakRun).

The run (soak.py) records the kills, the daemons' samples, the batch framework's jobs, each
visitor's result and the names of the marker files the tasks left; these functions judge
them (lost, run twice, updates lost, growth slopes) and soak_report.py writes the verdict.
Nothing here starts a process or reads a file.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from agora.experiments.checks import Check
from agora.v1 import batch_pb2, common_pb2

if TYPE_CHECKING:
    from agora.experiments.soak import SoakConfig

__all__ = [
    "VISITOR_TASKS",
    "Kill",
    "SoakRun",
    "Verdict",
    "checks",
    "judge",
    "judge_batch",
    "judge_visitors",
    "segment_slopes",
    "slope_per_hour",
]

VISITOR_TASKS = 3  # tasks each visiting framework runs (its --tasks)


@dataclass
class Kill:
    at: float  # seconds since the start
    victim: str


@dataclass
class SoakRun:
    """What a soak measured, before any judgement."""

    killable: list[str]  # the daemons the injector chose from
    kills: list[Kill] = field(default_factory=list)
    # Every --sample-every seconds, per live daemon: {at, daemon, pid, rss_mb, fds}; and
    # {at, daemon: "sandboxes", pid: 0, disk_mb} for the agents' sandboxes.
    samples: list[dict] = field(default_factory=list)
    jobs_submitted: int = 0
    jobs_refused: int = 0  # submissions refused while the batch daemon was down
    jobs: list[batch_pb2.Job] = field(default_factory=list)  # the last listing, with instances
    # Each visitor's name and its --result file's JSON (None: it wrote none).
    visitors: list[tuple[str, dict | None]] = field(default_factory=list)
    markers: list[str] = field(default_factory=list)  # the marker files' names
    app_healthy: int = 0  # instances of the service app healthy at the end


@dataclass
class Verdict:
    batch: dict  # judge_batch
    visitors: dict  # judge_visitors
    rss: dict[str, dict]  # segment_slopes of rss_mb
    fds: dict[str, dict]  # segment_slopes of fds
    disk_slope: float | None  # MB/hour of the sandboxes after the warm-up
    checks: list[Check]


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per hour; None for fewer than 3."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx * 3600


def segment_slopes(samples: list[dict], key: str, warmup: float) -> dict[str, dict]:
    """Per daemon: the slope of `key` over each process lifetime (after `warmup` seconds of it),
    and the median and largest of those slopes, per hour."""
    lifetimes: dict[tuple[str, int], list[tuple[float, float]]] = defaultdict(list)
    for row in samples:
        if key in row:
            lifetimes[(row["daemon"], row["pid"])].append((row["at"], row[key]))
    out: dict[str, dict] = {}
    for (daemon, _pid), points in lifetimes.items():
        start = points[0][0]
        slope = slope_per_hour([p for p in points if p[0] - start >= warmup])
        entry = out.setdefault(daemon, {"slopes": []})
        if slope is not None:
            entry["slopes"].append(round(slope, 2))
    for entry in out.values():
        slopes = sorted(entry["slopes"])
        entry["median"] = slopes[len(slopes) // 2] if slopes else None
        entry["max"] = slopes[-1] if slopes else None
    return out


def _batch_markers(
    markers: list[str],
) -> tuple[dict[tuple[str, str, str], set[str]], dict[tuple[str, str], set[str]]]:
    """From `batch.JOB.INSTANCE.ATTEMPT.PID.start|end`: the processes that started each
    attempt, and the attempts of each instance that ran to their end."""
    started: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    ended: dict[tuple[str, str], set[str]] = defaultdict(set)  # (job, instance) -> attempts
    for name in markers:
        parts = name.split(".")
        if parts[0] != "batch" or len(parts) != 6:
            continue
        _, job, instance, attempt, pid, what = parts
        if what == "start":
            started[(job, instance, attempt)].add(pid)
        elif what == "end":
            ended[(job, instance)].add(attempt)
    return started, ended


def judge_batch(jobs: list[batch_pb2.Job], markers: list[str]) -> dict:
    """Lost, run-twice and lost-update counts from the batch framework's view and the names of
    the marker files."""
    started, ended = _batch_markers(markers)
    lost, twice, updates_lost, instances = [], [], [], 0
    for job in jobs:
        for inst in job.instances:
            instances += 1
            key = (job.job_id, str(inst.index))
            if inst.state != batch_pb2.INSTANCE_SUCCEEDED:
                lost.append(f"{job.job_id}/{inst.index} {batch_pb2.InstanceState.Name(inst.state)}")
            if len(ended.get(key, ())) > 1:
                twice.append(
                    f"{job.job_id}/{inst.index} ran to its end in attempts {sorted(ended[key])}"
                )
            for attempt in inst.attempts:
                if len(started.get((*key, str(attempt.attempt)), ())) > 1:
                    twice.append(f"{attempt.task_id} started by two processes")
                if (
                    str(attempt.attempt) in ended.get(key, ())
                    and attempt.state != common_pb2.TASK_FINISHED
                ):
                    updates_lost.append(
                        f"{attempt.task_id} ran to its end but is "
                        f"{common_pb2.TaskState.Name(attempt.state)}"
                    )
    return {
        "jobs": len(jobs),
        "instances": instances,
        "lost": lost,
        "run_twice": twice,
        "updates_lost": updates_lost,
    }


def judge_visitors(
    results: list[tuple[str, dict | None]], markers: list[str], expected: int
) -> dict:
    """Finished, lost and run-twice tasks of the visiting frameworks, from their results and
    the `visitor.TASK.PID.end` markers."""
    finished, unfinished, failed, relaunched = 0, [], [], 0
    for name, data in results:
        if data is None:
            unfinished.append(f"{name}: no result")
            continue
        finished += len(data["finished"])
        relaunched += len(data["relaunched"])
        unfinished += data["unfinished"]
        failed += [f"{t} {s}" for t, s in data["failed"].items()]
    ends: dict[str, set[str]] = defaultdict(set)
    for marker in markers:
        if fnmatchcase(marker, "visitor.*.end"):
            task_id, pid = marker.split(".")[1:3]
            ends[task_id].add(pid)
    twice = [t for t, pids in ends.items() if len(pids) > 1]
    return {
        "visitors": len(results),
        "tasks_finished": finished,
        "tasks_expected": expected,
        "relaunched": relaunched,
        "lost": unfinished + failed,
        "run_twice": twice,
    }


def checks(cfg: SoakConfig, run: SoakRun, batch: dict, visitors: dict, rss: dict) -> list[Check]:
    """The targets, in the order results.json lists them."""
    lost = len(batch["lost"]) + len(visitors["lost"])
    twice = len(batch["run_twice"]) + len(visitors["run_twice"])
    out = [
        Check("tasks lost", lost, 0, "tasks"),
        Check("tasks run twice", twice, 0, "tasks"),
        Check("status updates lost", len(batch["updates_lost"]), 0, "updates"),
        # At least 20 kills per 30 minutes of soak.
        Check("kills", len(run.kills), 20 * cfg.minutes / 30, "kills", at_most=False),
        Check(
            "app instances healthy at the end",
            run.app_healthy,
            cfg.app_instances,
            "",
            at_most=False,
        ),
    ]
    for daemon in ("master", "agent-0", "batch"):
        median = rss.get(daemon, {}).get("median")
        out.append(Check(f"{daemon} RSS slope (median lifetime)", median, 20.0, "MB/hour"))
    return out


def judge(cfg: SoakConfig, run: SoakRun) -> Verdict:
    batch = judge_batch(run.jobs, run.markers)
    visitors = judge_visitors(run.visitors, run.markers, VISITOR_TASKS * len(run.visitors))
    rss = segment_slopes(run.samples, "rss_mb", cfg.warmup)
    disk_points = [(r["at"], r["disk_mb"]) for r in run.samples if "disk_mb" in r]
    return Verdict(
        batch=batch,
        visitors=visitors,
        rss=rss,
        fds=segment_slopes(run.samples, "fds", cfg.warmup),
        disk_slope=slope_per_hour([p for p in disk_points if p[0] >= cfg.warmup]),
        checks=checks(cfg, run, batch, visitors, rss),
    )
