"""The processes in a task's cgroups, killing them, and whether the OOM killer acted: `os` only.

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

    Read before the cgroups are removed: v2 counts kills in memory.events, v1 in
    memory.oom_control.
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


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
