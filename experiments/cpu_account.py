"""Where the CPU goes over a window: the whole machine, named processes, and what is left.

A window is read at both ends (`CpuWindow.begin()` / `end()`): psutil.cpu_times() for the
machine; cpu_times() of each named long-lived process (the master, the agents, their
launchers, the runner itself); and one scan of every process on the machine, which splits off
kernel threads and the long-lived processes outside the experiment (the machine is shared:
another user's benchmark shows up there, not as ours). What remains of the machine's busy time
is "other": processes that started and ended inside the window (in the launch experiment,
each task's wrapper and the task itself, whose CPU no surviving process accumulates) and
kernel work charged to no thread. `account()` is the arithmetic, apart from the reading.

Everything is also given per unit of work (CPU ms per finished task, per spawned process):
cores say how busy the machine was, ms per task says what one task costs and where.
"""

from __future__ import annotations

import gzip
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

# /proc/stat's busy categories; guest and guest_nice are already inside user and nice.
MACHINE_BUSY = ("user", "nice", "system", "irq", "softirq")
MACHINE_FIELDS = (*MACHINE_BUSY, "steal", "iowait", "idle")
# The root cgroup's cpuacct.usage (cgroup v1): nanoseconds every task ran, counted precisely
# as a process's own cpu_times are, where /proc/stat samples the CPU at each clock tick. Ticks
# miss some of the short runs of event loops that wake and sleep (3-6% of the busy time on
# the 2-core machine these were written on), which would make the named processes add up to
# more than the machine and shrink "other"; so when it is readable it is the busy basis.
CPUACCT_USAGE = Path("/sys/fs/cgroup/cpuacct/cpuacct.usage")
TASK_RUNTIME = "task_runtime"  # the reading's key for it, in seconds
KTHREADD_PID = 2
TOP_OUTSIDE = 5


@dataclass(frozen=True)
class Component:
    """A long-lived process metered by pid; `reaped_children` meters instead the CPU of the
    children it has waited for (the `true` processes the spawn loop starts)."""

    name: str
    kind: str  # what the plot groups by: master, agents, launchers, runner, spawned, load
    pid: int
    what: str
    reaped_children: bool = False


@dataclass(frozen=True)
class ProcTimes:
    pid: int
    ppid: int
    name: str
    create_time: float
    user: float
    system: float
    children_user: float = 0.0
    children_system: float = 0.0


@dataclass(frozen=True)
class Reading:
    at: float  # time.monotonic() beside the machine read
    machine: dict[str, float]
    named: dict[str, ProcTimes | None]  # None: the process was gone
    processes: dict[int, ProcTimes]


def _descendants(root: int, processes: dict[int, ProcTimes]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in processes.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _is_kernel_thread(p: ProcTimes) -> bool:
    return p.pid == KTHREADD_PID or p.ppid == KTHREADD_PID


def _row(kind: str, what: str, user: float, system: float, pid: int | None = None) -> dict:
    row: dict = {"kind": kind, "what": what, "user": max(user, 0.0), "system": max(system, 0.0)}
    if pid is not None:
        row["pid"] = pid
    return row


def account(
    before: Reading,
    after: Reading,
    components: Sequence[Component],
    count: int,
    unit: str = "task",
    root: int | None = None,
    interrupts_apart: bool = True,
) -> dict:
    """The CPU of [before, after] as cores and as CPU ms per `unit` (count of them finished
    in the window); `root` is the runner's pid, whose unnamed descendants are ours (they fall
    in "other" with the short-lived processes, not in "outside"). `interrupts_apart`: the
    kernel keeps interrupt time out of the processes' times (see `interrupts_apart()`); if
    not, it is inside the times of whatever ran, and is no component of its own."""
    root = os.getpid() if root is None else root
    window = max(after.at - before.at, 1e-9)
    machine = {k: after.machine[k] - before.machine[k] for k in MACHINE_FIELDS}
    tick_busy = sum(machine[k] for k in MACHINE_BUSY)
    if TASK_RUNTIME in before.machine and TASK_RUNTIME in after.machine:
        task_runtime = after.machine[TASK_RUNTIME] - before.machine[TASK_RUNTIME]
        # Where the kernel keeps interrupt time apart, task runtime leaves it out: add it.
        interrupts = machine["irq"] + machine["softirq"] if interrupts_apart else 0.0
        busy, basis = task_runtime + interrupts, "cpuacct"
    else:
        busy, basis = tick_busy, "cpu_times"
    notes: list[str] = []
    rows: dict[str, dict] = {}
    named_pids = set()
    for c in components:
        named_pids.add(c.pid)
        b, a = before.named.get(c.name), after.named.get(c.name)
        if b is None or a is None or a.create_time != b.create_time:
            notes.append(
                f"{c.name} (pid {c.pid}) was not running at both ends of the window: "
                "its CPU is not counted under its name (it is in other)"
            )
            user = system = 0.0
        elif c.reaped_children:
            user, system = a.children_user - b.children_user, a.children_system - b.children_system
        else:
            user, system = a.user - b.user, a.system - b.system
        rows[c.name] = _row(c.kind, c.what, user, system, c.pid)

    ours = _descendants(root, before.processes) | _descendants(root, after.processes)
    kernel = [0.0, 0.0]
    outside = [0.0, 0.0]
    outside_by_pid: list[tuple[float, ProcTimes]] = []
    for pid, a in after.processes.items():
        if pid in ours or pid in named_pids:
            continue
        b = before.processes.get(pid)
        if b is not None and b.create_time != a.create_time:
            b = None  # pid reused: a new process, all of whose CPU is the window's
        user = a.user - (b.user if b else 0.0)
        system = a.system - (b.system if b else 0.0)
        if _is_kernel_thread(a):
            # Where interrupts are apart, ksoftirqd's time is already in "interrupts".
            if interrupts_apart and a.name.startswith("ksoftirqd"):
                continue
            target = kernel
        else:
            target = outside
            outside_by_pid.append((max(user, 0.0) + max(system, 0.0), a))
        target[0] += max(user, 0.0)
        target[1] += max(system, 0.0)
    rows["kernel_threads"] = _row(
        "kernel", "kernel threads (kworker, rcu, ...; not ksoftirqd)", kernel[0], kernel[1]
    )
    if interrupts_apart:
        rows["interrupts"] = _row(
            "kernel", "hard and soft interrupts (machine irq + softirq)", 0.0,
            machine["irq"] + machine["softirq"],
        )  # fmt: skip
    else:
        notes.append(
            f"interrupts ({(machine['irq'] + machine['softirq']) / window:.3f} cores by clock "
            "ticks) are inside the times of the processes they interrupted: this kernel does "
            "not account them apart (no CONFIG_IRQ_TIME_ACCOUNTING)"
        )
    rows["outside"] = _row(
        "outside",
        "long-lived processes outside the experiment (other users, init)",
        outside[0],
        outside[1],
    )
    named_total = sum(r["user"] + r["system"] for r in rows.values())
    residual = busy - named_total
    if residual < 0:
        notes.append(
            f"the processes add up to {-residual:.3f} CPU s more than the machine's busy time "
            f"({basis}); other is shown as 0"
        )
    # No process reports other's user/system split: take it from what the clock ticks leave
    # of each once the named processes' are taken out.
    tick_user = machine["user"] + machine["nice"] - sum(r["user"] for r in rows.values())
    tick_system = (
        machine["system"] + machine["irq"] + machine["softirq"]
        - sum(r["system"] for r in rows.values())
    )  # fmt: skip
    tick_user, tick_system = max(tick_user, 0.0), max(tick_system, 0.0)
    user_part = tick_user / (tick_user + tick_system) if tick_user + tick_system > 0 else 0.0
    rows["other"] = _row(
        "other",
        "short-lived processes (task wrappers, tasks, anything that started and ended in "
        "the window) and kernel work charged to no thread; user/system split by clock ticks",
        residual * user_part,
        residual * (1 - user_part),
    )
    per = f"ms_per_{unit}"
    experiment = max(busy - rows["outside"]["user"] - rows["outside"]["system"], 0.0)

    def figures(user: float, system: float) -> dict:
        cpu = user + system
        return {
            "cpu_seconds": round(cpu, 4),
            "user_cores": round(user / window, 4),
            "system_cores": round(system / window, 4),
            "cores": round(cpu / window, 4),
            per: round(cpu * 1000 / count, 4) if count else None,
            "share": round(cpu / busy, 4) if busy > 0 else None,
        }

    machine_cores = {k: round(v / window, 4) for k, v in machine.items()}
    machine_cores["busy"] = round(tick_busy / window, 4)
    return {
        "window_seconds": round(window, 3),
        "unit": unit,
        "count": count,  # units of work finished in the window: the per-unit divisor
        "cpus": psutil.cpu_count() or 1,
        "machine": {
            "cores": machine_cores,  # psutil.cpu_times() (clock ticks)
            # The busy time the components are shares of, and "other" the rest of:
            # "cpuacct" (precise task runtime, + interrupts where apart) or "cpu_times" (ticks).
            "busy_basis": basis,
            "busy_cores": round(busy / window, 4),
            "busy_cpu_seconds": round(busy, 4),
            f"busy_{per}": round(busy * 1000 / count, 4) if count else None,
        },
        # What the experiment itself cost: the busy time less the outside processes' (the
        # machine is shared); other users' short-lived processes are still in it, via other.
        "experiment": {
            "cpu_seconds": round(experiment, 4),
            "cores": round(experiment / window, 4),
            per: round(experiment * 1000 / count, 4) if count else None,
        },
        "components": {
            name: {
                "kind": r["kind"],
                "what": r["what"],
                **({"pid": r["pid"]} if "pid" in r else {}),
                **figures(r["user"], r["system"]),
            }
            for name, r in rows.items()
        },
        "residual_cores": round(residual / window, 4),
        "interrupts_apart": interrupts_apart,
        # Who "outside" is: the busiest few, so a shared machine's other load has a name.
        "outside_top": [
            {"pid": p.pid, "name": p.name, "cores": round(cpu / window, 4)}
            for cpu, p in sorted(outside_by_pid, key=lambda x: -x[0])[:TOP_OUTSIDE]
            if cpu > 0
        ],
        "notes": notes,
    }


def _scan() -> dict[int, ProcTimes]:
    out = {}
    for p in psutil.process_iter(["ppid", "name", "create_time", "cpu_times"]):
        info = p.info
        times = info["cpu_times"]
        if times is None or info["create_time"] is None:  # access denied
            continue
        out[p.pid] = ProcTimes(
            p.pid, info["ppid"] or 0, info["name"] or "", info["create_time"],
            times.user, times.system, times.children_user, times.children_system,
        )  # fmt: skip
    return out


def _machine() -> dict[str, float]:
    times = psutil.cpu_times()
    machine = {k: getattr(times, k, 0.0) for k in MACHINE_FIELDS}  # some are Linux-only
    try:
        machine[TASK_RUNTIME] = int(CPUACCT_USAGE.read_text()) / 1e9
    except (OSError, ValueError):
        pass  # no cgroup v1 cpuacct here: the ticks are the basis
    return machine


def _read(proc: psutil.Process) -> ProcTimes | None:
    try:
        with proc.oneshot():
            if not proc.is_running():  # exited, or its pid was reused
                return None
            t = proc.cpu_times()
            return ProcTimes(
                proc.pid, proc.ppid(), proc.name(), proc.create_time(),
                t.user, t.system, t.children_user, t.children_system,
            )  # fmt: skip
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def interrupts_apart() -> bool:
    """Whether this kernel accounts interrupt time apart from the tasks it interrupted
    (CONFIG_IRQ_TIME_ACCOUNTING), from its config where readable; else guessed from the
    hard-interrupt time since boot, which tick-based accounting all but never sees."""
    release = os.uname().release
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{release}")):
        try:
            data = path.read_bytes()
            text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode(
                errors="replace"
            )
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        return "CONFIG_IRQ_TIME_ACCOUNTING=y" in text
    return getattr(psutil.cpu_times(), "irq", 0.0) > 0


class CpuWindow:
    """Reads a window's two ends. The machine is read innermost and timed, the named
    processes next to it, and the whole-machine scan (a few ms) outermost, so only the
    kernel-thread and outside figures cover those few ms more than the window."""

    def __init__(self, components: Sequence[Component], root: int | None = None) -> None:
        self.components = list(components)
        self.root = os.getpid() if root is None else root
        self.interrupts_apart = interrupts_apart()
        self._procs = {c.name: psutil.Process(c.pid) for c in self.components}
        self.before: Reading | None = None
        self.after: Reading | None = None

    def _named(self) -> dict[str, ProcTimes | None]:
        return {name: _read(proc) for name, proc in self._procs.items()}

    def begin(self) -> float:
        """Starts the window; returns its start (time.monotonic())."""
        processes = _scan()
        named = self._named()
        machine = _machine()
        at = time.monotonic()
        self.before = Reading(at, machine, named, processes)
        return at

    def end(self) -> float:
        """Ends the window; returns its end (time.monotonic())."""
        at = time.monotonic()
        machine = _machine()
        named = self._named()
        self.after = Reading(at, machine, named, _scan())
        return at

    def account(self, count: int, unit: str = "task") -> dict:
        assert self.before is not None and self.after is not None, "begin() and end() first"
        result = account(
            self.before, self.after, self.components, count, unit, self.root,
            self.interrupts_apart,
        )  # fmt: skip
        for entry in result["outside_top"]:
            try:
                entry["command"] = short_command(psutil.Process(entry["pid"]).cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                entry["command"] = None  # gone since, or not ours to read
        return result


def short_command(cmdline: Sequence[str]) -> str:
    """Enough of another user's command line to name it (`python /tmp/bench.py`), and no
    more: the program's name and its first few plain words, up to the first option that
    is not -m or -c (option values are where tokens and environments go)."""
    if not cmdline:
        return ""
    words = [os.path.basename(cmdline[0])]
    for word in cmdline[1:4]:
        if word.startswith("--") or (word.startswith("-") and word not in ("-m", "-c")):
            break
        if len(word) > 60 or "=" in word:
            break
        words.append(word)
    return " ".join(words)
