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
from agora.experiments import plots
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.load import LoadConfig, Recorder, exponential
from agora.experiments.processes import MasterOptions, start_fleet, start_master
from agora.experiments.results import Progress, Results, targets_md
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


def c_share_cpus(total: float, guarantee: float, b_weight: float, c_weight: float) -> float:
    """The CPUs c converges to: its weighted fair share of the cluster (weight over the
    weights of a, b and c, all holding resources), but no more than a leaves it once a keeps
    its own fair share beside b's guarantee (a's tasks are victims only while a keeps that).
    Tasks' memory is small: the CPUs are everyone's dominant resource."""
    weights = 1.0 + b_weight + c_weight
    return min(total * c_weight / weights, total - guarantee - total / weights)


async def run(cfg: PreemptionConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    results = Results("preemption", out, asdict(cfg), command)
    progress = Progress("preemption", quiet)
    per_agent = Resources.parse(cfg.agent_resources)
    total = per_agent.scalar("cpus") * cfg.agents
    guarantee = total * cfg.guarantee_fraction
    fewest = math.ceil(guarantee / cfg.task_cpus - 1e-9)
    # c's weighted share, in tasks (the master preempts for a task only within it).
    c_share = c_share_cpus(total, guarantee, cfg.b_weight, cfg.c_weight)
    c_target = math.floor(c_share / cfg.task_cpus + 1e-9)
    samples: list[dict] = []
    runs: dict[str, dict] = {}
    for mode in ("preemption", "none") if cfg.compare else ("preemption",):
        runs[mode] = await _one(
            cfg, out / "logs" / mode, mode, guarantee, c_target, samples, progress
        )
        results.add_run(runs[mode])
    results.add_samples(samples)
    on = runs["preemption"]
    results.target(
        "seconds from b's arrival until it runs its guarantee, with preemption",
        on["to_guarantee_seconds"],
        cfg.timeout + 2.0,
        "s",
        measured_in="the first sample with b's running tasks holding its guarantee",
        not_measured="b did not reach its guarantee within the run",
    )
    results.target(
        "tasks preempted beyond the fewest that free b's guarantee",
        on["preempted"] - fewest,
        0,
        "tasks",
        measured_in="Operator.ListPreemptions at the end of the run",
    )
    results.target(
        "tasks preempted after b first held its guarantee (oscillation)",
        on["preempted_after_convergence"],
        0,
        "tasks",
        measured_in="ListPreemptions times against the first sample with b at its guarantee",
    )
    if cfg.third_role:
        results.target(
            "seconds from c's arrival until it runs within one task of its weighted share",
            on["c_to_share_seconds"],
            (cfg.fair_timeout or cfg.timeout) + 2.0,
            "s",
            measured_in="the first sample with c's running tasks within one of its share",
            not_measured="c did not reach its share within the run",
        )
        results.target(
            "tasks preempted after c first ran its share (oscillation between a and c)",
            on["preempted_after_c_converged"],
            0,
            "tasks",
            measured_in="ListPreemptions times against the first sample with c at its share",
        )
    names = _plots(cfg, out, samples, total, guarantee, c_target, runs)
    results.write(_summary(cfg, results, runs, guarantee, fewest, c_target), names)
    without = runs.get("none")
    progress.done(
        f"b held its guarantee {on['to_guarantee_seconds']} s after arriving with preemption"
        + (f", {without['to_guarantee_seconds']} s without" if without is not None else "")
        + f"; {on['preempted']} task(s) preempted (fewest: {fewest})"
    )
    return results


async def _one(
    cfg: PreemptionConfig,
    logs: Path,
    mode: str,
    guarantee: float,
    c_target: int,
    samples: list,
    progress,
) -> dict:
    extra = []
    if mode == "preemption":
        extra = [
            "--guarantee-preemption-timeout",
            str(cfg.timeout),
            "--max-preemptions-per-minute",
            str(cfg.max_per_minute),
        ]
        if cfg.third_role:
            fair = cfg.fair_timeout or cfg.timeout
            extra += ["--fair-share-preemption-timeout", str(fair)]
    master = await start_master(MasterOptions(extra=extra), logs)
    fleet = framework_set = None
    ended_at = 0.0
    first_running: dict[str, float] = {}  # task id -> wall time first seen running
    arrived_at: float | None = None  # seconds into the run
    reached_at: float | None = None
    reached_wall = None
    c_arrived_at: float | None = None
    c_reached_at: float | None = None
    c_reached_wall: float | None = None
    preempted: list = []
    recorder = Recorder()
    try:
        fleet, _ = await start_fleet(
            master.address, cfg.agents, logs, resources=cfg.agent_resources
        )
        b_tasks = math.ceil(guarantee / cfg.task_cpus - 1e-9)
        configs = [
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
        framework_set = FrameworkSet(master.address, configs, recorder)
        by_name = {f.config.name: f for f in framework_set.frameworks}
        async with insecure_channel(master.address) as channel:
            stub = operator_pb2_grpc.OperatorStub(channel)
            framework_set.start_one(by_name["a"])
            start = time.monotonic()
            next_sample = start

            def end() -> float:
                """When the run ends, in seconds into it (see PreemptionConfig.settle)."""
                if cfg.settle <= 0:
                    return cfg.seconds
                converged = [reached_at, c_reached_at] if cfg.third_role else [reached_at]
                times = [at for at in converged if at is not None]
                if len(times) < len(converged):
                    return cfg.seconds + cfg.settle
                return max(cfg.seconds, max(times) + cfg.settle)

            while (now := time.monotonic()) < start + end():
                if arrived_at is None and now - start >= cfg.b_arrives * cfg.seconds:
                    # b's guarantee is given as it arrives: given before, the master would
                    # have held it back from a as headroom, and nothing would be preempted.
                    quota = operator_pb2.Quota(guarantee=Resources.of(cpus=guarantee).to_proto())
                    await stub.SetQuota(operator_pb2.SetQuotaRequest(role="b", quota=quota))
                    if cfg.b_weight != 1.0:
                        b_weight = operator_pb2.UpdateWeightRequest(role="b", weight=cfg.b_weight)
                        await stub.UpdateWeight(b_weight)
                    arrived_at = time.monotonic() - start
                    framework_set.start_one(by_name["b"])
                c_due = now - start >= cfg.c_arrives * cfg.seconds
                if cfg.third_role and c_arrived_at is None and c_due:
                    weight = operator_pb2.UpdateWeightRequest(role="c", weight=cfg.c_weight)
                    await stub.UpdateWeight(weight)
                    c_arrived_at = time.monotonic() - start
                    framework_set.start_one(by_name["c"])
                if now >= next_sample:
                    next_sample += cfg.sample_interval
                    at = round(time.monotonic() - start, 3)
                    tasks = (await stub.ListTasks(operator_pb2.ListTasksRequest())).tasks
                    running = {"a": 0, "b": 0, "c": 0}
                    for t in tasks:
                        if t.state != common_pb2.TASK_RUNNING:
                            continue
                        first_running.setdefault(t.task_id, time.time())
                        if t.framework_name in running:
                            running[t.framework_name] += 1
                    for role, count in running.items():
                        samples.append({"mode": mode, "t": at, "role": role, "running": count})
                    held = running["b"] * cfg.task_cpus >= guarantee - 1e-9
                    if arrived_at is not None and reached_at is None and held:
                        reached_at, reached_wall = at, time.time()
                    near = running["c"] >= c_target - 1
                    if c_arrived_at is not None and c_reached_at is None and near:
                        c_reached_at, c_reached_wall = at, time.time()
                    progress.show(
                        f"{mode}: {at:4.1f}/{end():g} s, a runs {running['a']}, "
                        f"b runs {running['b']}, c runs {running['c']}"
                    )
                await asyncio.sleep(min(0.05, max(0.0, next_sample - time.monotonic())))
            ended_at = time.monotonic() - start
            reply = await stub.ListPreemptions(operator_pb2.ListPreemptionsRequest())
            preempted = list(reply.preemptions)
    finally:
        if framework_set is not None:
            await framework_set.stop(teardown=True)
        if fleet is not None:
            await fleet.stop()
        await master.stop()
    lost = sum(
        max(0.0, p.at - first_running.get(p.task_id, p.at)) * cfg.task_cpus for p in preempted
    )
    last = {role: 0 for role in ("a", "b", "c")}
    for sample in samples:  # the run's last sample per role
        if sample["mode"] == mode:
            last[sample["role"]] = sample["running"]
    converged = [reached_at, c_reached_at] if cfg.third_role else [reached_at]
    return {
        "mode": mode,
        "seconds": round(ended_at, 3),
        # How long the run watched after the last role converged: the oscillation window.
        "settled_seconds": (
            None
            if any(at is None for at in converged)
            else round(ended_at - max(at for at in converged if at is not None), 3)
        ),
        "b_arrived_seconds": arrived_at,
        "to_guarantee_seconds": (
            None if reached_at is None or arrived_at is None else round(reached_at - arrived_at, 3)
        ),
        "preempted": sum(1 for p in preempted if p.beneficiary == "b"),
        "preempted_for_c": sum(1 for p in preempted if p.beneficiary == "c"),
        "preempted_other": sum(1 for p in preempted if p.beneficiary not in ("b", "c")),
        "c_arrived_seconds": c_arrived_at,
        "c_to_share_seconds": (
            None
            if c_reached_at is None or c_arrived_at is None
            else round(c_reached_at - c_arrived_at, 3)
        ),
        "preempted_after_c_converged": sum(
            1
            for p in preempted
            if c_reached_wall is not None and p.at > c_reached_wall + cfg.sample_interval
        ),
        "running_at_end": last,
        # A sample's resolution late: a kill sent just before b was seen holding its
        # guarantee is not counted as after it.
        "preempted_after_convergence": sum(
            1
            for p in preempted
            if p.beneficiary == "b"
            and reached_wall is not None
            and p.at > reached_wall + cfg.sample_interval
        ),
        "work_lost_cpu_seconds": round(lost, 1),
        "tasks_launched": recorder.counts["launched"],
    }


def _plots(
    cfg, out: Path, samples: list[dict], total: float, guarantee: float, c_target: int, runs: dict
) -> list[str]:
    series = []
    styles = []
    for mode in runs:
        for role in ("a", "b", "c") if cfg.third_role else ("a", "b"):
            points = [
                (s["t"], s["running"]) for s in samples if s["mode"] == mode and s["role"] == role
            ]
            if points:
                series.append((f"{role} ({mode})", [p[0] for p in points], [p[1] for p in points]))
                styles.append("-" if mode == "preemption" else ":")
    return [
        plots.lines(
            out / "preemption_running.png",
            "Running tasks per role (solid: with preemption; dotted: without)"
            + (f"; c's share: {c_target}" if cfg.third_role else ""),
            "seconds",
            "running tasks",
            series,
            styles=styles,
            hline=(guarantee / cfg.task_cpus, "b's guarantee"),
        ),
        _shares_plot(cfg, out, samples, total, guarantee, c_target),
    ]


def _shares_plot(
    cfg, out: Path, samples: list[dict], total: float, guarantee: float, c_target: int
) -> str:
    """Each role's share of the CPUs with preemption (solid), against what it is owed
    (dashed, the same colour): b's guarantee, c's weighted share, a's fair share (a floor:
    a's tasks are victims only above it)."""
    roles = ("a", "b", "c") if cfg.third_role else ("a", "b")
    runs = [s for s in samples if s["mode"] == "preemption"]
    end = max((s["t"] for s in runs), default=cfg.seconds)
    weights = 1.0 + cfg.b_weight + (cfg.c_weight if cfg.third_role else 0.0)
    owed = {
        "a": (total / weights, "a's fair share"),
        "b": (guarantee, "b's guarantee"),
        "c": (c_target * cfg.task_cpus, "c's weighted share"),
    }
    series, styles = [], []
    for i, role in enumerate(roles):
        points = [(s["t"], s["running"] * cfg.task_cpus / total) for s in runs if s["role"] == role]
        if points:
            series.append((f"{role}", [p[0] for p in points], [p[1] for p in points]))
            styles.append(f"C{i}-")
        cpus, label = owed[role]
        series.append((label, [0.0, end], [cpus / total] * 2))
        styles.append(f"C{i}--")
    weights_text = f"weights a 1, b {cfg.b_weight:g}" + (
        f", c {cfg.c_weight:g}" if cfg.third_role else ""
    )
    return plots.lines(
        out / "preemption_shares.png",
        f"Share of the CPUs per role with preemption, against what it is owed ({weights_text})",
        "seconds",
        "share of the cluster's CPUs",
        series,
        styles=styles,
    )


_HEADER = (
    "| run | b's arrival -> guarantee (s) | preempted for b | after b held it "
    "| c's arrival -> share (s) | preempted for c | after c held it "
    "| running at the end a / b / c | work lost (cpu s) | run (s) "
    "| watched after converging (s) |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def _summary(
    cfg, results: Results, runs: dict, guarantee: float, fewest: int, c_target: int
) -> str:
    rows = "\n".join(
        f"| {r['mode']} | {r['to_guarantee_seconds']} | {r['preempted']} | "
        f"{r['preempted_after_convergence']} | {r['c_to_share_seconds']} | "
        f"{r['preempted_for_c']} | {r['preempted_after_c_converged']} | "
        f"{r['running_at_end']['a']} / {r['running_at_end']['b']} / "
        f"{r['running_at_end']['c']} | {r['work_lost_cpu_seconds']} | {r['seconds']} | "
        f"{r['settled_seconds']} |"
        for r in runs.values()
    )
    third = (
        f"""At {cfg.c_arrives * cfg.seconds:g} s role c arrives, of weight {cfg.c_weight:g}
(a weighs 1, b {cfg.b_weight:g}), wanting more than its share; with preemption the master
also has `--fair-share-preemption-timeout {cfg.fair_timeout or cfg.timeout:g}`. c's weighted
share is {c_target} tasks (its weight's part of the cluster, but no more than a leaves once
a keeps its own fair share beside b's guarantee), a's the rest."""
        if cfg.third_role
        else ""
    )
    settle = (
        f"""Each run lasts {cfg.seconds:g} s, or longer: until {cfg.settle:g} s have passed since
the last role converged (b to its guarantee, c to its share), {cfg.seconds + cfg.settle:g} s
at most; any preemption in that window is oscillation."""
        if cfg.settle > 0
        else ""
    )
    return f"""# preemption

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

## What is measured, and how

{cfg.agents} emulated agents of `{cfg.agent_resources}` and a real master. Role a's load
framework fills the cluster with tasks of {cfg.task_cpus:g} cpus and {cfg.task_mem:g} MB
(exponential durations, mean {cfg.mean_duration:g} s, so few end during the run). At
{cfg.b_arrives * cfg.seconds:g} s role b arrives, guaranteed `cpus:{guarantee:g}`
({cfg.guarantee_fraction:.0%} of the CPUs) and wanting exactly that ({fewest} tasks), and
tells the master what it cannot place. With preemption the master has
`--guarantee-preemption-timeout {cfg.timeout:g}` and `--max-preemptions-per-minute
{cfg.max_per_minute}`; without, b waits for a's tasks to end.
{third}
{settle}
Every {cfg.sample_interval:g} s the runner lists the master's tasks. Work lost: the CPU
seconds each preempted task had run, from the first sample that saw it running (so within
{cfg.sample_interval:g} s).

## Targets

{targets_md(results.data["targets"])}

## Figures

{_HEADER}
{rows}

![running tasks](preemption_running.png)

![shares against what each role is owed](preemption_shares.png)
"""
