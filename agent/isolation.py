"""Resource isolation beyond process groups: a cgroup per task for memory, CPU and process count.

Uses cgroups v2 (memory.max, cpu.max) when /sys/fs/cgroup is the unified hierarchy, else v1
(memory.limit_in_bytes, cpu.cfs_quota_us), nested under the agent's own cgroup as
<own>/agora/<owner>/<run>: `owner` names the agent (its work dir), so agents sharing a machine
and a cgroup never touch each other's; <run> is the run that made the cgroups, which later runs
may have been given. Where the agent may not create cgroups (no permission, a v2 parent that
holds processes) it logs at debug level and tasks run with process-group isolation only. The
command starts inside the task's cgroups and the wrapper does not stay there (the C one never
enters; the Python one steps in for the spawn and back out), so the command and every process
it forks are inside them and the wrapper is not.

A finished task's cgroups are kept for the agent's next task when they are left as a new one
would be: empty, no OOM kill counted, no memory held that the kernel could not reclaim (the next
task gets its whole limit), give or take what the kernel has not yet counted (see
`stat_slack_bytes`). Making and removing a memory cgroup costs the kernel far more than a
launch's other cgroup work (mkdir, rmdir and the offlining after it: about 0.4 ms of CPU a task
on a 2-core VM, a tenth of a whole launch); a kept one takes only the limits that differ. The
CPU time a kept cgroup already counts goes in the next task's record, which its usage subtracts.
Whatever is not kept is removed, as are the kept ones when the agent stops; an agent that
starts removes what a predecessor kept (its owner's directory, minus its live tasks' cgroups),
and a wrapper whose task ends while no agent watches (its agent gone, or stopping: the work
dir's meta/unwatched) removes the task's cgroups itself.

A task that runs as root could change its own cgroups' settings, and a kept cgroup would carry
them to the next task. That is no new power: root can write any task's cgroups while they run.
The control files are root's, and tasks of other users can change none of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import structlog

from agora.agent import cgroup_members
from agora.common import Resources

log = structlog.get_logger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
MIN_CPU_QUOTA_US = 1_000
MB = 1024 * 1024
# As in Mesos' memory isolator: no task is limited below this, however little mem it asked for.
MIN_MEMORY_MB = 32
# Finished tasks' cgroups kept for the next tasks, at most (each is some kernel memory).
MAX_KEPT = 64
# The kernel folds memory.stat changes in lazily: a reader only makes it catch up once more
# than 64 pages a CPU changed (MEMCG_CHARGE_BATCH, with as much again waiting on each CPU),
# else the count waits for the flush every 2 s. So a task that ran across a flush and then
# ended still reads as holding what it held then (measured: 108 KB of rss for 2 s after a
# `sleep` ended, its cgroup empty), and a strict zero would keep almost no cgroup of a task
# that ran over 2 s. Up to this much is read as nothing; capped, so a large machine does not
# hand a next task megabytes of real leftovers.
_STAT_LAG_PAGES_PER_CPU = 2 * 64
_MAX_STAT_SLACK = 4 * MB


def stat_slack_bytes(cpus: int | None = None, page: int | None = None) -> int:
    """How far memory.stat may lag behind the cgroup's real use, in bytes."""
    cpus = cpus or os.cpu_count() or 1
    page = page or os.sysconf("SC_PAGE_SIZE")
    return min(_STAT_LAG_PAGES_PER_CPU * cpus * page, _MAX_STAT_SLACK)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int | None  # hard limit; None: none
    cpu_shares: int | None  # v1 cpu.shares (1024 per CPU); v2 gets the equivalent cpu.weight
    cpu_quota_us: int | None = None  # hard CPU cap per period; None: none (Mesos' default)
    cpu_period_us: int = CPU_PERIOD_US
    # Processes and threads the task may have at once (the pids controller); None: no limit.
    pids_max: int | None = None

    @property
    def cpu_weight(self) -> int | None:
        """cpu.shares mapped onto cgroup v2's cpu.weight range [1, 10000] (as runc does)."""
        if self.cpu_shares is None:
            return None
        return 1 + ((self.cpu_shares - 2) * 9999) // 262142


def task_limits(
    resources: Resources, cpu_hard_limit: bool = False, pids_max: int | None = None
) -> Limits:
    """What a task's resources translate to: mem MB -> a memory limit; cpus -> a CPU share;
    and the agent's `pids_max` (`--task-pids-max`: a fork bomb stops there, not at the host's
    limit).

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
        pids_max=pids_max or None,
    )


def _write(path: str, text: str) -> None:
    """One write to an existing control file: open, write, close (a task's cgroups take a few
    of these at every launch; Path.write_text adds a buffered file and four more syscalls)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# What each control file holds when nothing limits the task: a kept cgroup whose next task
# has no such limit is set back to it.
_NO_LIMIT = {
    "memory.max": "max",
    "cpu.weight": "100",
    "cpu.max": f"max {CPU_PERIOD_US}",
    "memory.limit_in_bytes": "-1",
    "cpu.shares": "1024",
    "cpu.cfs_period_us": str(CPU_PERIOD_US),
    "cpu.cfs_quota_us": "-1",
    "pids.max": "max",
}


def _settings(controller: str, limits: Limits) -> dict[str, str | None]:
    """control file -> what `limits` write there (None: no limit), in the order to write them
    (v1's CFS period before its quota)."""
    memory = str(limits.memory_bytes) if limits.memory_bytes is not None else None
    quota = limits.cpu_quota_us
    pids = str(limits.pids_max) if limits.pids_max is not None else None
    if controller == "":
        weight = limits.cpu_weight
        return {
            "memory.max": memory,
            "cpu.weight": str(weight) if weight is not None else None,
            "cpu.max": f"{quota} {limits.cpu_period_us}" if quota is not None else None,
            "pids.max": pids,
        }
    if controller == "memory":
        return {"memory.limit_in_bytes": memory}
    if controller == "pids":
        return {"pids.max": pids}
    shares = limits.cpu_shares
    return {
        "cpu.shares": str(shares) if shares is not None else None,
        "cpu.cfs_period_us": str(limits.cpu_period_us) if quota is not None else None,
        "cpu.cfs_quota_us": str(quota) if quota is not None else None,
    }


def limit_writes(
    controller: str, limits: Limits, before: Limits | None = None
) -> list[tuple[str, str]]:
    """(control file, text) to write for `limits` in a new cgroup (`before` None), or in a kept
    one that holds `before`'s: only what differs, a lifted limit back to "no limit"."""
    new = _settings(controller, limits)
    if before is None:
        return [(name, text) for name, text in new.items() if text is not None]
    old = _settings(controller, before)
    return [
        (name, text if text is not None else _NO_LIMIT[name])
        for name, text in new.items()
        if text != old[name]
    ]


# Memory a cgroup holds after its processes are gone that the kernel cannot simply reclaim,
# by memory.stat's keys: anonymous memory (v1 counts it as rss, v2 as anon), shared memory (a
# file left in /dev/shm), locked pages, and under v1 what went to swap. Each key a kernel must
# show is required: a stat without it says nothing, and nothing is kept on its word. Page cache
# can stay: it is reclaimed as soon as the next task needs the room.
_HELD_V1 = ("rss", "shmem", "unevictable")
_HELD_V2 = ("anon", "shmem", "unevictable")


def reusable(
    procs: list[str],
    oom_counts: str | None,
    memory_stat: str | None,
    swap_current: str | None = None,
    slack: int = 0,
) -> bool:
    """Whether a finished task's cgroups are as good as new, from what they read: no process
    in them (`procs`, each cgroup's cgroup.procs), no OOM kill ever counted and the OOM killer
    not turned off (memory.events or memory.oom_control), no memory held that could not be
    reclaimed (memory.stat, and v2's memory.swap.current where swap is accounted) beyond
    `slack` bytes in all (how far memory.stat may lag)."""
    if any(text.strip() for text in procs) or oom_counts is None or memory_stat is None:
        return False
    counts = cgroup_members.counts(oom_counts)
    # v1 and v2 both count kills as oom_kill; v1 also says whether the killer is off.
    if counts.get("oom_kill", 1) != 0 or counts.get("oom_kill_disable", 0) != 0:
        return False
    stat = cgroup_members.counts(memory_stat)
    held = _HELD_V2 if "anon" in stat else _HELD_V1
    if any(key not in stat for key in held):
        return False
    swap = swap_current.strip() if swap_current is not None else "0"
    if not swap.isdigit():
        return False
    return sum(stat[key] for key in held) + stat.get("swap", 0) + int(swap) <= slack


def owner_name(work_dir: Path) -> str:
    """The cgroup directory name of the agent on this work dir: the same for the agent that
    comes back on it, another for every other agent on the machine."""
    real = os.path.realpath(work_dir)
    return "agent-" + hashlib.sha256(os.fsencode(real)).hexdigest()[:12]


@dataclass(frozen=True)
class Lease:
    """A run's cgroups, and the CPU seconds (user, system) they counted before it: kept
    cgroups count on from their past tasks, and the run's own use is the difference."""

    paths: list[str] = field(default_factory=list)
    cpu_base: tuple[float, float] | None = None


@dataclass
class _Kept:
    paths: list[str]
    limits: Limits
    cpu_base: tuple[float, float] | None


class Isolator:
    """Creates, fills, keeps and removes per-task cgroups; a no-op where cgroups are
    unavailable."""

    def __init__(
        self,
        root: Path = CGROUP_ROOT,
        enabled: bool = True,
        name: str = "agora",
        owner: str = "shared",
    ) -> None:
        self.kind = "none"
        self.pids = False  # whether tasks' process counts can be bounded (the pids controller)
        self._parents: dict[str, str] = {}  # controller ("" for v2) -> our parent cgroup
        self._kept: dict[Limits, list[_Kept]] = {}
        self._kept_count = 0
        # paths[0] of the runs this Isolator handed out, and their limits: only those are kept
        # (a recovered run's cgroups, made by an earlier agent, are removed).
        self._leased: dict[str, Limits] = {}
        self._cpu_file: str | None = None  # where a cgroup counts its CPU time, if it does
        self._slack = stat_slack_bytes()
        if not enabled:
            return
        try:
            self._detect(root, name, owner)
        except OSError as e:
            log.debug("cgroups unavailable: tasks get process-group isolation only", error=str(e))
            self.kind, self._parents = "none", {}

    def _detect(self, root: Path, name: str, owner: str) -> None:
        try:
            own = cgroup_members.own_cgroups()
        except OSError:
            own = {}
        if (root / "cgroup.controllers").exists():
            parent = root / own.get("", "/").lstrip("/")
            # Each level hands memory and cpu (and pids, where the kernel has it) on.
            for level in filter(None, (name, owner)):
                parent = parent / level
                parent.mkdir(exist_ok=True)
                available = set((parent / "cgroup.controllers").read_text().split())
                if not {"memory", "cpu"} <= available:
                    raise OSError(f"controllers memory and cpu not delegated to {parent}")
                wanted = ["memory", "cpu", *(["pids"] if "pids" in available else [])]
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
                self.pids = "pids" in available
            self.kind, self._parents = "cgroup2", {"": str(parent)}
            self._cpu_file = "cpu.stat"
            return
        parents = {}
        for controller in ("memory", "cpu"):
            base = root / controller
            if not (base / "cgroup.procs").exists():
                raise OSError(f"no cgroup v1 {controller} hierarchy at {base}")
            parent = base / own.get(controller, "/").lstrip("/") / name / owner
            parent.mkdir(parents=True, exist_ok=True)
            parents[controller] = str(parent)
        # The pids controller, where mounted: a task's process count bounded (no fork bomb).
        pids = root / "pids"
        if (pids / "cgroup.procs").exists():
            parent = pids / own.get("pids", "/").lstrip("/") / name / owner
            parent.mkdir(parents=True, exist_ok=True)
            parents["pids"] = str(parent)
            self.pids = True
        self.kind, self._parents = "cgroup1", parents
        if os.path.exists(f"{parents['cpu']}/cpuacct.stat"):  # cpuacct mounted with cpu
            self._cpu_file = "cpuacct.stat"

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def directories(self) -> list[str]:
        """Where this agent's task cgroups are: one per controller (v1), or v2's one."""
        return list(self._parents.values())

    def prepare(self, run_id: str, limits: Limits) -> Lease:
        """The run's cgroups with their limits: kept ones where there are, else new ones
        named after the run; none (and a debug log) on failure."""
        if not self.enabled:
            return Lease()
        if limits.pids_max is not None and not self.pids:
            # No pids controller here (the agent says so at start): the other limits hold.
            limits = replace(limits, pids_max=None)
        while (kept := self._take_kept(limits)) is not None:
            try:
                for controller, path in zip(self._parents, kept.paths, strict=True):
                    for name, text in limit_writes(controller, limits, kept.limits):
                        _write(f"{path}/{name}", text)
            except OSError as e:
                log.debug("cannot reuse a kept cgroup; removing it", error=str(e))
                self._remove(kept.paths)
                continue
            self._leased[kept.paths[0]] = limits
            return Lease(kept.paths, kept.cpu_base)
        made: list[str] = []
        try:
            for controller, parent in self._parents.items():
                path = f"{parent}/{run_id}"
                try:
                    os.mkdir(path)
                except FileExistsError:
                    pass
                made.append(path)
                for name, text in limit_writes(controller, limits):
                    _write(f"{path}/{name}", text)
        except OSError as e:
            log.debug(
                "cannot set up the task's cgroup; running it without", run_id=run_id, error=str(e)
            )
            self._remove(made)
            return Lease()
        self._leased[made[0]] = limits
        return Lease(made)

    def _take_kept(self, limits: Limits) -> _Kept | None:
        """A kept cgroup, one with these very limits if there is (nothing to write)."""
        if not self._kept_count:
            return None
        key = limits if limits in self._kept else next(iter(self._kept))
        entries = self._kept[key]
        kept = entries.pop()
        if not entries:  # only limits with kept cgroups stay keys
            del self._kept[key]
        self._kept_count -= 1
        return kept

    def release(self, cgroups: list[str]) -> None:
        """After a run whose wrapper ended and emptied its cgroups: kept for the next run if
        they are as good as new (see `reusable`), else removed."""
        if not cgroups:
            return
        limits = self._leased.pop(cgroups[0], None)
        if limits is None or self._kept_count >= MAX_KEPT or not self._clean(cgroups):
            self._remove(cgroups)
            return
        base = None
        if self._cpu_file is not None:
            base = cgroup_members.cpu_seconds(cgroups, self._cpu_file)
            if base is None:
                self._remove(cgroups)
                return
        self._kept.setdefault(limits, []).append(_Kept(list(cgroups), limits, base))
        self._kept_count += 1

    def _clean(self, cgroups: list[str]) -> bool:
        memory = cgroups[0]  # v2's one cgroup, or v1's memory one (the first controller)
        try:
            # A cgroup directory's link count is 2 plus its subdirectories: a task that made
            # cgroups of its own inside (root can) may have put processes there, out of sight
            # of cgroup.procs.
            if any(os.stat(path).st_nlink != 2 for path in cgroups):
                return False
            procs = [cgroup_members.read(f"{path}/cgroup.procs") for path in cgroups]
            if self.kind == "cgroup2":
                events = cgroup_members.read(f"{memory}/memory.events")
                try:
                    swap = cgroup_members.read(f"{memory}/memory.swap.current")
                except FileNotFoundError:
                    swap = None  # no swap accounting
            else:
                events, swap = cgroup_members.read(f"{memory}/memory.oom_control"), None
            stat = cgroup_members.read(f"{memory}/memory.stat")
            return reusable(procs, events, stat, swap, self._slack)
        except OSError:
            return False

    def cleanup(self, cgroups: list[str]) -> None:
        """Removes a run's cgroups (never kept: after a failed launch, or a recovered run)."""
        if cgroups:
            self._leased.pop(cgroups[0], None)
        self._remove(cgroups)

    @staticmethod
    def _remove(cgroups: list[str]) -> None:
        for path in cgroups:
            try:
                cgroup_members.remove_tree(path)  # with what a container runtime nested
            except OSError as e:
                log.debug("cannot remove a task cgroup", path=path, error=str(e))

    def sweep(self, live: set[str]) -> None:
        """Removes every cgroup in this agent's directory but the `live` runs' (what an agent
        that stopped without removing them left: kept ones, or a crashed launch's)."""
        for parent in self._parents.values():
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                path = f"{parent}/{name}"
                if path not in live and os.path.isdir(path):
                    self._remove([path])

    def close(self) -> None:
        """Removes the kept cgroups, and this agent's directory if no task is left in it (the
        agent is stopping; the tasks still running have their cgroups removed by their
        wrappers, or by the next agent on this work dir)."""
        for entries in self._kept.values():
            for kept in entries:
                self._remove(kept.paths)
        self._kept.clear()
        self._kept_count = 0
        for parent in self._parents.values():
            with contextlib.suppress(OSError):  # tasks that outlive the agent are still in it
                os.rmdir(parent)
