"""launch: Accept -> TASK_RUNNING latency and tasks per second, against the raw spawn rate.

One load framework keeps `concurrency` zero-length tasks in flight: each ends as soon as it
runs, and the framework launches the next on the offer it holds or the one that comes back.
On emulated agents this is the master + protocol limit; with --real-agents N it runs `true` as
a real process on real `agora agent` processes (each task in its sandbox, under the agent's
task wrapper), and the same run first measures how fast this machine can spawn `true` (and a
bare `python -c pass`, for comparison with a Python process per task) with asyncio
subprocesses. Both the throughput window and each spawn loop get a CPU account
(experiments/launch_cpu.py): where the machine's CPU went, per component and per task.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from agora.experiments import plots
from agora.experiments.cpu_account import Component, CpuWindow
from agora.experiments.frameworks import FrameworkSet
from agora.experiments.launch_cpu import ThroughputCpu, cpu_md, cpu_plot
from agora.experiments.load import LoadConfig, Recorder, constant
from agora.experiments.processes import (
    ExperimentTls,
    MasterOptions,
    start_fleet,
    start_master,
    start_real_agent,
)
from agora.experiments.results import Progress, Results, stats_table, summarize, targets_md


@dataclass
class LaunchConfig:
    agents: int = 10
    real_agents: int = 0
    concurrency: int = 32
    tasks_per_accept: int = 0  # 0: as many as fit
    seconds: float = 10.0
    warmup: float = 2.0
    spawn_seconds: float = 3.0
    latency_seconds: float = 4.0  # one task at a time: accept -> RUNNING without queueing
    emulated_resources: str = "cpus:8;mem:8192"
    real_resources: str = "cpus:8;mem:8192;disk:8192"
    cpus: float = 0.1
    mem: float = 16.0
    # Where the real agents' work dirs go (None: the system temp dir, $TMPDIR or /tmp).
    work_dir: str | None = None
    # "off" (plaintext), "on" (mutual TLS on every connection), or both: a run each, back to
    # back; the first is the one the targets, plots and CPU account describe.
    tls: list[str] = field(default_factory=lambda: ["off"])


def probe_filesystem(parent: Path, count: int = 200) -> dict:
    """What creating a sandbox costs in `parent`: a directory and two empty files, the agent's
    per-task metadata work. It varies by an order of magnitude: on the machine this was
    written on, the same ext4 volume took 0.05 ms or 0.6-1.4 ms, the latter for minutes after
    heavy file churn in the same directory tree."""
    probe = Path(tempfile.mkdtemp(prefix="agora-fs-probe-", dir=parent))
    times = []
    try:
        for i in range(count):
            started = time.perf_counter()
            sandbox = probe / f"s{i}"
            sandbox.mkdir()
            (sandbox / "stdout").touch()
            (sandbox / "stderr").touch()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return {"path": str(parent), "sandbox_create_ms": summarize(times)}


async def spawn_rate(argv: list[str], seconds: float, workers: int) -> dict:
    """Processes started and reaped per second by `workers` concurrent asyncio loops."""
    done = 0
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        while time.monotonic() < deadline:
            started = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            await proc.wait()
            latencies.append((time.monotonic() - started) * 1000)
            done += 1

    runner = os.getpid()
    cpu = CpuWindow(
        [
            Component("runner", "runner", runner, "this process: the spawning asyncio loops"),
            Component(
                "spawned",
                "spawned",
                runner,
                "the spawned processes themselves (their CPU as reaped by this process)",
                reaped_children=True,
            ),
        ]
    )
    started = cpu.begin()
    await asyncio.gather(*(worker() for _ in range(workers)))
    elapsed = cpu.end() - started
    account = cpu.account(done, unit="process")
    return {
        "argv": argv,
        "workers": workers,
        "seconds": round(elapsed, 3),
        "processes": done,
        "per_second": round(done / elapsed, 2),
        "spawn_and_wait_ms": summarize(latencies),
        # CPU per process spawned over the spawn loop: what one bare process costs, beside a
        # task's cost in the throughput phase; the machine's busy time less what long-lived
        # processes outside the experiment spent (the machine is shared), and all of it.
        "cpu_ms_per_process": account["experiment"]["ms_per_process"],
        "machine_cpu_ms_per_process": account["machine"]["busy_ms_per_process"],
        "cpu": account,
    }


async def _phase(
    master: str,
    name: str,
    concurrency: int,
    seconds: float,
    cfg: LaunchConfig,
    real: bool,
    progress: Progress,
    cpu: ThroughputCpu | None,
    tls: ExperimentTls | None = None,
) -> dict:
    """One load framework keeping `concurrency` tasks in flight for `seconds` (after warm-up)."""
    recorder = Recorder()
    recorder.recording = False
    load = LoadConfig(
        name=f"launch-{name}",
        cpus=cfg.cpus,
        mem=cfg.mem,
        duration=constant(0.0),
        max_running=concurrency,
        hold_offers=True,
        max_held=10**9,
        leftover_refuse_seconds=0.0,
        command="true" if real else "sleep",
        tasks_per_offer=cfg.tasks_per_accept,
    )
    framework_set = FrameworkSet(
        master, [load], recorder, tls.credentials("frameworks") if tls else None
    )
    framework_set.start()
    try:
        await framework_set.wait_subscribed()
        await asyncio.sleep(cfg.warmup)
        recorder.recording = True
        counts_before = recorder.counts.copy()
        start = cpu.begin() if cpu else time.monotonic()
        while (now := time.monotonic()) < start + seconds:
            ended = sum(1 for t in recorder.finished_at if t >= start)
            progress.show(
                f"{name}: {now - start:4.1f}/{seconds:g} s, {ended} tasks ended "
                f"({ended / max(now - start, 1e-9):.0f}/s)"
            )
            await asyncio.sleep(0.25)
        end = cpu.end() if cpu else time.monotonic()
        recorder.recording = False
        # Counters are cumulative: what the window itself saw is the difference (zeros kept).
        counts = Counter({k: n - counts_before[k] for k, n in recorder.counts.items()})
        window = end - start
    finally:
        await framework_set.stop(teardown=True)
    return {
        "name": name,
        "recorder": recorder,
        "start": start,
        "window": window,
        "counts": counts,
        "failed": framework_set.frameworks[0].failed,
    }


async def _one_run(cfg, out, progress, real, raw, python, tls):
    """The latency and throughput phases on a fresh master and agents, plaintext or `tls`."""
    logs = out / "logs" / ("mtls" if tls else "plaintext")
    work = Path(tempfile.mkdtemp(prefix="agora-launch-", dir=cfg.work_dir))
    filesystem = probe_filesystem(work.parent) if real else None
    master = await start_master(MasterOptions(tls=tls.flags("master") if tls else None), logs)
    agents = []
    try:
        if real:
            agents = await asyncio.gather(
                *(
                    start_real_agent(
                        master.address,
                        logs,
                        work / f"agent-{i}",
                        cfg.real_resources,
                        f"agent-{i}",
                        extra=tls.flags("agents") if tls else None,
                    )
                    for i in range(cfg.real_agents)
                )
            )
        else:
            fleet, _ = await start_fleet(
                master.address,
                cfg.agents,
                logs,
                resources=cfg.emulated_resources,
                extra=tls.flags("agents") if tls else None,
            )
            agents = [fleet]
        latency = await _phase(
            master.address, "latency", 1, cfg.latency_seconds, cfg, real, progress, None, tls
        )
        cpu = ThroughputCpu(master, agents, real)
        throughput_phase = await _phase(
            master.address,
            "throughput",
            cfg.concurrency,
            cfg.seconds,
            cfg,
            real,
            progress,
            cpu,
            tls,
        )
    finally:
        for agent in agents:
            await agent.stop()
        await master.stop()
        shutil.rmtree(work, ignore_errors=True)

    recorder, start, window = (
        throughput_phase["recorder"],
        throughput_phase["start"],
        throughput_phase["window"],
    )
    ended = [t for t in recorder.finished_at if start <= t <= start + window]
    throughput = len(ended) / window
    cpu_account = cpu.account(len(ended))
    components = cpu_account["components"]
    figures = {
        "accept_to_running": summarize(latency["recorder"].values("accept_to_running")),
        "accept_to_starting": summarize(latency["recorder"].values("accept_to_starting")),
        "accept_to_running_loaded": summarize(recorder.values("accept_to_running")),
    }
    run_result = {
        "label": f"{'real' if real else 'emulated'} agents={cfg.real_agents or cfg.agents}"
        + (" mTLS" if tls else ""),
        "tls": tls is not None,
        "agents": cfg.real_agents or cfg.agents,
        "real_agents": real,
        "concurrency": cfg.concurrency,
        "window_seconds": round(window, 3),
        "latency_window_seconds": round(latency["window"], 3),
        "tasks_finished": len(ended),
        "tasks_per_second": round(throughput, 2),
        "failed_tasks": throughput_phase["failed"] + latency["failed"],
        "master_cpu_cores": round(components["master"]["cores"], 3),
        "agents_cpu_cores": round(
            sum(c["cores"] for c in components.values() if c["kind"] == "agents"), 3
        ),
        "cpu": cpu_account,
        "work_dir_filesystem": filesystem,
        "raw_spawn": raw,
        "raw_python_spawn": python,
        "throughput_vs_raw_spawn": round(throughput / raw["per_second"], 4) if raw else None,
        "throughput_vs_python_spawn": (
            round(throughput / python["per_second"], 4) if python else None
        ),
        "counts": dict(recorder.counts),
        "window_counts": dict(throughput_phase["counts"]),
        # How the launches went: few offers and Accepts per task is the cheap regime (each
        # Accept launches many tasks); near one of each per task, every task pays a whole
        # offer -> Accept -> re-offer cycle (docs/experiments.md, "Why a faster agent ...").
        "per_task": _per_task(throughput_phase["counts"]),
        "figures_ms": figures,
    }
    return run_result, latency, throughput_phase, cpu, recorder, start, window


def _per_accept_md(cfg: LaunchConfig) -> str:
    if cfg.tasks_per_accept <= 0:
        return ""
    return f", at most {cfg.tasks_per_accept} task(s) an Accept (`--tasks-per-accept`)"


def _per_task(counts) -> dict:
    """Offers, OFFERS events and Accepts per task launched in the throughput window."""
    launched = counts["launched"] or 1
    return {
        "offers": round(counts["offers"] / launched, 3),
        "offer_events": round(counts["offer_events"] / launched, 3),
        "accepts": round(counts["accepts"] / launched, 3),
        "tasks_per_accept": round(counts["launched"] / max(counts["accepts"], 1), 2),
    }


async def run(cfg: LaunchConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    results = Results("launch", out, asdict(cfg), command)
    progress = Progress("launch", quiet)
    real = cfg.real_agents > 0
    workers = psutil.cpu_count() or 1
    raw = python = None
    if real:
        progress.show(f"raw spawn rate of `true` for {cfg.spawn_seconds:g} s", force=True)
        raw = await spawn_rate([shutil.which("true") or "/bin/true"], cfg.spawn_seconds, workers)
        progress.show(f"raw spawn rate of `python -c pass` for {cfg.spawn_seconds:g} s", force=True)
        python = await spawn_rate([sys.executable, "-c", "pass"], cfg.spawn_seconds, workers)
        progress.done(
            f"raw spawn: true {raw['per_second']}/s, python {python['per_second']}/s "
            f"({workers} workers)"
        )

    tls_dir = None
    runs = []
    for mode in cfg.tls:
        tls = None
        if mode == "on":
            tls_dir = tls_dir or Path(tempfile.mkdtemp(prefix="agora-launch-tls-"))
            tls = ExperimentTls.make(tls_dir)
        runs.append(await _one_run(cfg, out, progress, real, raw, python, tls))
    if tls_dir is not None:
        shutil.rmtree(tls_dir, ignore_errors=True)
    run_result, latency, throughput_phase, cpu, recorder, start, window = runs[0]
    throughput = run_result["tasks_per_second"]
    acc = run_result["figures_ms"]["accept_to_running"]
    results.add_run(run_result)
    for other in runs[1:]:  # the same, with mutual TLS (or without): compared in the summary
        results.add_run(other[0])
    for phase in (latency, throughput_phase):
        results.add_samples(
            {
                "run": run_result["label"],
                "phase": phase["name"],
                "metric": s.metric,
                "ms": round(s.ms, 4),
                "at": round(s.at - phase["start"], 4),
                "agent_id": s.agent_id,
            }
            for s in phase["recorder"].samples
        )
    results.target(
        "accept -> RUNNING p50 (real agents)",
        acc["p50"] if real else None,
        10.0,
        "ms",
        measured_in=f"{run_result['label']}, one task at a time" if real else "needs --real-agents",
    )
    results.target(
        "real-process throughput / raw spawn rate",
        run_result["throughput_vs_raw_spawn"],
        0.5,
        "ratio",
        at_most=False,
        measured_in=f"{run_result['label']}, {cfg.concurrency} tasks in flight"
        if real
        else "needs --real-agents",
    )
    names = _plots(out, latency["recorder"], recorder, start, window, run_result)
    results.write(_summary(cfg, results, run_result), names)
    progress.done(
        f"accept -> RUNNING p50 {acc['p50']} ms p99 {acc['p99']} ms, "
        f"{throughput:.1f} tasks/s"
        + (f" = {run_result['throughput_vs_raw_spawn']:.1%} of raw spawn" if raw else "")
    )
    return results


def _plots(
    out: Path, unloaded: Recorder, recorder: Recorder, start: float, window: float, run: dict
) -> list[str]:
    names = []
    series = [
        ("one task at a time", unloaded.values("accept_to_running")),
        (f"{run['concurrency']} in flight", recorder.values("accept_to_running")),
    ]
    if any(values for _, values in series):
        names.append(
            plots.cdf(
                out / "launch_accept_to_running_cdf.png",
                f"Accept -> RUNNING ({run['label']})",
                "latency (ms, log)",
                series,
            )
        )
    bins = max(1, int(window))
    counts = [0] * bins
    for t in recorder.finished_at:
        k = int(t - start)
        if 0 <= k < bins:
            counts[k] += 1
    throughput: list[plots.Series] = [("tasks finished per second", list(range(bins)), counts)]
    if run["raw_spawn"]:
        throughput.append(
            ("raw spawn rate of `true`", [0, bins - 1], [run["raw_spawn"]["per_second"]] * 2)
        )
        throughput.append(
            (
                "raw spawn rate of `python -c pass`",
                [0, bins - 1],
                [run["raw_python_spawn"]["per_second"]] * 2,
            )
        )
    names.append(
        plots.lines(
            out / "launch_throughput.png",
            f"Throughput ({run['label']})",
            "seconds into the window",
            "tasks/s",
            throughput,
            styles=["o-", "--", ":"],
        )
    )
    names.append(cpu_plot(out, run))
    return names


def _summary(cfg: LaunchConfig, results: Results, run: dict) -> str:
    raw = run["raw_spawn"]
    spawn = ""
    if raw:
        spawn = (
            f"\nRaw spawn rate (same run, before the cluster started, {raw['workers']} "
            f"concurrent asyncio loops of create_subprocess_exec + wait): `true` "
            f"{raw['per_second']}/s, `python -c pass` "
            f"{run['raw_python_spawn']['per_second']}/s. Real-task throughput is "
            f"{run['throughput_vs_raw_spawn']:.1%} of the `true` rate and "
            f"{run['throughput_vs_python_spawn']:.1%} of the bare-Python rate (each task's "
            f"wrapper is the C one, spawned by the agent itself, or where no C compiler is "
            f"found a Python one forked by the agent's long-lived launcher, "
            f"`python -m agora.agent.executor --serve`; no Python start-up per task).\n"
        )
        fs = run["work_dir_filesystem"]
        spawn += (
            f"\nThe agents' work dirs were under `{fs['path']}`, where creating a sandbox (a "
            f"directory and two empty files, the agent's metadata work per task) took p50 "
            f"{fs['sandbox_create_ms']['p50']} ms (p90 {fs['sandbox_create_ms']['p90']} ms) "
            f"just before the run.\n"
        )
    return f"""# launch

Machine: {results.data["machine"]["cpu_model"]}, {results.data["machine"]["cores"]} cores,
Python {results.data["machine"]["python"]}. Command: `{" ".join(results.data["command"])}`

## What is measured, and how

One load framework (real SDK, in the runner's process) keeps {cfg.concurrency} tasks in flight
on {run["label"]}: {"`true` as a real process" if run["real_agents"] else "zero-length tasks"}
({cfg.cpus:g} cpus, {cfg.mem:g} MB each). It holds the offers it gets and launches a new task
as soon as one ends{_per_accept_md(cfg)}.

- **accept_to_running** (ms): the framework issues Accept (LAUNCH) -> it receives that task's
  TASK_RUNNING update (time.monotonic() in the framework's process, stamped as the event is read
  off the stream), with one task at a time for {cfg.latency_seconds:g} s (no queueing). By the
  protocol this is Accept -> RunTask -> agent launches -> STARTING -> framework acknowledges ->
  RUNNING, so it holds two master <-> framework round trips.
- **accept_to_starting** (ms): the same one-at-a-time tasks, Accept -> their first
  TASK_STARTING (the agent sends it before it starts the command): the rest of accept_to_running
  is the launch itself plus the acknowledgement of STARTING.
- **accept_to_running_loaded** (ms): the same during the throughput phase, with
  {cfg.concurrency} tasks in flight (queueing included).
- **tasks_per_second**: terminal updates received per second over a {cfg.seconds:g} s window
  after {cfg.warmup:g} s of warm-up.
{spawn}
## Targets

{targets_md(results.data["targets"])}

## Figures

{stats_table([(run["label"] + ", " + k, v) for k, v in run["figures_ms"].items()])}

Throughput: {run["tasks_per_second"]} tasks/s ({run["tasks_finished"]} finished in
{run["window_seconds"]} s, {run["failed_tasks"]} not FINISHED). Master CPU
{run["master_cpu_cores"]} cores, agents' CPU {run["agents_cpu_cores"]} cores (their own process
only; task wrappers are separate processes). Per task launched in the window the framework got
{run["per_task"]["offers"]} offers (in {run["per_task"]["offer_events"]} OFFERS events) and
issued {run["per_task"]["accepts"]} Accepts, {run["per_task"]["tasks_per_accept"]} tasks an
Accept: the closer to one Accept a task, the more of its cost is the offer -> Accept cycle.

{cpu_md(run)}{_tls_md(results)}"""


def _tls_md(results: Results) -> str:
    """The runs side by side when the same run measured plaintext and mutual TLS."""
    if len(results.runs) < 2:
        return ""
    rows = "\n".join(
        f"| {r['label']} | {r['figures_ms']['accept_to_running']['p50']} / "
        f"{r['figures_ms']['accept_to_running']['p99']} | {r['tasks_per_second']} | "
        f"{r['master_cpu_cores']} | {r['agents_cpu_cores']} |"
        for r in results.runs
    )
    return f"""
## Plaintext and mutual TLS, back to back

| run | accept -> RUNNING p50 / p99 (ms) | tasks/s | master CPU (cores) | agents CPU (cores) |
|---|---:|---:|---:|---:|
{rows}
"""
