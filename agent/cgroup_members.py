"""The processes in a task's cgroups, and killing them, with nothing but `os`.

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
