"""`agora experiment simulate`: a trace through the real allocator on a virtual clock, in each
offer mode and for each decision time of the service framework (Omega's axes).

The trace comes from a file (`--trace`, trace.py's format) or from the generator
(generator.py, `--agents --hours --load --seed`; `--write-trace` keeps it). Every run replays
the same trace; the report compares utilisation, job waits by size class, fairness against the
DRF optimum, offers and cycles per second and the allocator's CPU per cycle, mode by mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agora.experiments.results import Progress, Results
from agora.experiments.simulate import report
from agora.experiments.simulate.engine import MODES, SimConfig, Simulation
from agora.experiments.simulate.figures import run_figures
from agora.experiments.simulate.generator import SERVICE, Shape, generate, rates
from agora.experiments.simulate.trace import Trace, read_trace, write_trace

__all__ = ["SimulateConfig", "run", "simulate_once"]


@dataclass
class SimulateConfig:
    trace: Path | None = None  # a trace file; None: generate one from `shape`
    shape: Shape = field(default_factory=Shape)
    write_trace: Path | None = None
    modes: list[str] = field(default_factory=lambda: list(MODES))
    decision_times: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0])
    swept_role: str = SERVICE  # whose job decision time is swept
    sim: SimConfig = field(default_factory=SimConfig)
    cross_check: bool = False  # also run the trace on a real master (crosscheck.py)


class _Stopped(Exception):
    """The run was cancelled (SIGTERM, Ctrl-C) while a simulation ran in its thread."""


async def _in_thread(simulate, trace: Trace, sim: SimConfig, show):
    """Runs a simulation in a thread, so that the event loop stays free to take a SIGTERM;
    a cancellation stops the simulation at its next progress call (a simulated minute)."""
    stop = threading.Event()

    def progress(t: float) -> None:
        if stop.is_set():
            raise _Stopped
        show(t)

    job = asyncio.ensure_future(asyncio.to_thread(simulate, trace, sim, progress))
    try:
        return await asyncio.shield(job)
    except asyncio.CancelledError:
        stop.set()
        with contextlib.suppress(_Stopped):
            await job
        raise


def load(cfg: SimulateConfig) -> Trace:
    if cfg.trace is not None:
        return read_trace(cfg.trace)
    trace = generate(cfg.shape)
    if cfg.write_trace is not None:
        write_trace(trace, cfg.write_trace)
    return trace


def simulate_once(trace: Trace, sim: SimConfig, progress=None) -> tuple[dict, list[dict]]:
    """One replay: its figures, and its samples over time."""
    started_cpu, started = time.process_time(), time.monotonic()
    simulation = Simulation(trace, sim)
    recorder = simulation.run(progress)
    cpu = time.process_time() - started_cpu
    roles = list(trace.cluster.roles)
    figures = run_figures(recorder, trace.cluster.seconds, roles)
    figures.update(
        mode=sim.mode,
        cpu_seconds=round(cpu, 2),
        wall_seconds=round(time.monotonic() - started, 2),
        virtual_seconds_per_cpu_second=round(trace.cluster.seconds / cpu, 1) if cpu else None,
        events=simulation.clock.events_run,
    )
    return figures, recorder.samples


async def run(cfg: SimulateConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    progress = Progress("simulate", quiet)
    trace = load(cfg)
    if cfg.swept_role not in trace.cluster.roles:
        raise ValueError(
            f"--swept-role {cfg.swept_role!r} is not a role of the trace "
            f"({', '.join(trace.cluster.roles)})"
        )
    config = asdict(cfg)
    for name in ("trace", "write_trace"):
        config[name] = None if config[name] is None else str(config[name])
    config["trace_summary"] = {
        "agents": trace.cluster.agents,
        "agent": trace.cluster.agent,
        "roles": trace.cluster.roles,
        "seconds": trace.cluster.seconds,
        "jobs": len(trace.jobs),
        "tasks": trace.tasks,
        **rates(trace),
    }
    results = Results("simulate", out, config, command)
    total = len(cfg.modes) * len(cfg.decision_times)
    series: dict[tuple[str, float], list[dict]] = {}  # (mode, decision) -> samples
    n = 0
    for mode in cfg.modes:
        for decision in cfg.decision_times:
            n += 1
            label = f"{mode}, {cfg.swept_role} deciding in {decision:g} s ({n}/{total})"

            def show(t: float, label: str = label) -> None:
                progress.show(f"{label}: {t / trace.cluster.seconds:.0%} of the trace")

            sim = SimConfig(
                **{
                    **asdict(cfg.sim),
                    "mode": mode,
                    "role_job_decision": {cfg.swept_role: decision},
                }
            )
            figures, samples = await _in_thread(simulate_once, trace, sim, show)
            figures["swept_decision_seconds"] = decision
            results.add_run(figures)
            series[(mode, decision)] = samples
            results.add_samples(
                {"mode": mode, "swept_decision_seconds": decision, **row} for row in samples
            )
            progress.done(
                f"{label}: utilisation {figures['utilisation'].get('cpus', 0):.1%}, "
                f"{figures['cpu_seconds']} s CPU"
            )
    if cfg.cross_check:
        from agora.experiments.simulate.crosscheck import TOLERANCE, cross_check

        progress.show("cross-check: the same trace on a real master and emulated agents", True)
        logs = out / "cross-check-logs"
        logs.mkdir(parents=True, exist_ok=True)
        checked = await cross_check(trace, logs)
        results.data["cross_check"] = {**checked, "tolerance": TOLERANCE}
        progress.done(f"cross-check: {'agrees' if checked['agree'] else 'DISAGREES'}")
    plots = report.plots_of(results, series, cfg.swept_role)
    report.targets(results)
    results.write(report.summary(results, cfg.swept_role), plots)
    return results
