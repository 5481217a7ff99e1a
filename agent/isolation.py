"""Resource isolation beyond process groups: a cgroup per task for memory and CPU.

Uses cgroups v2 (memory.max, cpu.max) when /sys/fs/cgroup is the unified hierarchy, else v1
(memory.limit_in_bytes, cpu.cfs_quota_us), nested under the agent's own cgroup. Where the agent
may not create cgroups (no permission, a v2 parent that holds processes) it logs at debug level
and tasks run with process-group isolation only. The task wrapper steps into the task's cgroups
to spawn the command and straight back out to the agent's own cgroup (the task's grandparent
here), so the command and every process it forks are inside them and the wrapper is not.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from agora.common import Resources

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000
MB = 1024 * 1024
# As in Mesos' memory isolator: no task is limited below this, however little mem it asked for.
MIN_MEMORY_MB = 32


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None  # hard limit; None: none
    cpu_shares: int | None  # v1 cpu.shares (1024 per CPU); v2 gets the equivalent cpu.weight
    cpu_quota_us: int | None = None  # hard CPU cap per period; None: none (Mesos' default)
    cpu_period_us: int = CPU_PERIOD_US

    @property
    def cpu_weight(self) -> int | None:
        """cpu.shares mapped onto cgroup v2's cpu.weight range [1, 10000] (as runc does)."""
        if self.cpu_shares is None:
            return None
        return 1 + ((self.cpu_shares - 2) * 9999) // 262142


def task_limits(resources: Resources, cpu_hard_limit: bool = False) -> Limits:
    """What a task's resources translate to: mem MB -> a memory limit; cpus -> a CPU share.

    As in Mesos, CPU is a proportional share unless `cpu_hard_limit` (Mesos'
    --cgroups_enable_cfs) caps it with a CFS quota.
    """
    mem = resources.scalar("mem")
    cpus = resources.scalar("cpus")
    quota = max(int(cpus * CPU_PERIOD_US), MIN_CPU_QUOTA_US) if cpus > 0 else None
    return Limits(
        memory_bytes=int(max(mem, MIN_MEMORY_MB) * MB) if mem > 0 else None,
        cpu_shares=max(int(cpus * 1024), 2) if cpus > 0 else None,
        cpu_quota_us=quota if cpu_hard_limit else None,
    )


def _write(path: str, text: str) -> None:
    """One write to an existing control file: open, write, close (a task's cgroups take a few
    of these at every launch; Path.write_text adds a buffered file and four more syscalls)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_cgroups() -> dict[str, str]:
    """controller (or "" for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            out[name] = path
    return out


class Isolator:
    """Creates, fills and removes per-task cgroups; a no-op where cgroups are unavailable."""

    def __init__(self, root: Path = CGROUP_ROOT, enabled: bool = True, name: str = "agora") -> None:
        self.kind = "none"
        self._parents: dict[str, str] = {}  # controller ("" for v2) -> our parent cgroup
        if not enabled:
            return
        try:
            self._detect(root, name)
        except OSError as e:
            log.debug("cgroups unavailable: tasks get process-group isolation only", error=str(e))
            self.kind, self._parents = "none", {}

    def _detect(self, root: Path, name: str) -> None:
        own = _own_cgroups()
        if (root / "cgroup.controllers").exists():
            parent = root / own.get("", "/").lstrip("/") / name
            parent.mkdir(exist_ok=True)
            available = (parent / "cgroup.controllers").read_text().split()
            if not {"memory", "cpu"} <= set(available):
                raise OSError(f"controllers memory and cpu not delegated to {parent}")
            (parent / "cgroup.subtree_control").write_text("+memory +cpu")
            self.kind, self._parents = "cgroup2", {"": str(parent)}
            return
        parents = {}
        for controller in ("memory", "cpu"):
            base = root / controller
            if not (base / "cgroup.procs").exists():
                raise OSError(f"no cgroup v1 {controller} hierarchy at {base}")
            parent = base / own.get(controller, "/").lstrip("/") / name
            parent.mkdir(exist_ok=True)
            parents[controller] = str(parent)
        self.kind, self._parents = "cgroup1", parents

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def prepare(self, run_id: str, limits: Limits) -> list[str]:
        """Creates the run's cgroups with their limits; [] (and a debug log) on failure."""
        if not self.enabled:
            return []
        made: list[str] = []
        try:
            for controller, parent in self._parents.items():
                path = f"{parent}/{run_id}"
                try:
                    os.mkdir(path)
                except FileExistsError:
                    pass
                made.append(path)
                self._limit(controller, path, limits)
        except OSError as e:
            log.debug(
                "cannot set up the task's cgroup; running it without", run_id=run_id, error=str(e)
            )
            self.cleanup(made)
            return []
        return made

    def _limit(self, controller: str, path: str, limits: Limits) -> None:
        if controller == "":
            if limits.memory_bytes is not None:
                _write(f"{path}/memory.max", str(limits.memory_bytes))
            if limits.cpu_weight is not None:
                _write(f"{path}/cpu.weight", str(limits.cpu_weight))
            if limits.cpu_quota_us is not None:
                _write(f"{path}/cpu.max", f"{limits.cpu_quota_us} {limits.cpu_period_us}")
        elif controller == "memory" and limits.memory_bytes is not None:
            _write(f"{path}/memory.limit_in_bytes", str(limits.memory_bytes))
        elif controller == "cpu":
            if limits.cpu_shares is not None:
                _write(f"{path}/cpu.shares", str(limits.cpu_shares))
            if limits.cpu_quota_us is not None:
                _write(f"{path}/cpu.cfs_period_us", str(limits.cpu_period_us))
                _write(f"{path}/cpu.cfs_quota_us", str(limits.cpu_quota_us))

    @staticmethod
    def cleanup(cgroups: list[str]) -> None:
        for path in cgroups:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.debug("cannot remove a task cgroup", path=path, error=str(e))
