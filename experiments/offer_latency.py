"""offer-latency: how soon freed resources reach a framework, event-driven vs Mesos' 1 s timer.

Offer latency, the headline figure, is end to end: from the agent's own stamp on a task's
terminal update (the moment the resources are free) to a framework reading the OFFERS event
that offers them (OFFER_LATENCY). The gap between a framework reading that update and reading
the offer (UPDATE_TO_OFFER) stays as a secondary figure: the master forwards the update as it
frees the resources, so the two often arrive in one batch and the gap is the time between
reading two messages, not how long the offer took.

Each run starts a fresh master process, an emulated fleet (its own process) and F load
frameworks in this process. The frameworks keep `rate * mean duration` tasks running in total
(closed loop, exponential durations) and hold the offers they cannot use yet, launching on them
when a task ends, so an idle cluster stays quiet (no decline storms) at any size. A fraction of
offers is declined with refuse_seconds=0 to time re-offers, and a few agents join during the
measured window. Timing is done by the Recorder inside this process
(experiments/load/recorder.py says what each figure is).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agora.common import Resources
from agora.common.credentials import INSECURE
from agora.experiments import plots
from agora.experiments.emulated import EmulatedFleet, FleetConfig
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.load import LoadConfig, Recorder, TraceTask, exponential, tasks_for_rate
from agora.experiments.processes import (
    CpuMeter,
    Daemon,
    ExperimentTls,
    MasterOptions,
    python_m,
    start_fleets,
    start_master,
)
from agora.experiments.results import Progress, Results, stats_table, summarize, targets_md

# The headline: the agent's stamp on a task's end -> a framework reads the offer of its
# resources (Recorder's task_end_agent_to_offer).
OFFER_LATENCY = "task_end_agent_to_offer"
# Secondary: a framework reads the terminal update -> a framework reads that offer.
UPDATE_TO_OFFER = "task_end_to_offer"
# The targets' configuration (issue 31: p50 <= 1 ms end to end there).
TARGET_AGENTS, TARGET_FRAMEWORKS = 1000, 10
# Words for each figure, in the summary's table and the docs.
NAMES = {
    OFFER_LATENCY: "offer latency (agent's stamp -> offer read)",
    UPDATE_TO_OFFER: "update read -> offer read",
    "decline_to_offer": "decline -> re-offer",
    "join_to_offer": "join -> offer",
    "subscribe_to_first_offer": "subscribe -> first offer",
}

METRICS = (
    "task_end_to_offer",
    "task_end_agent_to_offer",
    "decline_to_offer",
    "join_to_offer",
    "subscribe_to_first_offer",
    "accept_to_running",
)


@dataclass
class OfferLatencyConfig:
    agents: list[int] = field(default_factory=lambda: [10, 100, 1000])
    frameworks: list[int] = field(default_factory=lambda: [1, 10])
    # cross: the agents sweep at fixed_frameworks and the frameworks sweep at fixed_agents;
    # full: every combination.
    grid: str = "cross"
    fixed_agents: int = 1000
    fixed_frameworks: int = 10
    modes: list[str] = field(default_factory=lambda: ["event", "interval"])
    allocation_interval: float = 1.0
    allocation_batch: float | None = None  # the master's batching window; None: its default
    seconds: float = 10.0
    warmup: float = 3.0
    rate: float = 40.0  # tasks ending per second, over the whole cluster
    mean_duration: float = 1.0
    cpus: float = 1.0
    mem: float = 1024.0
    # Tasks divide agents exactly, so no unusable remnant is left to decline: a decline filter
    # would hide the whole agent from that framework.
    agent_resources: str = "cpus:4;mem:4096"
    probe_decline_fraction: float = 0.05
    decision_delay: float = 0.0  # seconds a framework takes to answer an offer
    trace: list[TraceTask] | None = None  # CSV trace rows instead of the closed loop
    joiners: int = 5
    # People watching the dashboard during the run (0: no dashboard); each count is a run.
    dashboard_viewers: list[int] = field(default_factory=lambda: [0])
    # "off" (plaintext), "on" (mutual TLS between every daemon), or both: each is a run.
    tls: list[str] = field(default_factory=lambda: ["off"])

    def combinations(self) -> list[tuple[int, int]]:
        if self.grid == "full":
            return [(a, f) for a in self.agents for f in self.frameworks]
        fixed_f = (
            self.fixed_frameworks
            if self.fixed_frameworks in self.frameworks
            else self.frameworks[len(self.frameworks) // 2]
        )
        fixed_a = (
            self.fixed_agents
            if self.fixed_agents in self.agents
            else self.agents[len(self.agents) // 2]
        )
        combos = [(a, fixed_f) for a in self.agents] + [(fixed_a, f) for f in self.frameworks]
        return list(dict.fromkeys(combos))


def _label(agents: int, frameworks: int, mode: str, viewers: int = 0, tls: bool = False) -> str:
    label = f"{mode} a={agents} f={frameworks}" + (f" dashboard={viewers}" if viewers else "")
    return label + (" mTLS" if tls else "")


_DASHBOARD = re.compile(rb"dashboard on (\S+?)/?\s*$")


async def _start_viewers(master: Daemon, viewers: int, logs: Path) -> Daemon:
    """`viewers` people polling the master's dashboard, in a process of their own."""
    line = await master.wait_for_line(_DASHBOARD, 10)
    match = _DASHBOARD.search(line)
    assert match is not None
    argv = python_m(
        "agora.experiments.dashboard_viewers",
        "--url", match.group(1).decode(),
        "--viewers", str(viewers),
        "--stats", str(logs / "dashboard-viewers.json"),
    )  # fmt: skip
    daemon = Daemon("dashboard-viewers", argv, logs)
    return await daemon.start(ready=re.compile(rb'"event": "ready"'))


async def _one_run(
    cfg: OfferLatencyConfig,
    agents: int,
    frameworks: int,
    mode: str,
    out: Path,
    progress: Progress,
    viewers: int = 0,
    tls: ExperimentTls | None = None,
) -> tuple[dict, list[dict]]:
    label = _label(agents, frameworks, mode, viewers, tls is not None)
    logs = out / "logs" / label.replace(" ", "_").replace("=", "")
    master = await start_master(
        MasterOptions(
            allocation_mode=mode,
            allocation_interval=cfg.allocation_interval,
            allocation_batch=cfg.allocation_batch,
            http_port=0 if viewers else None,
            tls=tls.flags("master") if tls else None,
        ),
        logs,
    )
    fleets = []
    framework_set = None
    joiner_fleet = None
    viewer_daemon = None
    try:
        if viewers:
            viewer_daemon = await _start_viewers(master, viewers, logs)
        meter = CpuMeter(master.pid)
        started = time.monotonic()
        fleets = await start_fleets(
            master.address,
            agents,
            logs,
            cfg.agent_resources,
            extra=tls.flags("agents") if tls else None,
        )
        register_seconds = time.monotonic() - started
        progress.show(
            f"{label}: {agents} agents registered in {register_seconds:.1f} s", force=True
        )

        recorder = Recorder()
        recorder.recording = False
        budget = tasks_for_rate(cfg.rate, cfg.mean_duration)
        cap = max(1, math.ceil(budget / frameworks))
        configs = [
            LoadConfig(
                name=f"load-{i}",
                cpus=cfg.cpus,
                mem=cfg.mem,
                duration=exponential(cfg.mean_duration, seed=i + 1),
                max_running=cap,
                hold_offers=True,
                max_held=10**9,
                decline_refuse_seconds=3600.0,
                leftover_refuse_seconds=0.0,
                probe_decline_fraction=cfg.probe_decline_fraction,
                decision_delay=cfg.decision_delay,
                # A trace replaces the closed loop: its rows are dealt out to the frameworks.
                trace=cfg.trace[i::frameworks] if cfg.trace is not None else None,
                seed=i + 1,
            )
            for i in range(frameworks)
        ]
        framework_set = FrameworkSet(
            master.address, configs, recorder, tls.credentials("frameworks") if tls else None
        )
        framework_set.start()
        await framework_set.wait_subscribed()
        await asyncio.sleep(cfg.warmup)

        recorder.recording = True
        meter.reset()
        window_start = time.monotonic()
        joiner_fleet = EmulatedFleet(
            FleetConfig(
                master=master.address,
                agents=0,
                resources=Resources.parse(cfg.agent_resources),
                hostname_prefix="joiner",
                credentials=tls.credentials("agents") if tls else INSECURE,
            )
        )
        join_times = [
            window_start + cfg.seconds * (k + 0.5) / cfg.joiners for k in range(cfg.joiners)
        ]
        while (now := time.monotonic()) < window_start + cfg.seconds:
            if join_times and now >= join_times[0]:
                join_times.pop(0)
                for agent in await joiner_fleet.add_agents(1, timeout=30):
                    recorder.agent_joined(agent.agent_id, agent.register_sent_at)
            ends = recorder.values(OFFER_LATENCY)
            p50 = summarize(ends)["p50"] if ends else None
            progress.show(
                f"{label}: {now - window_start:4.1f}/{cfg.seconds:g} s, "
                f"{len(ends)} offer-latency samples"
                + (f", p50 {p50:.2f} ms" if p50 is not None else "")
            )
            await asyncio.sleep(0.25)
        recorder.recording = False
        window = time.monotonic() - window_start
        cores, rss = meter.cores(), meter.rss_mb()
    finally:
        if viewer_daemon is not None:
            await viewer_daemon.stop()
        if framework_set is not None:
            await framework_set.stop(teardown=True)
        if joiner_fleet is not None:
            await joiner_fleet.stop()
        for fleet in fleets:
            await fleet.stop()
        await master.stop()

    figures = {metric: summarize(recorder.values(metric)) for metric in METRICS}
    ended = [t for t in recorder.finished_at if window_start <= t <= window_start + window]
    run = {
        "label": label,
        "agents": agents,
        "frameworks": frameworks,
        "mode": mode,
        "dashboard_viewers": viewers,
        "dashboard": _viewer_stats(logs) if viewers else None,
        "tls": tls is not None,
        "allocation_interval_seconds": cfg.allocation_interval if mode == "interval" else None,
        "register_seconds": round(register_seconds, 3),
        "window_seconds": round(window, 3),
        "running_task_budget": cap * frameworks,
        "tasks_ended_per_second": round(len(ended) / window, 2) if window else None,
        "master_cpu_cores": round(cores, 4),
        "master_rss_mb": round(rss, 1),
        "counts": dict(recorder.counts),
        "figures_ms": figures,
    }
    rows = [
        {
            "run": label,
            "agents": agents,
            "frameworks": frameworks,
            "mode": mode,
            "metric": s.metric,
            "ms": round(s.ms, 4),
            "at": round(s.at - window_start, 4),
            "framework": s.framework,
            "agent_id": s.agent_id,
            # New columns go last: scripts read the first ones by position.
            "dashboard_viewers": viewers,
            "tls": tls is not None,
        }
        for s in recorder.samples
    ]
    end, gap = figures[OFFER_LATENCY], figures[UPDATE_TO_OFFER]
    progress.done(
        f"{label}: offer latency (agent's stamp -> offer read) p50 {end['p50']} ms, "
        f"p99 {end['p99']} ms (n={end['count']}); update read -> offer read p50 "
        f"{gap['p50']} ms; master {cores:.2f} cores"
    )
    return run, rows


async def run(
    cfg: OfferLatencyConfig, out: Path, command: list[str], quiet: bool = False
) -> Results:
    results = Results("offer-latency", out, asdict(cfg), command)
    progress = Progress("offer-latency", quiet)
    tls = None
    if "on" in cfg.tls:
        tls = ExperimentTls.make(Path(tempfile.mkdtemp(prefix="agora-ol-tls-")))
    try:
        for agents, frameworks in cfg.combinations():
            for mode in cfg.modes:
                for viewers in cfg.dashboard_viewers:
                    for secure in cfg.tls:  # plaintext and mutual TLS back to back
                        run_result, rows = await _one_run(
                            cfg,
                            agents,
                            frameworks,
                            mode,
                            out,
                            progress,
                            viewers,
                            tls if secure == "on" else None,
                        )
                        results.add_run(run_result)
                        results.add_samples(rows)
    finally:
        if tls is not None:
            shutil.rmtree(tls.directory, ignore_errors=True)
    _targets(cfg, results)
    names = _plots(cfg, results, out)
    results.write(_summary(cfg, results), names)
    return results


def _viewer_stats(logs: Path) -> dict | None:
    try:
        return json.loads((logs / "dashboard-viewers.json").read_text())
    except (OSError, ValueError):
        return None


def _find(
    results: Results, agents: int, frameworks: int, mode: str, tls: bool = False
) -> dict | None:
    """The run without a dashboard open (the targets and plots are about the offer path), in
    plaintext or (`tls`) with mutual TLS."""
    for r in results.runs:
        if (
            (r["agents"], r["frameworks"], r["mode"]) == (agents, frameworks, mode)
            and not r.get("dashboard_viewers")
            and bool(r.get("tls")) == tls
        ):
            return r
    return None


def _targets(cfg: OfferLatencyConfig, results: Results) -> None:
    """Offer latency end to end at 1,000 agents and 10 frameworks in event mode; a run that
    did not include that configuration says so, and what it ran instead."""
    at = f"at {TARGET_AGENTS:,} agents and {TARGET_FRAMEWORKS} frameworks"
    where = "event mode, the agent's stamp on a task's end -> a framework reads the offer"
    run = _find(results, TARGET_AGENTS, TARGET_FRAMEWORKS, "event")
    figures = run["figures_ms"][OFFER_LATENCY] if run else {}
    missing = "" if run else _what_ran(results, tls=False)
    for q, limit in (("p50", 1.0), ("p99", 20.0)):
        results.target(
            f"offer latency {q} {at}",
            figures.get(q),
            limit,
            "ms",
            measured_in=where,
            not_measured=missing,
        )
    if "on" in cfg.tls:
        run = _find(results, TARGET_AGENTS, TARGET_FRAMEWORKS, "event", tls=True)
        figures = run["figures_ms"][OFFER_LATENCY] if run else {}
        results.target(
            f"offer latency p50 {at} with mutual TLS",
            figures.get("p50"),
            2.0,
            "ms",
            measured_in=where + ", every connection mutual TLS",
            not_measured="" if run else _what_ran(results, tls=True),
        )


def _what_ran(results: Results, tls: bool) -> str:
    """What a run that missed the targets' configuration ran instead, in words."""
    runs = [
        r
        for r in results.runs
        if not r.get("dashboard_viewers") and bool(r.get("tls")) == tls and r["mode"] == "event"
    ]
    if not runs:
        return "it ran no event-mode run" + (" with mutual TLS" if tls else "")
    shapes = dict.fromkeys((r["agents"], r["frameworks"]) for r in runs)
    ran = ", ".join(
        f"{a:,} agent{'s' if a != 1 else ''} with {f} framework{'s' if f != 1 else ''}"
        for a, f in shapes
    )
    return f"it ran {ran}"


def _plots(cfg: OfferLatencyConfig, results: Results, out: Path) -> list[str]:
    names = []
    fixed_f = cfg.combinations()[0][1] if cfg.combinations() else cfg.fixed_frameworks
    sweeps = [("agents", "frameworks", "offer_latency_vs_agents.png", "emulated agents")]
    sweeps.append(("frameworks", "agents", "offer_latency_vs_frameworks.png", "frameworks"))
    for x_key, fixed_key, filename, xlabel in sweeps:
        fixed_value = fixed_f if fixed_key == "frameworks" else cfg.combinations()[-1][0]
        series = []
        for mode in cfg.modes:
            runs = sorted(
                (
                    r
                    for r in results.runs
                    if r["mode"] == mode
                    and r[fixed_key] == fixed_value
                    and not r.get("dashboard_viewers")
                    and not r.get("tls")
                ),
                key=lambda r: r[x_key],
            )
            for q in ("p50", "p99"):
                points = [
                    (r[x_key], r["figures_ms"][OFFER_LATENCY][q])
                    for r in runs
                    if r["figures_ms"][OFFER_LATENCY][q] is not None
                ]
                if points:
                    name = (
                        "Agora event-driven"
                        if mode == "event"
                        else f"Mesos-style {cfg.allocation_interval:g} s interval"
                    )
                    series.append((f"{name} {q}", [p[0] for p in points], [p[1] for p in points]))
        if series and len({tuple(s[1]) for s in series}) and max(len(s[1]) for s in series) > 1:
            names.append(
                plots.lines(
                    out / filename,
                    f"Offer latency: agent's stamp -> offer read ({fixed_key} = {fixed_value})",
                    xlabel,
                    "latency (ms, log)",
                    series,
                    logx=True,
                    logy=True,
                    hline=(1.0, "target: p50 <= 1 ms"),
                    styles=["o-", "o--", "s-", "s--"],
                )
            )
    # CDF at the fixed configuration (the target's: 1,000 agents, 10 frameworks), both modes,
    # and the update -> offer gap of event mode beside it.
    base = cfg.combinations()[-1] if cfg.combinations() else None
    if base is not None:
        agents, frameworks = base[0], fixed_f
        cdf_series = [
            (
                f"{mode}: offer latency ({agents} agents, {frameworks} frameworks)",
                _samples(results, agents, frameworks, mode, OFFER_LATENCY),
            )
            for mode in cfg.modes
        ]
        if "event" in cfg.modes:
            gap = _samples(results, agents, frameworks, "event", UPDATE_TO_OFFER)
            cdf_series.append(("event: update read -> offer read", gap))
        if any(v for _, v in cdf_series):
            name = plots.cdf(
                out / "offer_latency_cdf.png",
                "Offer latency: agent's stamp on a task's end -> offer read, CDF",
                "latency (ms, log)",
                cdf_series,
            )
            names.append(name)
            # What each legend says, so a reader (and the tests) can hold it to the tables.
            results.data.setdefault("legends", {})[name] = plots.cdf_labels(cdf_series)
    return names


def _samples(results: Results, agents: int, frameworks: int, mode: str, metric: str) -> list:
    """The raw samples of `metric` in the plain run (no dashboard, no TLS) of that shape."""
    return [
        row["ms"]
        for row in results._rows
        if row["agents"] == agents
        and row["frameworks"] == frameworks
        and row["mode"] == mode
        and not row.get("dashboard_viewers")
        and not row.get("tls")
        and row["metric"] == metric
    ]


def _summary(cfg: OfferLatencyConfig, results: Results) -> str:
    rows = [
        (f"{name}, {r['label']}", r["figures_ms"][metric])
        for metric, name in NAMES.items()
        for r in results.runs
    ]
    load = [
        f"| {r['label']} | {r['register_seconds']} | {r['tasks_ended_per_second']} | "
        f"{r['counts'].get('offer_before_update', 0)} / {r['counts'].get('terminal', 0)} | "
        f"{r['master_cpu_cores']} | {r['master_rss_mb']} |"
        for r in results.runs
    ]
    return f"""# offer-latency

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

## What is measured, and how

Each run starts a fresh master process (`allocation_mode` event = Agora's event-driven
allocation with its 2 ms batching window; interval = Mesos' default, one allocation every
{cfg.allocation_interval:g} s on a fixed timer and nothing in between; real Mesos also
allocates at once for a few events, such as a new agent or a revive), an emulated fleet in its
own process (real AgentLink streams over real gRPC), and the load frameworks inside the runner
process on the real SDK. Each framework keeps ceil({cfg.rate:g} x {cfg.mean_duration:g} / F)
tasks running (closed loop, {cfg.cpus:g} cpus / {cfg.mem:g} MB tasks, exponential durations of
mean {cfg.mean_duration:g} s): about {cfg.rate:g} tasks/s ending in total, more when there are
more frameworks than that (each runs at least one). Frameworks hold the offers they cannot use
yet and launch on them when a task ends. The frameworks' clocks are read in their process as
an event is read off its Subscribe stream (experiments/load/timing.py), before the driver hands
it on. The figures, in milliseconds:

- **offer latency** (`{OFFER_LATENCY}`, the headline and the targets' figure): the emulated
  agent stamps a task's terminal update with its wall clock as it makes it (the resources are
  free from then on) -> a framework reads the next OFFERS event holding an offer for that
  agent, on the same host's wall clock. It holds the whole path: the agent's stream, the
  master reading the update, freeing the resources and allocating, its stream to the
  framework, and the framework's read. Every task end is timed, also when the offer was read
  before the update.
- **update read -> offer read** (`{UPDATE_TO_OFFER}`, secondary): a framework reads that
  terminal UPDATE -> a framework reads the offer. The master forwards the update as it frees
  the resources, so the two often reach a framework in one batch and this is the time between
  reading two messages, not how long the offer took; read in the other order it counts 0 ms
  (how often: the Load table).
- **decline -> re-offer** (`decline_to_offer`): {cfg.probe_decline_fraction:.0%} of offers are
  declined with refuse_seconds=0; Decline issued -> next offer for that agent.
- **join -> offer** (`join_to_offer`): {cfg.joiners} agents join during the window (in the
  frameworks' process); the agent sends Register -> first offer for it.
- **subscribe -> first offer** (`subscribe_to_first_offer`): SUBSCRIBED received -> first
  OFFERS event (all frameworks subscribe at once; those that subscribe after the first hoard
  can wait for churn).

Warm-up: {cfg.warmup:g} s after every framework subscribed (the initial offer round); then a
{cfg.seconds:g} s measured window. Master CPU is psutil's user+system time of the master
process over the window.

## Targets

{targets_md(results.data["targets"])}

## Figures (ms)

{stats_table(rows)}

## Load

| run | agents registered in (s) | tasks ended/s | offer read before its update / task ends \
| master CPU (cores) | master RSS (MB) |
|---|---:|---:|---:|---:|---:|
{chr(10).join(load)}
"""
