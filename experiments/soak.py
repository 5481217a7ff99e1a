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
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil

from agora.common.rpc import open_channel
from agora.experiments import soak_checks, soak_report
from agora.experiments.processes import Daemon, agora_argv, free_ports, python_m, scratch_dir
from agora.experiments.results import Progress, Results
from agora.experiments.soak_checks import VISITOR_TASKS, Kill, SoakRun
from agora.v1 import (
    batch_pb2,
    batch_pb2_grpc,
    common_pb2,
    services_pb2,
    services_pb2_grpc,
)

_BATCH_TERMINAL = {batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED}
APP_ID = "soak-web"  # the service app kept running through the soak


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


async def _start(cluster: Cluster, cfg: SoakConfig) -> tuple[Any, Any]:
    """Starts every daemon and puts the service app; the batch and services stubs."""
    await cluster.start("master")
    for i in range(cfg.agents):
        await cluster.start(f"agent-{i}")
    await cluster.start("batch")
    await cluster.start("services")
    batch = batch_pb2_grpc.BatchStub(open_channel(cluster.batch_address))
    services = services_pb2_grpc.ServicesStub(open_channel(cluster.services_address))
    app = services_pb2.App(
        id=APP_ID,
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
    return batch, services


async def _inject_faults(
    cluster: Cluster,
    cfg: SoakConfig,
    clock: Callable[[], float],
    kills: list[Kill],
    stop: asyncio.Event,
) -> None:
    """Kills and restarts at random, one outage at a time, while the load goes on, until
    `stop` is set (an outage under way ends first)."""
    rng = random.Random(cfg.seed)
    while True:
        with contextlib.suppress(TimeoutError):
            delay = rng.expovariate(1 / cfg.kill_every)
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return
        victim = rng.choice(cluster.killable)
        kills.append(Kill(round(clock(), 2), victim))
        await cluster.kill(victim)
        await asyncio.sleep(cfg.restart_after)
        await cluster.start(victim)


class Load:
    """The steady load, each part on its own period: a batch job, a visiting framework, and a
    sample of the daemons."""

    def __init__(self, cfg: SoakConfig, cluster: Cluster, markers: Path) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.markers = markers
        self.batch: Any = None  # the batch daemon's stub, once it runs
        self.jobs_submitted = 0
        self.jobs_refused = 0
        self.visitors: list[Daemon] = []
        self.visitor_results: list[Path] = []
        self.samples: list[dict] = []
        self._next_job = self._next_visitor = self._next_sample = 0.0

    async def step(self, t: float) -> None:
        """Whatever is due at `t` seconds into the run."""
        if t >= self._next_sample:
            await self.sample(t)
            self._next_sample = t + self.cfg.sample_every
        if t >= self._next_job:
            n = self.jobs_submitted + self.jobs_refused
            if await _submit_job(self.batch, self.cfg, self.markers, n):
                self.jobs_submitted += 1
            else:
                self.jobs_refused += 1
            self._next_job = t + self.cfg.job_every
        if t >= self._next_visitor:
            await self._visit()
            self._next_visitor = t + self.cfg.visitor_every

    async def sample(self, t: float) -> None:
        self.samples += await asyncio.to_thread(_sample, self.cluster, t)

    async def _visit(self) -> None:
        """Starts a framework that runs a few tasks and tears itself down."""
        name = f"visitor-{len(self.visitors)}"
        result = self.cluster.scratch / f"{name}.json"
        argv = python_m(
            "agora.experiments.soak_visitor",
            "--master", self.cluster.master_address, "--name", name,
            "--tasks", str(VISITOR_TASKS), "--markers", str(self.markers),
            "--result", str(result),
        )  # fmt: skip
        self.visitors.append(await Daemon(name, argv, self.cluster.logs).start(ready=None))
        self.visitor_results.append(result)

    async def drain(self, seconds: float) -> list[batch_pb2.Job]:
        """Waits up to `seconds` for every job and visitor to finish; the last job listing."""
        deadline = time.monotonic() + seconds
        jobs: list[batch_pb2.Job] = []
        while time.monotonic() < deadline:
            listed = await _list_jobs(self.batch)
            if listed is not None:
                jobs = listed
                if all(j.state in _BATCH_TERMINAL for j in jobs) and not any(
                    v.alive() for v in self.visitors
                ):
                    break
            await asyncio.sleep(1)
        return jobs


def _read_result(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


async def measure(cfg: SoakConfig, scratch: Path, progress: Progress) -> SoakRun:
    """Runs the cluster in `scratch` under load and faults for cfg.minutes, drains it and
    stops it; what it measured."""
    markers = scratch / "markers"
    markers.mkdir()
    cluster = Cluster(cfg, scratch)
    measured = SoakRun(killable=cluster.killable)
    load = Load(cfg, cluster, markers)
    started = time.monotonic()
    now = lambda: time.monotonic() - started  # noqa: E731
    stop_killing = asyncio.Event()
    injector: asyncio.Task | None = None
    try:
        load.batch, services = await _start(cluster, cfg)
        injector = asyncio.create_task(
            _inject_faults(cluster, cfg, now, measured.kills, stop_killing), name="fault-injector"
        )
        while (t := now()) < cfg.minutes * 60:
            await load.step(t)
            if injector.done():
                injector.result()  # a daemon that would not start again ends the run
            progress.show(
                f"{t / 60:5.1f}/{cfg.minutes:g} min: {len(measured.kills)} kills, "
                f"{load.jobs_submitted} jobs, {len(load.visitors)} visitors"
            )
            await asyncio.sleep(0.2)
        stop_killing.set()
        await injector  # lets the last outage end: every daemon is up for the drain
        # Drain: no new work; every job and visitor gets --drain seconds to finish.
        progress.show("draining: waiting for every job and visitor to finish", force=True)
        measured.jobs = await load.drain(cfg.drain)
        app = await services.GetApp(services_pb2.GetAppRequest(id=APP_ID), timeout=10)
        measured.app_healthy = sum(1 for t in app.tasks if t.healthy)
        await load.sample(now())
    finally:
        if injector is not None and not injector.done():
            injector.cancel()
            await asyncio.gather(injector, return_exceptions=True)
        for visitor in load.visitors:
            await visitor.stop()
        await cluster.stop()
    measured.samples = load.samples
    measured.jobs_submitted = load.jobs_submitted
    measured.jobs_refused = load.jobs_refused
    measured.visitors = [(p.stem, _read_result(p)) for p in load.visitor_results]
    measured.markers = sorted(p.name for p in markers.iterdir())
    return measured


async def run(cfg: SoakConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    """The run (measure), its checks (soak_checks) and its report (soak_report)."""
    progress = Progress("soak", quiet)
    results = Results("soak", out, asdict(cfg), command)
    scratch = scratch_dir("agora-soak-")
    measured = await measure(cfg, scratch, progress)
    soak_report.write(results, cfg, measured, soak_checks.judge(cfg, measured))
    if not os.environ.get("AGORA_KEEP_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        progress.done(f"logs and work dirs kept in {scratch}")
    return results
