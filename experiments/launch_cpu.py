"""launch: where the CPU goes in the throughput window, per component and per finished task."""

from __future__ import annotations

import os
from pathlib import Path

from agora.experiments import plots
from agora.experiments.cpu_account import Component, CpuWindow
from agora.experiments.processes import Daemon, launcher_pids

# Plot segments, in stacking order; "kernel" is kernel threads plus interrupts. The long-lived
# processes outside the experiment are left out: the bars are what the experiment cost.
KINDS = {
    "master": "master",
    "agents": "agents' own processes",
    "launchers": "agents' task launchers",
    "runner": "runner (load framework / spawn loop)",
    "spawned": "spawned processes (reaped)",
    "kernel": "kernel threads + interrupts",
    "other": "other: task wrappers, tasks, exited processes",
}


class ThroughputCpu:
    """The CPU account of the throughput window: the master, each agent (or the emulated
    fleet), each agent's launcher and this process, plus what the machine says.

    Launchers are found when the window begins (the agent starts one lazily, and the latency
    phase has launched by then); one restarted during the window is not metered under its
    name, and the account's notes say so."""

    def __init__(self, master: Daemon, agents: list[Daemon], real: bool) -> None:
        self.master = master
        self.agents = agents
        self.real = real
        self.window: CpuWindow | None = None
        self.launchers: dict[str, list[int]] = {}
        self.launchers_at_end: dict[str, list[int]] = {}

    def _find_launchers(self) -> dict[str, list[int]]:
        if not self.real:
            return {}
        return {f"agent-{i}": launcher_pids(a.pid) for i, a in enumerate(self.agents)}

    def _components(self) -> list[Component]:
        components = [Component("master", "master", self.master.pid, "the master process")]
        if not self.real:
            (fleet,) = self.agents
            components.append(
                Component("fleet", "agents", fleet.pid, "the emulated agents' fleet process")
            )
        for i, agent in enumerate(self.agents if self.real else []):
            components.append(
                Component(f"agent-{i}", "agents", agent.pid, f"agent {i}'s own process")
            )
        for agent_name, pids in self.launchers.items():
            for k, pid in enumerate(pids):
                name = agent_name.replace("agent", "launcher") + (f".{k}" if k else "")
                what = f"{agent_name}'s task launcher (`python -m agora.agent.executor --serve`)"
                components.append(Component(name, "launchers", pid, what))
        components.append(
            Component(
                "runner", "runner", os.getpid(), "this process: the load framework and recorder"
            )
        )
        return components

    def begin(self) -> float:
        self.launchers = self._find_launchers()
        self.window = CpuWindow(self._components())
        return self.window.begin()

    def end(self) -> float:
        assert self.window is not None
        at = self.window.end()
        self.launchers_at_end = self._find_launchers()
        return at

    def account(self, tasks: int) -> dict:
        assert self.window is not None
        result = self.window.account(tasks, unit="task")
        for agent, pids in self.launchers.items():
            if not pids:
                result["notes"].append(
                    f"{agent} had no task launcher when the window began: not metered"
                )
            new = sorted(set(self.launchers_at_end.get(agent, [])) - set(pids))
            if new:
                result["notes"].append(
                    f"{agent} started a new task launcher during the window (pid "
                    f"{', '.join(map(str, new))}): not metered by name, its CPU is in other"
                )
        return result


def _per_unit(account: dict) -> str:
    return f"ms_per_{account['unit']}"


def _kind_ms(account: dict, kind: str) -> float:
    per = _per_unit(account)
    return sum(c[per] or 0.0 for c in account["components"].values() if c["kind"] == kind)


def cpu_plot(out: Path, run: dict) -> str:
    """One stacked bar per unit of work: CPU ms per raw `true`, per `python -c pass`, per task."""
    bars: list[tuple[str, dict]] = []
    for key, label in (("raw_spawn", "raw `true`"), ("raw_python_spawn", "raw `python -c pass`")):
        if run.get(key):
            bars.append((f"{label}\nper process", run[key]["cpu"]))
    bars.append(("launch\nper task", run["cpu"]))
    series = [
        (label, [_kind_ms(account, kind) for _, account in bars]) for kind, label in KINDS.items()
    ]
    return plots.stacked_bars(
        out / "launch_cpu.png",
        f"Where the CPU goes, per process spawned and per task ({run['label']})",
        "CPU ms (machine busy time less processes outside the experiment)",
        [label for label, _ in bars],
        series,
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _row(name: str, c: dict, per: str) -> str:
    share = "-" if c["share"] is None else f"{c['share']:.1%}"
    return (
        f"| {name} | {c['cores']:.3f} | {c['user_cores']:.3f} | {c['system_cores']:.3f} "
        f"| {_ms(c[per])} | {share} |"
    )


def cpu_table(account: dict) -> str:
    """Markdown: one row per component, then the machine's busy total."""
    per, unit = _per_unit(account), account["unit"]
    lines = [
        f"| component | cores | user | system | CPU ms per {unit} | share |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(name, c, per) for name, c in account["components"].items()]
    m = account["machine"]
    ms, cores = _ms(m[f"busy_{per}"]), m["busy_cores"]
    # The machine's user/system split is by clock ticks, its busy total may not be: no split.
    lines.append(f"| **machine busy** | {cores:.3f} | | | {ms} | 100% |")
    e = account["experiment"]
    share = "-" if not m["busy_cpu_seconds"] else f"{e['cpu_seconds'] / m['busy_cpu_seconds']:.1%}"
    lines.append(
        f"| **experiment** (busy - outside) | {e['cores']:.3f} | | | {_ms(e[per])} | {share} |"
    )
    return "\n".join(lines)


def cpu_md(run: dict) -> str:
    """The summary's section on where the CPU goes."""
    account = run["cpu"]
    machine = account["machine"]
    cores = machine["cores"]
    basis = {
        "cpuacct": "the root cgroup's cpuacct.usage: every task's precise run time"
        + (", plus interrupts" if account["interrupts_apart"] else ""),
        "cpu_times": "psutil.cpu_times(), by clock ticks",
    }[machine["busy_basis"]]
    interrupts = (
        "kernel threads (ksoftirqd is in interrupts)"
        if account["interrupts_apart"]
        else "kernel threads"
    )
    spawn = ""
    raw, python = run.get("raw_spawn"), run.get("raw_python_spawn")
    if raw and python:
        parts = {
            key: raw["cpu"]["components"][key]["ms_per_process"] for key in ("runner", "spawned")
        }
        spawn = (
            f"\nBeside it, the raw spawn phase (same accounting, busy - outside): `true` cost "
            f"{_ms(raw['cpu_ms_per_process'])} ms of CPU per process ({_ms(parts['runner'])} "
            f"ms in the spawning loop, {_ms(parts['spawned'])} ms in the process itself as "
            f"reaped), `python -c pass` {_ms(python['cpu_ms_per_process'])} ms; a task here "
            f"cost {_ms(account['experiment']['ms_per_task'])} ms.\n"
        )
    notes = "".join(f"- {note}\n" for note in account["notes"])
    outside = "; ".join(
        f"`{p.get('command') or p['name']}` {p['cores']:.3f}" for p in account["outside_top"]
    )
    if outside:
        notes += f"- busiest outside the experiment (cores): {outside}\n"
    return f"""## Where the CPU goes (throughput window)

Over the {account["window_seconds"]} s window, {account["count"]} tasks finished and the
machine's {account["cpus"]} cores were busy {machine["busy_cores"]:.3f} cores ({basis}).
By clock ticks (psutil.cpu_times()): busy {cores["busy"]:.3f} = user
{cores["user"] + cores["nice"]:.3f} + system {cores["system"]:.3f} + irq and softirq
{cores["irq"] + cores["softirq"]:.3f}; not busy: idle {cores["idle"]:.3f}, iowait
{cores["iowait"]:.3f}, steal {cores["steal"]:.3f}.

{cpu_table(account)}
{spawn}
How: the machine's counters and cpu_times() of each long-lived process, read at both ends
of the window; one scan of all processes splits off {interrupts} and the
long-lived processes outside the experiment (the machine is shared). Other is what is left of
the machine's busy time: the short-lived processes (each task's wrapper, spawned by its agent
or its launcher, and the task itself; their CPU is summed by no surviving process) and kernel work
charged to no thread. CPU ms per task = CPU seconds in the window / tasks finished in it;
share = of the machine's busy time.
{notes}"""
