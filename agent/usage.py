"""What a task uses now: CPU time, memory and disk, like Mesos' /monitor/statistics.

Read from the task's cgroups where the agent made them (exact: every process the task forked
counts, even one that left its process group) and from /proc otherwise (the processes of the
task's process group, plus what they reaped). Disk is the sandbox's allocated blocks. Each read
is a handful of small files, so a client may poll it; the sandbox walk is the one part that
grows (with the task's file count), and callers run it off the event loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agora.agent import cgroup_members
from agora.common import ResourceError, Resources
from agora.v1 import agent_pb2

if TYPE_CHECKING:  # the task manager imports this module's callers, not the reverse
    from agora.agent.task_manager import TaskRun

__all__ = ["Usage", "task_usage", "usage_report"]

MB = 1024 * 1024

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
# cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages).
_NO_LIMIT_V1 = 1 << 62


@dataclass(frozen=True)
class Usage:
    cpu_user_seconds: float = 0.0
    cpu_system_seconds: float = 0.0
    mem_rss_bytes: int = 0  # anonymous memory (what an OOM kill is about), not page cache
    mem_limit_bytes: int = 0  # 0: no limit enforced
    disk_used_bytes: int = 0
    source: str = "proc"  # where CPU and memory were read: "cgroup" or "proc"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _from_cgroups(cgroups: list[str]) -> dict:
    """The figures the task's cgroups hold (v2, or v1 memory and cpu[acct]); {} if none."""
    found: dict = {}
    # v2's cpu.stat, or v1's cpuacct.stat where cpuacct shares the cpu controller's mount.
    cpu = cgroup_members.cpu_seconds(cgroups, "cpu.stat") or cgroup_members.cpu_seconds(
        cgroups, "cpuacct.stat"
    )
    if cpu is not None:
        found["cpu"] = cpu
    for directory in map(Path, cgroups):
        mem_stat = cgroup_members.counts(_read(directory / "memory.stat") or "")
        if (current := _read(directory / "memory.current")) is not None:  # v2
            found["rss"] = mem_stat.get("anon", int(current))
            limit_text = (_read(directory / "memory.max") or "max").strip()
            found["limit"] = int(limit_text) if limit_text.isdigit() else 0
        elif (_read(directory / "memory.usage_in_bytes")) is not None:  # v1 memory
            found["rss"] = mem_stat.get("total_rss", mem_stat.get("rss", 0))
            limit_text = (_read(directory / "memory.limit_in_bytes") or "0").strip()
            limit = int(limit_text) if limit_text.isdigit() else 0
            found["limit"] = 0 if limit >= _NO_LIMIT_V1 else limit
    return found


def _from_proc(pgid: int) -> tuple[float, float, int]:
    """(user s, system s, rss bytes) over the processes of process group `pgid`."""
    user = system = 0
    rss_pages = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue  # exited meanwhile
        # Fields after "(comm)": state is field 3, so field N is fields[N - 3].
        fields = data[data.rindex(b")") + 2 :].split()
        if int(fields[2]) != pgid:  # field 5: pgrp
            continue
        # utime, stime, and cutime, cstime: CPU of children it already reaped.
        user += int(fields[11]) + int(fields[13])
        system += int(fields[12]) + int(fields[14])
        rss_pages += int(fields[21])  # field 24: rss
    return user / _TICKS, system / _TICKS, rss_pages * _PAGE


def disk_used(sandbox: Path) -> int:
    """Bytes allocated to the sandbox's files (what `du` counts), never following symlinks."""
    total = 0
    stack = [str(sandbox)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return total


def task_usage(
    pgid: int | None,
    cgroups: list[str],
    sandbox: Path,
    mem_allocated_bytes: int = 0,
    cpu_base: Sequence[float] = (),
) -> Usage:
    """The task's usage now; `pgid` is its process group (its first process's pid), if running.

    Without a memory cgroup, `mem_allocated_bytes` (its `mem` resource) stands as the limit it
    is held to. `cpu_base`: the (user, system) seconds its cgroups counted before it (kept
    from earlier tasks: agora.agent.isolation).
    """
    cg = _from_cgroups(cgroups)
    user = system = 0.0
    rss = 0
    if pgid and ("cpu" not in cg or "rss" not in cg):
        user, system, rss = _from_proc(pgid)
    if "cpu" in cg:
        user, system = cg["cpu"]
        if cpu_base:
            user, system = max(user - cpu_base[0], 0.0), max(system - cpu_base[1], 0.0)
    if "rss" in cg:
        rss = cg["rss"]
    return Usage(
        cpu_user_seconds=user,
        cpu_system_seconds=system,
        mem_rss_bytes=rss,
        mem_limit_bytes=cg.get("limit") or mem_allocated_bytes,
        disk_used_bytes=disk_used(sandbox),
        source="cgroup" if "rss" in cg or "cpu" in cg else "proc",
    )


def usage_report(runs: Iterable[TaskRun]) -> agent_pb2.GetUsageResponse:
    """The Agent service's GetUsage answer for these running runs (they have a wrapper)."""
    reply = agent_pb2.GetUsageResponse()
    for run in runs:
        try:
            resources = Resources.from_proto(run.task.resources)
        except ResourceError:
            resources = Resources()
        assert run.wrapper is not None
        now = time.time()
        # Read off the event loop: the run may end meanwhile, and its cgroups go to the next
        # task (agora.agent.isolation). Its ending replaces the list, so a sample whose
        # cgroups are no longer the run's is not this run's and is left out.
        cgroups, cpu_base = run.record.cgroups, run.record.cgroup_cpu_base
        usage = task_usage(
            run.wrapper.task_pid,
            cgroups,
            run.sandbox,
            mem_allocated_bytes=int(resources.scalar("mem") * MB),
            cpu_base=cpu_base,
        )
        if run.record.cgroups is not cgroups:
            continue
        reply.usage.append(
            agent_pb2.TaskUsage(
                framework_id=run.record.framework_id,
                task_id=run.task.task_id,
                cpu_user_seconds=usage.cpu_user_seconds,
                cpu_system_seconds=usage.cpu_system_seconds,
                cpus_allocated=resources.scalar("cpus"),
                mem_rss_bytes=usage.mem_rss_bytes,
                mem_limit_bytes=usage.mem_limit_bytes,
                disk_used_bytes=usage.disk_used_bytes,
                disk_allocated_bytes=int(resources.scalar("disk") * MB),
                source=usage.source,
                timestamp=now,
            )
        )
    return reply
