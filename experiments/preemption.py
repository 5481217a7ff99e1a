"""preemption: a role below its quota guarantee on a full cluster, with preemption and without;
then a third role, weighted, below its fair share.

Role a arrives first and fills the cluster with long tasks; role b, guaranteed a share of the
CPUs (given as it arrives: given earlier, the master would hold it back from a as headroom),
of weight --b-weight, arrives later wanting exactly that much. Role c, of weight 2 against
a's 1, arrives after b wanting more than its share: with the master's
`--fair-share-preemption-timeout`, it converges to its weighted fair share (what a, owed its
own, leaves it beside b's guarantee), and neither it nor a preempts the other back. With
--settle the run goes on until that many seconds have passed since the last role converged,
so the window in which any preemption counts as oscillation is at least that long. All are
load frameworks on the real SDK in a closed loop (one task per offer, exponential durations
much longer than the run, so the cluster stays full); b tells the master what it cannot place
(driver.demand). The same run twice, on a real master and emulated agents: with
`--guarantee-preemption-timeout` and without preemption.
Every --sample-interval the runner lists the master's tasks. It reports the time from b's
arrival until it runs its guarantee, the tasks preempted against the fewest that could free it,
those preempted after b first held its guarantee (oscillation), and the work lost: the CPU
seconds the preempted tasks had run, from the first sample that saw each running.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.experiments import preemption_checks, preemption_report
from agora.experiments.checks import record
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.load import LoadConfig, Recorder, exponential
from agora.experiments.preemption_checks import ModeRun, c_share_cpus, fewest_tasks
from agora.experiments.processes import MasterOptions, start_fleet, start_master
from agora.experiments.results import Progress, Results
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc


@dataclass
class PreemptionConfig:
    agents: int = 4
    agent_resources: str = "cpus:2;mem:2048"
    seconds: float = 40.0
    task_cpus: float = 0.5
    task_mem: float = 64.0
    mean_duration: float = 600.0  # long: tasks end only now and then
    b_arrives: float = 0.25  # fraction of the run
    guarantee_fraction: float = 0.25  # b's guarantee, of the cluster's CPUs
    b_weight: float = 1.0  # b's weight (a's is 1), given as b arrives
    timeout: float = 5.0  # --guarantee-preemption-timeout
    sample_interval: float = 0.5
    compare: bool = True  # also the run without preemption
    # Role c: weight c_weight (a's and b's are 1), arriving at c_arrives of the run with more
    # demand than its share; the master's --fair-share-preemption-timeout is fair_timeout.
    third_role: bool = True
    c_arrives: float = 0.5
    c_weight: float = 2.0
    fair_timeout: float | None = None  # None: the same as `timeout`
    # The master's --max-preemptions-per-minute: its default of 10 would pace c's share.
    max_per_minute: int = 60
    # Seconds to go on watching after the last role converged (b to its guarantee, c to its
    # share): the run lasts `seconds`, or longer until this much has passed (at most
    # `seconds + settle` if a role never converges). 0: just `seconds`.
    settle: float = 0.0


async def run(cfg: PreemptionConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    """Each run (measure), its figures and checks (preemption_checks), the report
    (preemption_report)."""
    results = Results("preemption", out, asdict(cfg), command)
    progress = Progress("preemption", quiet)
    per_agent = Resources.parse(cfg.agent_resources)
    total = per_agent.scalar("cpus") * cfg.agents
    guarantee = total * cfg.guarantee_fraction
    fewest = fewest_tasks(guarantee, cfg.task_cpus)
    # c's weighted share, in tasks (the master preempts for a task only within it).
    c_share = c_share_cpus(total, guarantee, cfg.b_weight, cfg.c_weight)
    c_target = math.floor(c_share / cfg.task_cpus + 1e-9)
    samples: list[dict] = []
    runs: dict[str, dict] = {}
    for mode in ("preemption", "none") if cfg.compare else ("preemption",):
        measured = await measure(cfg, out / "logs" / mode, mode, guarantee, c_target, progress)
        samples += measured.samples
        runs[mode] = preemption_checks.figures(cfg, measured)
        results.add_run(runs[mode])
    results.add_samples(samples)
    on = runs["preemption"]
    record(results, preemption_checks.checks(cfg, on, fewest))
    names = preemption_report.plot(cfg, out, samples, total, guarantee, c_target, runs)
    results.write(preemption_report.summary(cfg, results, runs, guarantee, fewest, c_target), names)
    without = runs.get("none")
    progress.done(
        f"b held its guarantee {on['to_guarantee_seconds']} s after arriving with preemption"
        + (f", {without['to_guarantee_seconds']} s without" if without is not None else "")
        + f"; {on['preempted']} task(s) preempted (fewest: {fewest})"
    )
    return results


def _master_flags(cfg: PreemptionConfig, mode: str) -> list[str]:
    """The master's preemption flags for `mode` (none: the master's defaults, no preemption)."""
    if mode != "preemption":
        return []
    flags = [
        "--guarantee-preemption-timeout",
        str(cfg.timeout),
        "--max-preemptions-per-minute",
        str(cfg.max_per_minute),
    ]
    if cfg.third_role:
        fair = cfg.fair_timeout or cfg.timeout
        flags += ["--fair-share-preemption-timeout", str(fair)]
    return flags


def _load(cfg: PreemptionConfig, guarantee: float) -> list[LoadConfig]:
    """Roles a, b and c: one task per offer, durations much longer than the run; b wants
    exactly its guarantee, and b and c tell the master what they cannot place."""
    b_tasks = fewest_tasks(guarantee, cfg.task_cpus)
    return [
        LoadConfig(name="a", role="a", cpus=cfg.task_cpus, mem=cfg.task_mem,
                   duration=exponential(cfg.mean_duration, seed=1), tasks_per_offer=1,
                   leftover_refuse_seconds=0.0, decline_refuse_seconds=1.0, seed=1),
        LoadConfig(name="b", role="b", cpus=cfg.task_cpus, mem=cfg.task_mem,
                   duration=exponential(cfg.mean_duration, seed=2), tasks_per_offer=1,
                   max_running=b_tasks, leftover_refuse_seconds=0.0,
                   decline_refuse_seconds=1.0, tell_demand=True, seed=2),
        LoadConfig(name="c", role="c", cpus=cfg.task_cpus, mem=cfg.task_mem,
                   duration=exponential(cfg.mean_duration, seed=3), tasks_per_offer=1,
                   leftover_refuse_seconds=0.0, decline_refuse_seconds=1.0,
                   tell_demand=True, seed=3),
    ]  # fmt: skip


class Watch:
    """One run's clock and what it sees: a starts at once, b and c arrive on time, the
    master's tasks are sampled every --sample-interval, and the run ends when
    PreemptionConfig.settle says."""

    def __init__(
        self,
        cfg: PreemptionConfig,
        run: ModeRun,
        guarantee: float,
        c_target: int,
        stub: operator_pb2_grpc.OperatorStub,
        frameworks: FrameworkSet,
        progress: Progress,
    ) -> None:
        self.cfg = cfg
        self.run = run
        self.guarantee = guarantee
        self.c_target = c_target
        self.stub = stub
        self.frameworks = frameworks
        self.by_name = {f.config.name: f for f in frameworks.frameworks}
        self.progress = progress
        self.start = 0.0  # time.monotonic() as a started

    def end(self) -> float:
        """When the run ends, in seconds into it (see PreemptionConfig.settle)."""
        cfg, run = self.cfg, self.run
        if cfg.settle <= 0:
            return cfg.seconds
        converged = [run.b_reached_at, run.c_reached_at] if cfg.third_role else [run.b_reached_at]
        times = [at for at in converged if at is not None]
        if len(times) < len(converged):
            return cfg.seconds + cfg.settle
        return max(cfg.seconds, max(times) + cfg.settle)

    async def watch(self) -> None:
        cfg, run = self.cfg, self.run
        self.frameworks.start_one(self.by_name["a"])
        self.start = next_sample = time.monotonic()
        while (now := time.monotonic()) < self.start + self.end():
            if run.b_arrived_at is None and now - self.start >= cfg.b_arrives * cfg.seconds:
                await self._b_arrives()
            c_due = now - self.start >= cfg.c_arrives * cfg.seconds
            if cfg.third_role and run.c_arrived_at is None and c_due:
                await self._c_arrives()
            if now >= next_sample:
                next_sample += cfg.sample_interval
                await self._sample()
            await asyncio.sleep(min(0.05, max(0.0, next_sample - time.monotonic())))
        run.ended_at = time.monotonic() - self.start

    async def _b_arrives(self) -> None:
        # b's guarantee is given as it arrives: given before, the master would have held it
        # back from a as headroom, and nothing would be preempted.
        quota = operator_pb2.Quota(guarantee=Resources.of(cpus=self.guarantee).to_proto())
        await self.stub.SetQuota(operator_pb2.SetQuotaRequest(role="b", quota=quota))
        if self.cfg.b_weight != 1.0:
            b_weight = operator_pb2.UpdateWeightRequest(role="b", weight=self.cfg.b_weight)
            await self.stub.UpdateWeight(b_weight)
        self.run.b_arrived_at = time.monotonic() - self.start
        self.frameworks.start_one(self.by_name["b"])

    async def _c_arrives(self) -> None:
        weight = operator_pb2.UpdateWeightRequest(role="c", weight=self.cfg.c_weight)
        await self.stub.UpdateWeight(weight)
        self.run.c_arrived_at = time.monotonic() - self.start
        self.frameworks.start_one(self.by_name["c"])

    async def _sample(self) -> None:
        """Counts each role's running tasks; notes when b holds its guarantee and c is
        within one task of its share."""
        cfg, run = self.cfg, self.run
        at = round(time.monotonic() - self.start, 3)
        tasks = (await self.stub.ListTasks(operator_pb2.ListTasksRequest())).tasks
        running = {"a": 0, "b": 0, "c": 0}
        for t in tasks:
            if t.state != common_pb2.TASK_RUNNING:
                continue
            run.first_running.setdefault(t.task_id, time.time())
            if t.framework_name in running:
                running[t.framework_name] += 1
        for role, count in running.items():
            run.samples.append({"mode": run.mode, "t": at, "role": role, "running": count})
        held = running["b"] * cfg.task_cpus >= self.guarantee - 1e-9
        if run.b_arrived_at is not None and run.b_reached_at is None and held:
            run.b_reached_at, run.b_reached_wall = at, time.time()
        near = running["c"] >= self.c_target - 1
        if run.c_arrived_at is not None and run.c_reached_at is None and near:
            run.c_reached_at, run.c_reached_wall = at, time.time()
        self.progress.show(
            f"{run.mode}: {at:4.1f}/{self.end():g} s, a runs {running['a']}, "
            f"b runs {running['b']}, c runs {running['c']}"
        )


async def measure(
    cfg: PreemptionConfig,
    logs: Path,
    mode: str,
    guarantee: float,
    c_target: int,
    progress: Progress,
) -> ModeRun:
    """One run on a fresh master and fleet: what it saw, and the master's preemptions."""
    run = ModeRun(mode)
    master = await start_master(MasterOptions(extra=_master_flags(cfg, mode)), logs)
    fleet = framework_set = None
    recorder = Recorder()
    try:
        fleet, _ = await start_fleet(
            master.address, cfg.agents, logs, resources=cfg.agent_resources
        )
        framework_set = FrameworkSet(master.address, _load(cfg, guarantee), recorder)
        async with insecure_channel(master.address) as channel:
            stub = operator_pb2_grpc.OperatorStub(channel)
            await Watch(cfg, run, guarantee, c_target, stub, framework_set, progress).watch()
            reply = await stub.ListPreemptions(operator_pb2.ListPreemptionsRequest())
            run.preempted = list(reply.preemptions)
    finally:
        if framework_set is not None:
            await framework_set.stop(teardown=True)
        if fleet is not None:
            await fleet.stop()
        await master.stop()
    run.launched = recorder.counts["launched"]
    return run
