"""The simulator against the real thing: one trace through a real master, an emulated fleet
and real SDK frameworks, then through the simulator, and their figures side by side.

Each role's framework here keeps its jobs in the same TraceQueue as the simulator's and plans
with the same batch planner, so the two differ only where the simulator models: message
latency, decision times, and task run times (an emulated agent reports a task RUNNING and
ends it after its duration, on real timers). Utilisation is counted from the RUNNING and
terminal updates the framework receives; a job's wait ends when the Accept launching its last
tasks is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import structlog

from agora.common import Resources
from agora.common.task_states import TERMINAL_STATES
from agora.experiments.processes import MasterOptions, start_fleet, start_master
from agora.experiments.simulate.engine import SimConfig
from agora.experiments.simulate.figures import run_figures
from agora.experiments.simulate.metrics import Recorder
from agora.experiments.simulate.queue import TraceQueue, scalars
from agora.experiments.simulate.run import simulate_once
from agora.experiments.simulate.trace import Job, Trace
from agora.frameworks.batch.refusals import (
    DECLINE_REFUSE_SECONDS,
    IDLE_REFUSE_SECONDS,
    UNFIT_REFUSE_SECONDS,
)
from agora.frameworks.sdk import (
    Driver,
    Framework,
    GrpcSchedulerTransport,
    SchedulerError,
    framework_info,
)
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

__all__ = ["TOLERANCE", "compare", "cross_check", "real_run"]

# How far the simulator may be from the real run and still be said to agree: utilisation in
# points of the cluster's CPUs, and the median job wait within this many seconds or this
# share of the real one, whichever is larger.
TOLERANCE = {"utilisation_points": 0.05, "wait_seconds": 0.5, "wait_share": 0.5}


class TraceFramework(Framework):
    """One role's jobs of a trace, submitted at their arrival times and placed by the batch
    planner into the offers of a real master."""

    def __init__(self, role: str, jobs: list[Job], recorder: Recorder, start: float) -> None:
        self.role = role
        self.jobs = jobs
        self.recorder = recorder
        self.start = start
        self.queue = TraceQueue(role)
        self.driver: Driver | None = None
        self.suppressed = False
        self.by_id = {job.job: job for job in jobs}
        self.shapes: dict[str, Job] = {}  # task id -> its job
        self.running: set[str] = set()
        self.arrivals = 0
        self._arrivals: asyncio.Task | None = None
        self._lock = asyncio.Lock()

    def now(self) -> float:
        return time.monotonic() - self.start

    def wants(self) -> tuple[Resources, Resources]:
        """What the queue waits for in total, and the fewest cpus and mem a waiting task asks
        for: offers sized by demand, as the batch framework and the simulator's frameworks
        ask."""
        cpus, mem = self.queue.smallest()
        return scalars(self.queue.demand()), Resources.of(cpus=cpus, mem=mem)

    async def on_subscribed(self, driver: Driver, framework_id: str) -> None:
        self.driver = driver
        await driver.suppress()
        self.suppressed = True
        if self._arrivals is None:
            self._arrivals = asyncio.create_task(self._arrive_all())

    async def _arrive_all(self) -> None:
        for job in self.jobs:
            await asyncio.sleep(max(0.0, job.at - self.now()))
            self.recorder.arrived(job.job, job.role, job.tasks, self.now())
            self.queue.arrive(job)
            self.arrivals += 1
            if self.driver is not None:  # as the batch framework: revive on every submission
                self.suppressed = False
                await self.driver.revive(*self.wants())

    async def on_offers(self, driver: Driver, offers) -> None:
        async with self._lock:  # one round at a time, as the simulator's frameworks decide
            arrivals = self.arrivals
            if not self.queue:
                await driver.decline(list(offers), refuse_seconds=IDLE_REFUSE_SECONDS)
                if not self.suppressed:
                    self.suppressed = True
                    await driver.suppress()
                return
            plan = self.queue.plan(list(offers))
            placed = self.queue.take(plan)
            for launch in plan.launches:
                for want in launch.wants:
                    self.shapes[want.spec.task_id] = self.by_id[want.job_id]
            now = self.now()
            for launch in plan.launches:
                try:
                    await driver.launch(
                        launch.offers, launch.tasks, refuse_seconds=DECLINE_REFUSE_SECONDS
                    )
                except SchedulerError as e:
                    # Refused (an optimistic conflict, a rival below its share): nothing was
                    # launched there; those tasks wait again, as in the simulator.
                    log.info("launch refused", agent_id=launch.agent_id, error=str(e))
                    for p in placed:
                        if p.agent_id == launch.agent_id:
                            self.queue.give_back(p)
                    await driver.revive(*self.wants())
                    for task in launch.tasks:
                        self.shapes.pop(task.task_id, None)
            for p in placed:
                if p.job.job not in self.queue.jobs:
                    self.recorder.launched(p.job.job, now)
            if plan.unused and not self.queue:
                await driver.decline(plan.unused, refuse_seconds=IDLE_REFUSE_SECONDS)
            elif plan.unused:  # as the simulator's frameworks: scraps refused for longer
                fits = {o.offer_id: self.queue.fits_some(Resources.from_proto(o.resources))
                        for o in plan.unused}  # fmt: skip
                unfit = [o for o in plan.unused if not fits[o.offer_id]]
                rest = [o for o in plan.unused if fits[o.offer_id]]
                if unfit:
                    await driver.decline(unfit, refuse_seconds=UNFIT_REFUSE_SECONDS)
                if rest:
                    await driver.decline(rest, refuse_seconds=DECLINE_REFUSE_SECONDS)
            if self.queue and not self.suppressed:
                await driver.want(*self.wants())  # sent only when the master counts otherwise
            if self.arrivals != arrivals and self.queue:
                # Work came during the round: its filters may hide room.
                await driver.revive(*self.wants())
            elif not self.queue and not self.suppressed:
                self.suppressed = True
                await driver.suppress()

    async def on_update(self, driver: Driver, status: common_pb2.TaskStatus) -> None:
        job = self.shapes.get(status.task_id)
        if job is None:
            return
        if status.state == common_pb2.TASK_RUNNING and status.task_id not in self.running:
            self.running.add(status.task_id)
            self.recorder.started(self.now(), self.role, job.resources, 1)
        elif status.state in TERMINAL_STATES:
            if status.task_id in self.running:
                self.running.discard(status.task_id)
                self.recorder.ended(self.now(), self.role, job.resources, 1)
            self.shapes.pop(status.task_id, None)

    async def close(self) -> None:
        if self._arrivals is not None:
            self._arrivals.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._arrivals


async def real_run(trace: Trace, work_dir: Path, offer_mode: str = "pessimistic") -> dict:
    """The trace on a real master (`--offer-mode offer_mode`) and an emulated fleet; its
    figures."""
    cluster = trace.cluster
    if len(set(cluster.roles.values())) > 1:
        raise ValueError("the cross-check runs roles of equal weight only (the master's default)")
    resources = ";".join(f"{r}:{v:g}" for r, v in cluster.agent.items())
    master = await start_master(MasterOptions(offer_mode=offer_mode), work_dir)
    fleet = None
    drivers: list[tuple[TraceFramework, Driver, asyncio.Task]] = []
    recorder = Recorder(cluster.capacity, list(cluster.roles))
    try:
        fleet, _ = await start_fleet(master.address, cluster.agents, work_dir, resources=resources)
        start = time.monotonic()
        for role in cluster.roles:
            jobs = [j for j in trace.jobs if j.role == role]
            framework = TraceFramework(role, jobs, recorder, start)
            info = framework_info(f"trace-{role}", role=role, failover_timeout=5.0)
            driver = Driver(framework, GrpcSchedulerTransport(master.address), info)
            drivers.append((framework, driver, asyncio.create_task(driver.run())))
        await asyncio.sleep(max(0.0, cluster.seconds - (time.monotonic() - start)))
        recorder.advance(cluster.seconds)
        return run_figures(recorder, cluster.seconds, list(cluster.roles))
    finally:
        for framework, driver, task in drivers:
            await framework.close()
            if driver.connected:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(driver.teardown(), 10)
            driver.stop()
            await asyncio.gather(task, return_exceptions=True)
        if fleet is not None:
            await fleet.stop()
        await master.stop()


def compare(real: dict, simulated: dict, roles: list[str]) -> dict:
    """The two runs' utilisation and median job waits, and whether each is within TOLERANCE."""
    out: dict = {"checks": []}
    u_real, u_sim = real["utilisation"]["cpus"], simulated["utilisation"]["cpus"]
    out["checks"].append(
        {
            "figure": "CPU utilisation",
            "real": u_real,
            "simulated": u_sim,
            "within": abs(u_real - u_sim) <= TOLERANCE["utilisation_points"],
        }
    )
    for role in roles:
        w_real = real["job_wait_seconds"][role]["all"]["p50"]
        w_sim = simulated["job_wait_seconds"][role]["all"]["p50"]
        if w_real is None or w_sim is None:
            within = w_real is None and w_sim is None
        else:
            allowed = max(TOLERANCE["wait_seconds"], TOLERANCE["wait_share"] * w_real)
            within = abs(w_real - w_sim) <= allowed
        out["checks"].append(
            {
                "figure": f"median job wait, {role} (s)",
                "real": w_real,
                "simulated": w_sim,
                "within": within,
            }
        )
    out["agree"] = all(c["within"] for c in out["checks"])
    return out


async def cross_check(trace: Trace, work_dir: Path, mode: str = "pessimistic") -> dict:
    """Both runs of the trace in one offer mode (pessimistic or optimistic, event-driven as
    the master's default) and their comparison. The simulator models the decisions of a
    framework in this process as a millisecond per job."""
    if mode not in ("pessimistic", "optimistic"):
        raise ValueError(f"the cross-check runs pessimistic or optimistic offers, not {mode!r}")
    real = await real_run(trace, work_dir, mode)
    sim = SimConfig(mode=mode, job_decision=0.001, task_decision=0.0001)
    simulated, _ = simulate_once(trace, sim)
    roles = list(trace.cluster.roles)
    return {"mode": mode, "real": real, "simulated": simulated, **compare(real, simulated, roles)}
