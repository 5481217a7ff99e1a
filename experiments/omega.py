"""omega: Omega's experiment (Schwarzkopf et al., EuroSys 2013) on Agora.

A batch framework (many short jobs, decisions of a few milliseconds) and a service framework
(fewer, larger, longer jobs) share a cluster of emulated agents under a real master. The service
framework's per-job decision time is swept; for each decision time and each offer mode
(`agora master --offer-mode pessimistic|optimistic`) a fresh master and fleet run both
frameworks for --seconds after a warm-up, and the run reports each framework's job wait
(submit -> all tasks launched), busyness (share of time spent deciding), conflict rate and
wasted work (omega_stats.py defines each). Then a gang part: a cluster kept busy by small jobs,
one gang job of --gang-tasks tasks submitted, and its wait with and without holds.

The frameworks run in this process on the real SDK (omega_frameworks.py, omega_gang.py); the
plots and summary.md are drawn by omega_report.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import structlog

from agora.common import Resources
from agora.experiments import omega_report
from agora.experiments.omega_frameworks import JobScheduler, JobStream
from agora.experiments.omega_gang import GangFramework
from agora.experiments.omega_stats import Ledger, framework_figures, jobs_per_second
from agora.experiments.processes import MasterOptions, start_fleet, start_master
from agora.experiments.results import Progress, Results, summarize
from agora.frameworks.sdk import Driver, Framework, GrpcSchedulerTransport, framework_info

log = structlog.get_logger(__name__)

MODES = ("pessimistic", "optimistic")


@dataclass
class Workload:
    """One framework's jobs: `load` is the share of the cluster's CPUs its tasks keep busy on
    average (the arrival rate follows from it), `decision` its seconds per job decision."""

    tasks_min: int
    tasks_max: int
    cpus: float
    mem: float
    mean_duration: float
    load: float
    decision: float = 0.005

    def stream(self, name: str, cluster_cpus: float, seed: int, decision: float) -> JobStream:
        mean_tasks = (self.tasks_min + self.tasks_max) / 2
        rate = jobs_per_second(self.load, cluster_cpus, self.cpus, mean_tasks, self.mean_duration)
        return JobStream(
            name,
            rate,
            self.tasks_min,
            self.tasks_max,
            self.cpus,
            self.mem,
            self.mean_duration,
            decision,
            seed,
        )


@dataclass
class OmegaConfig:
    agents: int = 16
    agent_resources: str = "cpus:4;mem:4096"
    decision_times: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0])
    modes: list[str] = field(default_factory=lambda: list(MODES))
    seconds: float = 45.0  # measured window of each sweep run
    warmup: float = 5.0
    # After the window, the window's batch jobs get this long to launch (arrivals go on).
    grace: float = 10.0
    sample_interval: float = 1.0
    batch: Workload = field(
        default_factory=lambda: Workload(1, 4, 0.5, 512.0, 4.0, load=0.3, decision=0.005)
    )
    service: Workload = field(default_factory=lambda: Workload(2, 6, 1.0, 1024.0, 20.0, load=0.4))
    # The gang part: small jobs keep `gang_load` of the CPUs busy; after `gang_warmup` one gang
    # of `gang_tasks` tasks of `gang_task` is submitted; each way gets `gang_timeout` seconds.
    gang_holds: list[bool] = field(default_factory=lambda: [True, False])
    gang_tasks: int = 64
    gang_task: str = "cpus:0.4;mem:400"
    gang_mode: str = "pessimistic"
    gang_warmup: float = 20.0
    gang_timeout: float = 60.0
    small: Workload = field(
        default_factory=lambda: Workload(1, 4, 0.5, 512.0, 5.0, load=0.85, decision=0.005)
    )
    seed: int = 1

    @property
    def cluster_cpus(self) -> float:
        return Resources.parse(self.agent_resources).scalar("cpus") * self.agents


# the cluster and the frameworks of one run ---------------------------------------------------


@contextlib.asynccontextmanager
async def _cluster(cfg: OmegaConfig, mode: str, logs: Path, name: str) -> AsyncIterator[str]:
    master = await start_master(MasterOptions(offer_mode=mode), logs, name=f"master-{name}")
    fleet = None
    try:
        fleet, _ = await start_fleet(
            master.address,
            cfg.agents,
            logs,
            name=f"fleet-{name}",
            resources=cfg.agent_resources,
        )
        yield master.address
    finally:
        if fleet is not None:
            await fleet.stop()
        await master.stop()


class _Running:
    """Frameworks of one run, each with its SDK driver, on a task of this loop."""

    def __init__(self, master: str) -> None:
        self.master = master
        self._all: list[tuple[Framework, Driver, asyncio.Task]] = []

    def start(self, framework: Framework, name: str) -> Driver:
        info = framework_info(name, failover_timeout=5.0)
        driver = Driver(framework, GrpcSchedulerTransport(self.master), info)
        self._all.append((framework, driver, asyncio.create_task(driver.run(), name=name)))
        return driver

    async def wait_subscribed(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(d.connected for _, d, _ in self._all):
            for _, _, run in self._all:
                if run.done() and (error := run.exception()) is not None:
                    raise error
            if time.monotonic() > deadline:
                raise TimeoutError("the omega frameworks did not subscribe in time")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        for framework, driver, run in reversed(self._all):
            close = getattr(framework, "close", None)
            if close is not None:
                await close()
            if driver.connected:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(driver.teardown(), 10)
            driver.stop()
            result = (await asyncio.gather(run, return_exceptions=True))[0]
            if isinstance(result, Exception):
                log.warning("omega framework ended with an error", error=repr(result))


def _state_rows(label: str, at: float, schedulers: list[JobScheduler]) -> list[dict]:
    return [
        {
            "run": label,
            "kind": "state",
            "t": round(at, 3),
            "framework": s.stream.name,
            "busy_cpus": round(s.busy_cpus(), 3),
            "queued_jobs": len(s.queue),
            "offers_held": len(s.pool),
        }
        for s in schedulers
    ]


def _job_rows(label: str, ledger: Ledger, start: float) -> list[dict]:
    return [
        {
            "run": label,
            "kind": "job",
            "t": round(job.submitted - start, 3),
            "framework": job.framework,
            "tasks": job.tasks,
            "job_wait": None if job.launched is None else round(job.launched - job.submitted, 4),
        }
        for job in ledger.jobs.values()
    ]


# the sweep -------------------------------------------------------------------------------


async def _sweep_run(
    cfg: OmegaConfig, mode: str, decision: float, logs: Path, progress: Progress
) -> tuple[dict, list[dict]]:
    label = f"{mode} t={decision:g}"
    cpus = cfg.cluster_cpus
    ledger = Ledger()
    batch = JobScheduler(cfg.batch.stream("batch", cpus, cfg.seed, cfg.batch.decision), ledger)
    service = JobScheduler(cfg.service.stream("service", cpus, cfg.seed + 1, decision), ledger)
    rows: list[dict] = []
    async with _cluster(cfg, mode, logs, f"{mode}-{decision:g}") as address:
        running = _Running(address)
        try:
            running.start(batch, "batch")
            running.start(service, "service")
            await running.wait_subscribed()
            start = time.monotonic()
            window = (start + cfg.warmup, start + cfg.warmup + cfg.seconds)
            while (now := time.monotonic()) < window[1]:
                rows += _state_rows(label, now - start, [batch, service])
                progress.show(
                    f"{label}: {now - start:4.1f}/{cfg.warmup + cfg.seconds:g} s, "
                    f"batch {len(batch.queue)} queued, service {len(service.queue)} queued"
                )
                await asyncio.sleep(cfg.sample_interval)
            # The window's batch jobs may still be launching: give them the grace.
            late = time.monotonic() + cfg.grace
            while time.monotonic() < late and _waiting(ledger, "batch", window):
                await asyncio.sleep(0.1)
            end = time.monotonic()
        finally:
            await running.stop()
    busy: dict[float, float] = {}  # sample time -> CPUs both frameworks' tasks hold
    for r in rows:
        if window[0] - start <= r["t"] <= window[1] - start:
            busy[r["t"]] = busy.get(r["t"], 0.0) + r["busy_cpus"]
    result = {
        "kind": "sweep",
        "label": label,
        "mode": mode,
        "service_decision_seconds": decision,
        "window_seconds": [round(cfg.warmup, 3), round(cfg.warmup + cfg.seconds, 3)],
        "ran_seconds": round(end - start, 3),
        "batch": framework_figures(ledger, "batch", window, end),
        "service": framework_figures(ledger, "service", window, end),
        "mean_cpu_utilization": (round(sum(busy.values()) / len(busy) / cpus, 4) if busy else None),
    }
    return result, rows + _job_rows(label, ledger, start)


def _waiting(ledger: Ledger, framework: str, window: tuple[float, float]) -> bool:
    return any(
        j.framework == framework and j.launched is None and window[0] <= j.submitted <= window[1]
        for j in ledger.jobs.values()
    )


# the gang ----------------------------------------------------------------------------------


async def _gang_run(
    cfg: OmegaConfig, holds: bool, logs: Path, progress: Progress
) -> tuple[dict, list[dict]]:
    label = "gang with holds" if holds else "gang without holds"
    cpus = cfg.cluster_cpus
    shape = Resources.parse(cfg.gang_task)
    ledger = Ledger()
    small = JobScheduler(
        cfg.small.stream("small-jobs", cpus, cfg.seed + 2, cfg.small.decision), ledger
    )
    gang = GangFramework(
        cfg.gang_tasks,
        shape.scalar("cpus"),
        shape.scalar("mem"),
        holds=holds,
        timeout_seconds=cfg.gang_timeout,
    )
    rows: list[dict] = []
    name = "holds" if holds else "no-holds"
    async with _cluster(cfg, cfg.gang_mode, logs, f"gang-{name}") as address:
        running = _Running(address)
        try:
            running.start(small, "small-jobs")
            running.start(gang, "gang")
            await running.wait_subscribed()
            start = time.monotonic()
            while (now := time.monotonic()) < start + cfg.gang_warmup:
                rows += _state_rows(label, now - start, [small])
                progress.show(f"{label}: warming up, {small.busy_cpus():g}/{cpus:g} cpus busy")
                await asyncio.sleep(cfg.sample_interval)
            busy_at_submit = small.busy_cpus()
            await gang.submit()
            submitted = time.monotonic()
            # A moment past the timeout: the master's word that the hold expired can arrive.
            deadline = submitted + cfg.gang_timeout + (2.0 if holds else 0.0)
            while not gang.done.is_set() and (now := time.monotonic()) < deadline:
                rows += _state_rows(label, now - start, [small])
                progress.show(f"{label}: waiting {now - submitted:4.1f}/{cfg.gang_timeout:g} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(gang.done.wait(), cfg.sample_interval)
            end = time.monotonic()
        finally:
            await running.stop()
    outcome = gang.outcome
    wait = outcome.wait
    result = {
        "kind": "gang",
        "label": label,
        "holds": holds,
        "mode": cfg.gang_mode,
        "tasks": cfg.gang_tasks,
        "task": cfg.gang_task,
        "started": wait is not None,
        "wait_seconds": None if wait is None else round(wait, 3),
        "timeout_seconds": cfg.gang_timeout,
        "rounds": outcome.rounds,
        "best_round_tasks": outcome.best_round,
        "hold_state": outcome.hold_state,
        "hold_message": outcome.hold_message,
        "error": outcome.error,
        "busy_cpus_fraction_at_submit": round(busy_at_submit / cpus, 4),
        # What the small jobs waited meanwhile (a hold keeps freed resources from them).
        "small_jobs_while_gang_waits": framework_figures(
            ledger, "small-jobs", (submitted, end), end
        ),
        "small_jobs_before": {
            "job_wait_seconds": summarize(
                j.launched - j.submitted
                for j in ledger.jobs.values()
                if j.launched is not None and start + cfg.gang_warmup / 2 <= j.submitted < submitted
            )
        },
    }
    return result, rows + _job_rows(label, ledger, start)


# the whole run -----------------------------------------------------------------------------


async def run(cfg: OmegaConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    results = Results("omega", out, asdict(cfg), command)
    progress = Progress("omega", quiet)
    logs = out / "logs"
    for decision in cfg.decision_times:
        for mode in cfg.modes:
            result, rows = await _sweep_run(cfg, mode, decision, logs, progress)
            results.add_run(result)
            results.add_samples(rows)
            b = result["batch"]
            progress.show(
                f"{result['label']}: batch wait p50 {b['job_wait_seconds']['p50']} s, "
                f"busy {b['busyness']:.3f}/{result['service']['busyness']:.3f}, "
                f"conflicts {b['conflicts']}/{result['service']['conflicts']}",
                force=True,
            )
    for holds in cfg.gang_holds:
        result, rows = await _gang_run(cfg, holds, logs, progress)
        results.add_run(result)
        results.add_samples(rows)
        progress.show(
            f"{result['label']}: "
            + (
                f"started in {result['wait_seconds']} s"
                if result["started"]
                else f"did not start within {cfg.gang_timeout:g} s {result['error']}"
            ),
            force=True,
        )
    omega_report.targets(cfg, results)
    written = omega_report.draw(cfg, out, results.runs)
    results.write(omega_report.summary(cfg, results), written)
    progress.done(omega_report.one_line(results))
    return results
