"""The processes in a task's cgroups, killing them, whether the OOM killer acted, and the CPU
time they count: `os` only.

Shared by the agent (agora.agent.task_manager) and the task wrapper (agora.agent.executor),
which is forked per task from a small launcher and so keeps its imports to the standard
library's core.
"""

from __future__ import annotations

import os
import signal


def pids(cgroups: list[str]) -> set[int]:
    """Every process in these cgroups (none for a cgroup that is gone or unreadable)."""
    out: set[int] = set()
    for path in cgroups:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                out.update(int(p) for p in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def kill(cgroups: list[str], spare: int | None = None) -> bool:
    """SIGKILLs every process in these cgroups but `spare`; False if there was none."""
    found = pids(cgroups) - {spare}
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return bool(found)


def memory_limit_hit(cgroups: list[str]) -> int | None:
    """The memory limit (bytes) if the kernel's OOM killer acted in these cgroups, else None.

    v2 counts kills in memory.events, v1 in memory.oom_control (a cgroup where one was ever
    counted is never kept for another task: agora.agent.isolation).
    """
    for directory in cgroups:
        for events, limit in (
            ("memory.events", "memory.max"),
            ("memory.oom_control", "memory.limit_in_bytes"),
        ):
            try:
                counts = dict(
                    line.split() for line in _read(os.path.join(directory, events)).splitlines()
                )
            except (OSError, ValueError):
                continue
            if int(counts.get("oom_kill", "0")) > 0:
                try:
                    return int(_read(os.path.join(directory, limit)).strip())
                except (OSError, ValueError):
                    return 0
    return None


def homes(cgroups: list[str], root: str = "/sys/fs/cgroup", own: str | None = None) -> list[str]:
    """This process's own cgroup in the hierarchy of each of these (`own`: /proc/self/cgroup's
    text, read if None): v2's one, or v1's where the path lies under the controller's mount
    (`root`/cpu, or a joint `root`/cpu,cpuacct)."""
    if own is None:
        own = _read("/proc/self/cgroup")
    lines = [line.split(":", 2) for line in own.splitlines() if line.count(":") >= 2]
    mounts: list[tuple[str, str]] = []  # (mount dir, own path in it)
    for _, controllers, path in lines:
        names = controllers.split(",") if controllers else []
        dirs = [root] if not controllers else [f"{root}/{n}" for n in [*names, controllers]]
        mounts.extend((d, path) for d in dirs)
    out = []
    for path in cgroups:
        # The longest mount the path lies under: v1's controllers sit below v2's root.
        mount, mine = max(
            ((d, p) for d, p in mounts if path.startswith(d.rstrip("/") + "/")),
            key=lambda m: len(m[0]),
            default=(root, "/"),
        )
        out.append(mount.rstrip("/") + "/" + mine.lstrip("/") if mine != "/" else mount)
    return out


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(cgroups: list[str], name: str) -> tuple[float, float] | None:
    """(user, system) CPU seconds counted in the first of these cgroups that has `name`: v2's
    cpu.stat (microseconds) or v1's cpuacct.stat (clock ticks); None where none has it."""
    for directory in cgroups:
        try:
            text = _read(os.path.join(directory, name))
        except OSError:
            continue
        counts = {}
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                counts[key] = int(value)
        if "user_usec" in counts:
            return counts["user_usec"] / 1e6, counts.get("system_usec", 0) / 1e6
        if "user" in counts:
            return counts["user"] / _TICKS, counts.get("system", 0) / _TICKS
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
