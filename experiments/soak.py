"""agora experiment soak: a local cluster under steady mixed load while a fault injector kills
(SIGKILL) and restarts the master, the agents and the batch daemon at random.

Processes: a master (SQLite registry), real agents running real processes, the batch and the
services daemons, all `agora` commands. Load, all through the public APIs:

- a batch job every --job-every seconds (--job-instances instances of a --task-seconds sleep);
- a service app (--app-instances instances, with a command health check) kept running;
- a framework that comes and goes (experiments/soak_visitor.py): every --visitor-every seconds
  a new one subscribes, runs a few tasks and tears itself down.

Every task leaves start and end marker files named after its task (job, instance, attempt) and
its process id. Faults: after an exponential wait (mean --kill-every seconds) one of the master,
an agent or the batch daemon gets SIGKILL and is started again --restart-after seconds later,
as a supervisor would. At the end the load stops, every job and visitor is given --drain
seconds to finish, and the run reports:

- lost: batch instances that did not succeed, and visitor tasks that never finished;
- run twice: an instance with more than one attempt that ran to its end, or one attempt
  started by two processes;
- updates lost: an attempt whose command ran to its end while the batch framework never
  heard that it finished;
- sampled every --sample-every seconds: RSS and open descriptors of each daemon, and the disk
  used by the agents' sandboxes (agents run with --gc-delay, like an operator sizing Mesos'
  --gc_delay to the disk). Slopes are fitted per process lifetime (a killed daemon starts
  afresh), after --warmup seconds of it, in MB (or descriptors) per hour.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import psutil

from agora.common.rpc import open_channel
from agora.experiments import plots
from agora.experiments.failover import free_ports
from agora.experiments.processes import Daemon, agora_argv, python_m
from agora.experiments.results import Progress, Results, targets_md
from agora.v1 import (
    batch_pb2,
    batch_pb2_grpc,
    common_pb2,
    services_pb2,
    services_pb2_grpc,
)

_BATCH_TERMINAL = {batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED}


@dataclass
class SoakConfig:
    minutes: float = 30.0
    agents: int = 3
    kill_every: float = 60.0  # mean seconds between kills
    restart_after: float = 2.0
    job_every: float = 5.0
    job_instances: int = 4
    task_seconds: float = 2.0
    app_instances: int = 2
    visitor_every: float = 30.0
    sample_every: float = 5.0
    warmup: float = 60.0  # of each process lifetime, before its slope is fitted
    gc_delay: float = 60.0  # the agents' --gc-delay
    drain: float = 180.0
    seed: int = 1
    # History the daemons keep (master: ended tasks per framework and torn-down frameworks;
    # agents: completed runs; batch: finished jobs); None: their defaults.
    history: int | None = None


@dataclass
class Kill:
    at: float  # seconds since the start
    victim: str


class Cluster:
    """The daemons, each restartable with the same arguments (ports, state and work dirs)."""

    def __init__(self, cfg: SoakConfig, scratch: Path) -> None:
        self.cfg = cfg
        self.scratch = scratch
        self.logs = scratch / "logs"
        master_port, batch_port, services_port = free_ports(3)
        self.master_address = f"127.0.0.1:{master_port}"
        self.batch_address = f"127.0.0.1:{batch_port}"
        self.services_address = f"127.0.0.1:{services_port}"
        self.argv: dict[str, list[str]] = {
            "master": agora_argv(
                "master", "--port", str(master_port), "--state-dir", str(scratch / "master"),
                "--heartbeat-interval", "1", "--log-level", "info",
            ),
            "batch": agora_argv(
                "batch", "--master", self.master_address, "--port", str(batch_port),
                "--state-dir", str(scratch / "batch"), "--retry-backoff", "0.5",
                "--log-level", "info",
            ),
            "services": agora_argv(
                "services", "--master", self.master_address, "--port", str(services_port),
                "--state-dir", str(scratch / "services"), "--log-level", "info",
            ),
        }  # fmt: skip
        for i in range(cfg.agents):
            self.argv[f"agent-{i}"] = agora_argv(
                "agent", "--master", self.master_address, "--port", "0",
                "--work-dir", str(scratch / f"agent-{i}"), "--hostname", f"soak-{i}",
                "--resources", "cpus:4;mem:4096;disk:20000",
                "--gc-delay", str(cfg.gc_delay), "--log-level", "info",
            )  # fmt: skip
        if cfg.history is not None:
            n = str(cfg.history)
            self.argv["master"] += [
                "--max-completed-tasks-per-framework", n, "--max-removed-frameworks", n,
            ]  # fmt: skip
            self.argv["batch"] += ["--max-finished-jobs", n]
            for i in range(cfg.agents):
                self.argv[f"agent-{i}"] += ["--max-completed-tasks", n]
        self.daemons: dict[str, Daemon] = {}

    @property
    def killable(self) -> list[str]:
        return ["master", "batch", *(f"agent-{i}" for i in range(self.cfg.agents))]

    async def start(self, name: str) -> None:
        self.daemons[name] = await Daemon(name, self.argv[name], self.logs).start(timeout=60)

    async def kill(self, name: str) -> None:
        daemon = self.daemons[name]
        if daemon.proc is not None and daemon.proc.returncode is None:
            daemon.proc.send_signal(signal.SIGKILL)
            await daemon.proc.wait()
        await daemon.stop()

    async def stop(self) -> None:
        for name in [n for n in self.daemons if n.startswith("agent")]:
            # SIGUSR1: the agent kills its tasks before it exits (none outlive the run).
            daemon = self.daemons[name]
            if daemon.alive():
                assert daemon.proc is not None  # alive() checked it
                with contextlib.suppress(ProcessLookupError):
                    daemon.proc.send_signal(signal.SIGUSR1)
        for daemon in reversed(list(self.daemons.values())):
            await daemon.stop()


def _shell(markers: Path, seconds: float) -> str:
    mark = f"{markers}/batch.$AGORA_JOB_ID.$AGORA_INSTANCE.$AGORA_ATTEMPT.$$"
    return f"touch {mark}.start; sleep {seconds}; touch {mark}.end"


def _sandbox_bytes(scratch: Path, agents: int) -> int:
    total = 0
    for i in range(agents):
        for root, dirs, files in os.walk(scratch / f"agent-{i}" / "sandboxes"):
            for name in [*dirs, *files]:  # a directory takes its block too
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def _sample(cluster: Cluster, at: float) -> list[dict]:
    rows = []
    for name, daemon in cluster.daemons.items():
        if not daemon.alive():
            continue
        try:
            proc = psutil.Process(daemon.pid)
            rss = proc.memory_info().rss / (1024 * 1024)
            fds = proc.num_fds()
        except psutil.Error:
            continue
        rows.append(
            {"at": round(at, 2), "daemon": name, "pid": daemon.pid, "rss_mb": rss, "fds": fds}
        )
    disk = _sandbox_bytes(cluster.scratch, cluster.cfg.agents) / (1024 * 1024)
    rows.append({"at": round(at, 2), "daemon": "sandboxes", "pid": 0, "disk_mb": disk})
    return rows


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


def judge_batch(jobs: list[batch_pb2.Job], markers: Path) -> dict:
    """Lost, run-twice and lost-update counts from the batch framework's view and the markers."""
    started: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    ended: dict[tuple[str, str], set[str]] = defaultdict(set)  # (job, instance) -> attempts
    for path in markers.glob("batch.*"):
        parts = path.name.split(".")
        if len(parts) != 6:
            continue
        _, job, instance, attempt, pid, what = parts
        if what == "start":
            started[(job, instance, attempt)].add(pid)
        elif what == "end":
            ended[(job, instance)].add(attempt)
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


def judge_visitors(results: list[Path], markers: Path, expected: int) -> dict:
    finished, unfinished, failed, relaunched = 0, [], [], 0
    for path in results:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            unfinished.append(f"{path.stem}: no result")
            continue
        finished += len(data["finished"])
        relaunched += len(data["relaunched"])
        unfinished += data["unfinished"]
        failed += [f"{t} {s}" for t, s in data["failed"].items()]
    ends: dict[str, set[str]] = defaultdict(set)
    for path in markers.glob("visitor.*.end"):
        task_id, pid = path.name.split(".")[1:3]
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


async def _submit_job(stub, cfg: SoakConfig, markers: Path, n: int) -> bool:
    spec = batch_pb2.JobSpec(
        name=f"soak-{n}",
        instances=cfg.job_instances,
        max_retries=10,
        task=batch_pb2.TaskTemplate(
            command=common_pb2.CommandInfo(shell=_shell(markers, cfg.task_seconds)),
            cpus=0.1,
            mem=32,
        ),
    )
    try:
        await stub.SubmitJob(batch_pb2.SubmitJobRequest(spec=spec), timeout=5)
        return True
    except grpc.aio.AioRpcError:
        return False  # the batch daemon is down: this job is not submitted (not lost)


async def _list_jobs(stub) -> list[batch_pb2.Job] | None:
    try:
        reply = await stub.ListJobs(batch_pb2.ListJobsRequest(include_instances=True), timeout=10)
    except grpc.aio.AioRpcError:
        return None
    return list(reply.jobs)


async def run(cfg: SoakConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    progress = Progress("soak", quiet)
    results = Results("soak", out, asdict(cfg), command)
    scratch = Path(tempfile.mkdtemp(prefix="agora-soak-"))
    markers = scratch / "markers"
    markers.mkdir()
    rng = random.Random(cfg.seed)
    cluster = Cluster(cfg, scratch)
    kills: list[Kill] = []
    samples: list[dict] = []
    visitor_results: list[Path] = []
    visitors: list[Daemon] = []
    started = time.monotonic()
    duration = cfg.minutes * 60
    ok = False
    injector: asyncio.Task | None = None
    try:
        await cluster.start("master")
        for i in range(cfg.agents):
            await cluster.start(f"agent-{i}")
        await cluster.start("batch")
        await cluster.start("services")
        batch = batch_pb2_grpc.BatchStub(open_channel(cluster.batch_address))
        services = services_pb2_grpc.ServicesStub(open_channel(cluster.services_address))
        app = services_pb2.App(
            id="soak-web",
            cmd="sleep 100000",
            instances=cfg.app_instances,
            cpus=0.1,
            mem=32,
            health_check=common_pb2.HealthCheck(
                command=common_pb2.CommandInfo(shell="true"),
                interval_seconds=2,
                grace_period_seconds=10,
            ),
        )
        await services.PutApp(services_pb2.PutAppRequest(app=app), timeout=10)

        now = lambda: time.monotonic() - started  # noqa: E731
        stop_killing = asyncio.Event()

        async def inject_faults() -> None:
            """Kills and restarts at random, one outage at a time, while the load goes on."""
            while True:
                with contextlib.suppress(TimeoutError):
                    delay = rng.expovariate(1 / cfg.kill_every)
                    await asyncio.wait_for(stop_killing.wait(), delay)
                if stop_killing.is_set():
                    return
                victim = rng.choice(cluster.killable)
                kills.append(Kill(round(now(), 2), victim))
                await cluster.kill(victim)
                await asyncio.sleep(cfg.restart_after)
                await cluster.start(victim)

        injector = asyncio.create_task(inject_faults(), name="fault-injector")
        next_job = next_visitor = next_sample = 0.0
        jobs_submitted = jobs_refused = 0
        while (t := now()) < duration:
            if t >= next_sample:
                samples += await asyncio.to_thread(_sample, cluster, t)
                next_sample = t + cfg.sample_every
            if t >= next_job:
                if await _submit_job(batch, cfg, markers, jobs_submitted + jobs_refused):
                    jobs_submitted += 1
                else:
                    jobs_refused += 1
                next_job = t + cfg.job_every
            if t >= next_visitor:
                name = f"visitor-{len(visitors)}"
                result = scratch / f"{name}.json"
                argv = python_m(
                    "agora.experiments.soak_visitor",
                    "--master", cluster.master_address, "--name", name, "--tasks", "3",
                    "--markers", str(markers), "--result", str(result),
                )  # fmt: skip
                visitors.append(await Daemon(name, argv, cluster.logs).start(ready=None))
                visitor_results.append(result)
                next_visitor = t + cfg.visitor_every
            if injector.done():
                injector.result()  # a daemon that would not start again ends the run
            progress.show(
                f"{t / 60:5.1f}/{cfg.minutes:g} min: {len(kills)} kills, "
                f"{jobs_submitted} jobs, {len(visitors)} visitors"
            )
            await asyncio.sleep(0.2)

        stop_killing.set()
        await injector  # lets the last outage end: every daemon is up for the drain
        # Drain: no new work; every job and visitor gets --drain seconds to finish.
        progress.show("draining: waiting for every job and visitor to finish", force=True)
        deadline = time.monotonic() + cfg.drain
        jobs: list[batch_pb2.Job] = []
        while time.monotonic() < deadline:
            listed = await _list_jobs(batch)
            if listed is not None:
                jobs = listed
                if all(j.state in _BATCH_TERMINAL for j in jobs) and not any(
                    v.alive() for v in visitors
                ):
                    break
            await asyncio.sleep(1)
        app_status = await services.GetApp(services_pb2.GetAppRequest(id="soak-web"), timeout=10)
        healthy = sum(1 for t in app_status.tasks if t.healthy)
        samples += await asyncio.to_thread(_sample, cluster, now())
        ok = True
    finally:
        if injector is not None and not injector.done():
            injector.cancel()
            await asyncio.gather(injector, return_exceptions=True)
        for visitor in visitors:
            await visitor.stop()
        await cluster.stop()

    batch_verdict = judge_batch(jobs, markers)
    visitor_verdict = judge_visitors(visitor_results, markers, 3 * len(visitors))
    rss = segment_slopes(samples, "rss_mb", cfg.warmup)
    fds = segment_slopes(samples, "fds", cfg.warmup)
    disk_points = [(r["at"], r["disk_mb"]) for r in samples if "disk_mb" in r]
    disk_slope = slope_per_hour([p for p in disk_points if p[0] >= cfg.warmup])
    summary = {
        "minutes": cfg.minutes,
        "kills": [asdict(k) for k in kills],
        "kills_by_victim": {v: sum(1 for k in kills if k.victim == v) for v in cluster.killable},
        "jobs_submitted": jobs_submitted,
        "jobs_refused_while_batch_down": jobs_refused,
        "batch": batch_verdict,
        "visitors": visitor_verdict,
        "app_healthy_at_end": healthy,
        "app_instances": cfg.app_instances,
        "rss_slope_mb_per_hour": rss,
        "fds_slope_per_hour": fds,
        "sandbox_disk_slope_mb_per_hour": None if disk_slope is None else round(disk_slope, 2),
    }
    results.add_run(summary)
    results.add_samples(samples)
    lost = len(batch_verdict["lost"]) + len(visitor_verdict["lost"])
    twice = len(batch_verdict["run_twice"]) + len(visitor_verdict["run_twice"])
    results.target("tasks lost", lost, 0, "tasks")
    results.target("tasks run twice", twice, 0, "tasks")
    results.target("status updates lost", len(batch_verdict["updates_lost"]), 0, "updates")
    results.target("kills", len(kills), 20 * cfg.minutes / 30, "kills", at_most=False)
    results.target(
        "app instances healthy at the end", healthy, cfg.app_instances, "", at_most=False
    )
    for daemon in ("master", "agent-0", "batch"):
        median = rss.get(daemon, {}).get("median")
        results.target(f"{daemon} RSS slope (median lifetime)", median, 20.0, "MB/hour")
    names = _plots(out, samples, kills)
    results.write(_summary(cfg, results, summary), names)
    if ok and not os.environ.get("AGORA_KEEP_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        progress.done(f"logs and work dirs kept in {scratch}")
    return results


def _plots(out: Path, samples: list[dict], kills: list[Kill]) -> list[str]:
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


def _summary(cfg: SoakConfig, results: Results, s: dict) -> str:
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
