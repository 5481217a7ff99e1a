"""fairness: three frameworks with different task shapes come and go; DRF shares over time.

A memory-heavy, a CPU-heavy and a small framework (the DRF paper's kind of mix) run closed-loop
with exponential task durations, one task per launch (what is left goes straight back, so each
freed slice goes to whoever DRF ranks lowest at that moment). A framework holds offers too small
for its task and launches once pieces of one agent add up (declining them would filter the
whole agent from it, and the small framework would take every gap); what it held for a mean
task duration without use it gives back. They arrive at 0, 20% and 40% of
the run; the small one leaves at 80%. The runner samples ListFrameworks on the Operator API
every --sample-interval and plots each framework's dominant_share (as the master computes it,
offered + used); the mean over the second half of the all-three period is compared with the DRF
optimum from progressive filling over the pooled resources (experiments/drf.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.experiments import plots
from agora.experiments.drf import progressive_filling
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.load import LoadConfig, Recorder, exponential
from agora.experiments.processes import MasterOptions, start_fleet, start_master
from agora.experiments.results import Progress, Results, targets_md
from agora.v1 import operator_pb2, operator_pb2_grpc


@dataclass
class Shape:
    name: str
    cpus: float
    mem: float
    arrive: float  # fraction of the run
    leave: float  # fraction of the run (1.0: stays to the end)


@dataclass
class FairnessConfig:
    agents: int = 20
    agent_resources: str = "cpus:4;mem:8192"
    seconds: float = 30.0
    mean_duration: float = 2.0
    sample_interval: float = 0.25
    shapes: list[Shape] = field(
        default_factory=lambda: [
            Shape("mem-heavy", 1.0, 4096.0, 0.0, 1.0),
            Shape("cpu-heavy", 3.0, 1024.0, 0.2, 1.0),
            Shape("small", 1.0, 1024.0, 0.4, 0.8),
        ]
    )


def _optimum(cfg: FairnessConfig, names: list[str]) -> dict[str, dict]:
    per_agent = Resources.parse(cfg.agent_resources)
    total = {
        "cpus": per_agent.scalar("cpus") * cfg.agents,
        "mem": per_agent.scalar("mem") * cfg.agents,
    }
    demands = {s.name: {"cpus": s.cpus, "mem": s.mem} for s in cfg.shapes if s.name in names}
    return progressive_filling(total, demands)


async def run(cfg: FairnessConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    results = Results("fairness", out, asdict(cfg), command)
    progress = Progress("fairness", quiet)
    logs = out / "logs"
    master = await start_master(MasterOptions(), logs)
    fleet = None
    framework_set = None
    samples: list[dict] = []
    events: list[tuple[float, str]] = []
    try:
        fleet, _ = await start_fleet(
            master.address, cfg.agents, logs, resources=cfg.agent_resources
        )
        recorder = Recorder()
        configs = [
            LoadConfig(
                name=s.name,
                cpus=s.cpus,
                mem=s.mem,
                duration=exponential(cfg.mean_duration, seed=i + 1),
                tasks_per_offer=1,
                hold_offers=True,
                max_hold_seconds=cfg.mean_duration,
                leftover_refuse_seconds=0.0,
                seed=i + 1,
            )
            for i, s in enumerate(cfg.shapes)
        ]
        framework_set = FrameworkSet(master.address, configs, recorder)
        by_name = {f.config.name: f for f in framework_set.frameworks}
        schedule = sorted(
            [(s.arrive * cfg.seconds, "arrive", s.name) for s in cfg.shapes]
            + [(s.leave * cfg.seconds, "leave", s.name) for s in cfg.shapes if s.leave < 1.0]
        )
        async with insecure_channel(master.address) as channel:
            stub = operator_pb2_grpc.OperatorStub(channel)
            start = time.monotonic()
            next_sample = start
            while (now := time.monotonic()) < start + cfg.seconds:
                while schedule and now - start >= schedule[0][0]:
                    _, what, name = schedule.pop(0)
                    events.append((round(now - start, 3), f"{name} {what}s"))
                    if what == "arrive":
                        framework_set.start_one(by_name[name])
                    else:
                        asyncio.create_task(framework_set.stop_one(by_name[name]))
                if now >= next_sample:
                    next_sample += cfg.sample_interval
                    reply = await stub.ListFrameworks(operator_pb2.ListFrameworksRequest())
                    at = time.monotonic() - start
                    for f in reply.frameworks:
                        samples.append(
                            {
                                "t": round(at, 3),
                                "framework": f.info.name,
                                "dominant_share": round(f.dominant_share, 5),
                                "tasks": f.task_count,
                                "connected": f.connected,
                            }
                        )
                    shares = ", ".join(
                        f"{f.info.name} {f.dominant_share:.2f}" for f in reply.frameworks
                    )
                    progress.show(f"{at:4.1f}/{cfg.seconds:g} s: {shares}")
                await asyncio.sleep(min(0.05, max(0.0, next_sample - time.monotonic())))
    finally:
        if framework_set is not None:
            await framework_set.stop(teardown=True)
        if fleet is not None:
            await fleet.stop()
        await master.stop()

    # "Final allocation": the second half of the period when all three run.
    all_from = max(s.arrive for s in cfg.shapes) * cfg.seconds
    all_to = min(s.leave for s in cfg.shapes) * cfg.seconds
    lo = all_from + (all_to - all_from) / 2
    names = [s.name for s in cfg.shapes]
    optimum = _optimum(cfg, names)
    final = {}
    for name in names:
        window = [s for s in samples if s["framework"] == name and lo <= s["t"] <= all_to]
        share = sum(s["dominant_share"] for s in window) / len(window) if window else None
        tasks = sum(s["tasks"] for s in window) / len(window) if window else None
        final[name] = {
            "measured_dominant_share": None if share is None else round(share, 4),
            "measured_tasks": None if tasks is None else round(tasks, 2),
            "optimum_dominant_share": round(optimum[name]["dominant_share"], 4),
            "optimum_tasks": optimum[name]["tasks"],
            "samples": len(window),
        }
    gaps = [
        abs(v["measured_dominant_share"] - v["optimum_dominant_share"])
        for v in final.values()
        if v["measured_dominant_share"] is not None
    ]
    max_share_gap = round(max(gaps), 4) if gaps else None
    run_result = {
        "agents": cfg.agents,
        "agent_resources": cfg.agent_resources,
        "events": [{"t": t, "what": what} for t, what in events],
        "final_window_seconds": [round(lo, 3), round(all_to, 3)],
        "final_allocation": final,
        "max_share_gap": max_share_gap,
        "samples": len(samples),
        "tasks_launched": recorder.counts["launched"],
        "phases": _phase_optima(cfg),
    }
    results.add_run(run_result)
    results.add_samples(samples)
    results.target(
        "largest gap, measured vs DRF-optimum dominant share (all three running)",
        max_share_gap,
        0.1,
        "share",
        measured_in=(f"mean of ListFrameworks samples over t={lo:.1f}-{all_to:.1f} s"),
    )
    names_written = _plots(cfg, out, samples, events, run_result)
    results.write(_summary(cfg, results, run_result), names_written)
    progress.done(
        "final dominant shares "
        + ", ".join(
            f"{n} {v['measured_dominant_share']} (DRF {v['optimum_dominant_share']})"
            for n, v in final.items()
        )
    )
    return results


def _phase_optima(cfg: FairnessConfig) -> list[dict]:
    """The optimum in each period between arrivals and departures (for the plot)."""
    cuts = sorted({0.0, 1.0, *(s.arrive for s in cfg.shapes), *(s.leave for s in cfg.shapes)})
    phases = []
    for a, b in zip(cuts, cuts[1:], strict=False):
        active = [s.name for s in cfg.shapes if s.arrive <= a and s.leave >= b]
        if active:
            optimum = _optimum(cfg, active)
            phases.append(
                {
                    "from": a * cfg.seconds,
                    "to": b * cfg.seconds,
                    "shares": {n: round(v["dominant_share"], 4) for n, v in optimum.items()},
                }
            )
    return phases


def _plots(cfg: FairnessConfig, out: Path, samples: list[dict], events, run: dict) -> list[str]:
    names = [s.name for s in cfg.shapes]
    series = []
    styles = []
    for name in names:
        points = [(s["t"], s["dominant_share"]) for s in samples if s["framework"] == name]
        if points:
            series.append((f"{name} (measured)", [p[0] for p in points], [p[1] for p in points]))
            styles.append("-")
    for name in names:
        xs, ys = [], []
        for phase in run["phases"]:
            if name in phase["shares"]:
                xs += [phase["from"], phase["to"]]
                ys += [phase["shares"][name]] * 2
            else:
                xs.append(float("nan"))
                ys.append(float("nan"))
        series.append((f"{name} (DRF optimum)", xs, ys))
        styles.append(":")
    written = [
        plots.lines(
            out / "fairness_shares.png",
            "Dominant share over time (ListFrameworks) vs DRF optimum",
            "seconds",
            "dominant share",
            series,
            styles=styles,
        )
    ]
    final = run["final_allocation"]
    written.append(
        plots.bars(
            out / "fairness_final.png",
            "Final allocation (all three running) vs DRF optimum",
            "dominant share",
            names,
            [
                ("measured", [final[n]["measured_dominant_share"] or 0 for n in names]),
                ("DRF optimum", [final[n]["optimum_dominant_share"] for n in names]),
            ],
        )
    )
    return written


def _summary(cfg: FairnessConfig, results: Results, run: dict) -> str:
    shapes = "\n".join(
        f"- **{s.name}**: <{s.cpus:g} cpus, {s.mem:g} MB>, arrives at "
        f"{s.arrive * cfg.seconds:g} s, "
        + ("stays" if s.leave >= 1.0 else f"leaves at {s.leave * cfg.seconds:g} s")
        for s in cfg.shapes
    )
    rows = "\n".join(
        f"| {n} | {v['measured_dominant_share']} | {v['optimum_dominant_share']} | "
        f"{v['measured_tasks']} | {v['optimum_tasks']} |"
        for n, v in run["final_allocation"].items()
    )
    return f"""# fairness

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

## What is measured, and how

{cfg.agents} emulated agents of `{cfg.agent_resources}`, a real master (DRF sorter) and three
load frameworks on the real SDK, closed-loop with exponential task durations (mean
{cfg.mean_duration:g} s), each launching one task per offer and returning the rest at once:

{shapes}

Every {cfg.sample_interval:g} s the runner calls Operator.ListFrameworks and records each
framework's `dominant_share` (the master's figure: offered + used resources over the cluster
total) and task count. The final allocation is the mean over t = {run["final_window_seconds"][0]}
-{run["final_window_seconds"][1]} s (second half of the period when all three run), against the
DRF optimum computed by progressive filling over the pooled resources (agent boundaries
ignored, which is why a CPU-heavy task that fits only once per agent can fall short of it).

## Targets

{targets_md(results.data["targets"])}

## Final allocation

| framework | measured dominant share | DRF optimum | measured tasks | optimum tasks |
|---|---:|---:|---:|---:|
{rows}

Events: {", ".join(f"{e['what']} at {e['t']} s" for e in run["events"])}.
"""
