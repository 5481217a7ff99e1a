"""throughput: summary.md and the plots, from the runs, the single-task figures and the samples."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from agora.experiments import plots as draw
from agora.experiments.results import Results, fmt_ms, targets_md

if TYPE_CHECKING:
    from agora.experiments.throughput import ThroughputConfig

SHORT = {
    ("agora", "batch"): "batch\n(agora job submit)",
    ("agora", "readme"): "README's\nframework",
    ("agora", "sdk"): "SDK framework\nholding offers",
    ("slurm", "array"): "Slurm\njob array",
}
SINGLE_ORDER = ("batch_api", "command", "sdk", "srun", "sbatch")
# Stacking order of the CPU plot, by component kind.
KINDS = {
    "master": "master",
    "agents": "agents' own processes",
    "tasks": "task wrappers + tasks (reaped by the agents)",
    "launchers": "agents' task launchers",
    "framework": "framework (batch daemon / README process / SDK in the runner)",
    "command": "commands (agora job submit; sbatch, squeue)",
    "daemons": "Slurm's daemons",
    "runner": "runner (waiting, polling)",
    "kernel": "kernel threads + interrupts",
    "load": "background load (--background-load)",
    "other": "other: exited processes not reaped by the above, the rest",
}
# A log axis has no 0: a sample below this many ms is drawn at it (counted all the same).
FLOOR_MS = 0.001


def _label(run: dict) -> str:
    return SHORT.get((run["system"], run["path"]), run["label"]).replace("\n", " ")


def _num(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _floor(values: list[float]) -> list[float]:
    return [max(v, FLOOR_MS) for v in values]


def plots(out: Path, runs: list[dict], singles: dict, rows: list[dict]) -> list[str]:
    names = []
    groups = [SHORT.get((r["system"], r["path"]), r["label"]) for r in runs]
    values = [r["tasks_per_second"] or 0.0 for r in runs]
    names.append(
        draw.bars(
            out / "throughput_tasks_per_second.png",
            f"{runs[0]['tasks']} x `true`: tasks/s, submit -> the last task's end",
            "tasks/s",
            groups,
            [("tasks/s", values)],
            notes=[[_num(r["tasks_per_second"], 1) for r in runs]],
            hline=(200.0, "issue 31's target for the batch and README paths"),
        )
    )
    loaded = [
        (
            f"{_label(r)}",
            _floor(
                [
                    (row["running_s"] - row["launched_s"]) * 1000
                    for row in rows
                    if row["kind"] == "task"
                    and row["path"] == r["path"]
                    and row["system"] == r["system"]
                    and row["running_s"] is not None
                    and row["launched_s"] is not None
                ]
            ),
        )
        for r in runs
        if r["system"] == "agora"
    ]
    if any(values for _, values in loaded):
        names.append(
            draw.cdf(
                out / "throughput_launch_to_running_cdf.png",
                f"Launch -> RUNNING under load, {runs[0]['tasks']} tasks, 20 at once",
                "latency (ms, log)",
                loaded,
            )
        )
    single = [
        (
            singles[key]["label"],
            _floor(
                [
                    row["submit_to_start_ms"]
                    for row in rows
                    if row["kind"] == "single" and row["path"] == key
                ]
            ),
        )
        for key in SINGLE_ORDER
        if key in singles
    ]
    if any(values for _, values in single):
        names.append(
            draw.cdf(
                out / "throughput_single_cdf.png",
                "One task at a time on an idle cluster: submit -> start",
                "latency (ms, log)",
                single,
            )
        )
    names.append(
        draw.stacked_bars(
            out / "throughput_cpu.png",
            "CPU per task, by process (busy time less processes outside the run)",
            "CPU ms per task",
            [SHORT.get((r["system"], r["path"]), r["label"]) for r in runs],
            [(label, [_kind_ms(r["cpu"], kind) for r in runs]) for kind, label in KINDS.items()],
        )
    )
    return names


def _kind_ms(account: dict, kind: str) -> float:
    return sum(c["ms_per_task"] or 0.0 for c in account["components"].values() if c["kind"] == kind)


def _throughput_table(runs: list[dict]) -> str:
    lines = [
        "| path | tasks | finished | seconds | tasks/s | tasks/s from the first launch "
        "| launch -> RUNNING p50 / p99 (ms) | submit -> RUNNING p50 (ms) | CPU ms per task |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        f = r["figures_ms"]
        unfinished = "" if r.get("ended_in_time", True) else " (**stopped at the timeout**)"
        lines.append(
            f"| {_label(r)}{unfinished} | {r['tasks']} | {r['finished']} | {_num(r['seconds'])} "
            f"| {_num(r['tasks_per_second'], 1)} | {_num(r['launch_span_tasks_per_second'], 1)} "
            f"| {fmt_ms(f['launch_to_running'])} / {fmt_ms(f['launch_to_running'], 'p99')} "
            f"| {fmt_ms(f['submit_to_running'])} | {_num(r['cpu_ms_per_task']['experiment'])} |"
        )
    return "\n".join(lines)


def _load_line(cfg: ThroughputConfig) -> str:
    """The --background-load, when there was one (its processes are `other` in the CPU table)."""
    if not cfg.background_load:
        return ""
    return (
        f" Background load: {cfg.background_load:g} core(s) kept busy by processes of their own "
        "while each path ran (`--background-load`; their CPU is the `background load` rows, and "
        "part of each path's CPU ms per task)."
    )


def _isolation_line(runs: list[dict]) -> str:
    """What the agents said their tasks got, once per distinct answer (AgentInfo.isolation)."""
    seen = sorted({", ".join(i) for r in runs for i in r.get("agents_isolation", [])})
    return "Agents' isolation: " + ("; ".join(f"`{s}`" for s in seen) or "not reported") + "."


def _singles_table(singles: dict) -> str:
    if not singles:
        return "Not measured (`--single 0`)."
    lines = [
        "| way | count | submit -> start p50 / p99 (ms) | submit -> launch p50 (ms) "
        "| launch -> start p50 (ms) | from -> to |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key in SINGLE_ORDER:
        if key not in singles:
            continue
        s = singles[key]
        lines.append(
            f"| {s['label']} | {s['submit_to_start']['count']} "
            f"| {fmt_ms(s['submit_to_start'])} / {fmt_ms(s['submit_to_start'], 'p99')} "
            f"| {fmt_ms(s['submit_to_launch'])} | {fmt_ms(s['launch_to_start'])} "
            f"| {s['measured']} |"
        )
    return "\n".join(lines)


def _cpu_table(runs: list[dict]) -> str:
    kinds = [*(k for k in KINDS if k != "other"), "outside", "other"]
    found: dict[str, str] = {}
    for r in runs:
        for name, c in r["cpu"]["components"].items():
            found.setdefault(name, c["kind"])
    order = {name: i for i, name in enumerate(found)}
    names = sorted(
        found, key=lambda n: (kinds.index(found[n]) if found[n] in kinds else 99, order[n])
    )
    header = " | ".join(_label(r) for r in runs)
    lines = [f"| CPU ms per task | {header} |", "|---" + "|---:" * len(runs) + "|"]
    for name in names:
        cells = []
        for r in runs:
            c = r["cpu"]["components"].get(name)
            cells.append("-" if c is None else _num(c["ms_per_task"]))
        lines.append(f"| {name} | {' | '.join(cells)} |")
    daemons = " | ".join(_num(r["cpu_ms_per_task"]["daemons"]) for r in runs)
    experiment = " | ".join(_num(r["cpu"]["experiment"]["ms_per_task"]) for r in runs)
    busy = " | ".join(_num(r["cpu"]["machine"]["busy_ms_per_task"]) for r in runs)
    lines.append(f"| **daemons** (master, agents, framework; Slurm's daemons) | {daemons} |")
    lines.append(f"| **experiment** (machine busy less outside) | {experiment} |")
    lines.append(f"| machine busy | {busy} |")
    return "\n".join(lines)


def _cpu_notes(runs: list[dict]) -> str:
    notes = []
    for r in runs:
        notes += [f"- {_label(r)}: {note}" for note in r["cpu"]["notes"]]
        outside = "; ".join(
            f"`{p.get('command') or p['name']}` {p['cores']:.3f}" for p in r["cpu"]["outside_top"]
        )
        if outside:
            notes.append(f"- {_label(r)}: busiest outside the run (cores): {outside}")
    return "\n".join(notes)


def _peer_md(cfg: ThroughputConfig, results: Results) -> str:
    from agora.experiments.throughput import ratio_lines

    slurm = next((r for r in results.runs if r["system"] == "slurm"), None)
    if slurm is None:
        return ""
    lines = "\n".join(f"- {line}" for line in ratio_lines(results.data.get("peer")))
    return f"""
## Beside Slurm

{slurm["version"]}, one node on loopback run by this experiment from its own files
(`slurm.conf` beside this summary): its own munged, slurmctld and slurmd; no accounting, no
job completion log, `proctrack/linuxproc`, `task/none`, `SchedulerParameters=batch_sched_delay=0`
(no `defer`), `Epilog=/bin/true`, `select/cons_tres` with `CR_CPU_Memory`. Slurm cannot give a
task 0.1 cpu: the node has {slurm["setup"]["cpus"]} CPUs, one per task that may run at once
({cfg.at_once} here, as on Agora's agents), and every task asks for {slurm["setup"]["per_task"]}.
Throughput is one job array (`sbatch --array=0-{cfg.tasks - 1} --wrap true`), timed from the
sbatch to the first squeue poll that finds none of it left; Slurm keeps no per-task times
without accounting, so it has no launch -> RUNNING figures. Its CPU account names slurmctld,
slurmd and munged; each job's slurmstepd and the tasks are in other (they are no process's
children here). The single tasks through srun and sbatch are submitted a random 0.05-1.05 s
apart: Slurm's scheduler starts a queued batch job at its next pass, at most once a second
here, so the wait depends on where in that second the submit falls. Ratios, Agora / Slurm
(above 1: Agora is faster for tasks/s, slower for latency and CPU):

{lines}
"""


def summary(cfg: ThroughputConfig, results: Results) -> str:
    machine = results.data["machine"]
    runs = results.runs
    return f"""# throughput

Machine: {machine["cpu_model"]}, {machine["cores"]} cores, Python {machine["python"]}
(load average at start {machine["load_average_at_start"]}).
Command: `{" ".join(results.data["command"])}`

## What is measured, and how

Issue 31's workload on real processes: {cfg.tasks} x `true`, every task {cfg.cpus:g} cpu and
{cfg.mem:g} MB, on a master and {cfg.agents} real agents of `{cfg.agent_resources}` (so
{cfg.per_agent} tasks at once on each, {cfg.at_once} in all), each its own process. Every path
runs on a fresh cluster, after one warm-up task on each agent.

- **batch**: the `agora batch` daemon, and the job submitted with the command a user types,
  `agora job submit --instances {cfg.tasks} --cpus {cfg.cpus:g} --mem {cfg.mem:g} -- true`.
  The run is followed through the Batch API (ListJobs' counts, every 0.1 s); each task's
  launch, RUNNING and end are the daemon's own stamps (Attempt.launched_at, started_at,
  ended_at).
- **readme**: the README's "Write your own framework" code, parts 1-3 as written, under the
  README's part 4 with `Hello({cfg.tasks})` and `true` for each task's command, as its own
  process; it notes when it launches each task and when its `on_update` sees RUNNING and the end.
- **sdk**: an SDK framework that holds the offers it cannot use yet and launches on them as
  tasks end (the experiments' load framework, in the runner's process), timed as events are
  read off its stream.

Figures per path:

- **tasks/s**: tasks that ended / seconds from the submit (the command started, the framework's
  process started, the framework subscribing) to the last task's end;
- **tasks/s from the first launch**: the same from the first task's launch (leaves out the
  command's or the process's start-up and the subscription);
- **launch -> RUNNING** (ms): the path's launch decision for a task -> it sees the task
  RUNNING; with {cfg.at_once} at once, queueing on the agents is in it;
- **submit -> RUNNING** (ms): the submit -> the task RUNNING: mostly the wait for a free slot
  ({cfg.tasks} tasks, {cfg.at_once} at a time);
- **CPU ms per task**: CPU seconds over the run's window / tasks ended, per process
  (experiments/cpu_account.py): the master, each agent's own process and apart from it the
  task wrappers it reaped with their tasks, the framework (batch daemon, README process, or the
  runner for the SDK path), the commands; other is what no named process accounts for.

Then one task at a time on the idle cluster ({cfg.single} each, after one warm-up): through the
Batch API (SubmitJob, then WatchJob as `agora job submit --wait` does), through the
`agora job submit` command, and through an SDK framework at rest (suppressed, holding nothing:
a task revives it, it launches on the first offer that comes).

## Targets (issue 31)

{targets_md(results.data["targets"])}

## Throughput

{_throughput_table(runs)}

{_isolation_line(runs)}{_load_line(cfg)}

## One task at a time (idle cluster)

{_singles_table(results.data.get("single_task", {}))}

## CPU per task, per process

{_cpu_table(runs)}

{_cpu_notes(runs)}
{_peer_md(cfg, results)}"""
