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
    """Every process in these cgroups and the cgroups beneath them (a container's runtime
    nests one: agora.agent.containers); none for a cgroup that is gone or unreadable."""
    out: set[int] = set()
    for top in cgroups:
        for path in _tree(top):
            try:
                with open(os.path.join(path, "cgroup.procs")) as f:
                    out.update(int(p) for p in f.read().split())
            except (OSError, ValueError):
                pass
    return out


def _tree(top: str, depth: int = 4) -> list[str]:
    """`top` and the cgroups beneath it, at most `depth` levels down, parents first."""
    out, level = [top], [top]
    for _ in range(depth):
        below = []
        for path in level:
            try:
                with os.scandir(path) as entries:
                    below += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                pass
        if not below:
            break
        out += below
        level = below
    return out


def remove_tree(top: str) -> None:
    """Removes cgroup `top` and any left beneath it, deepest first (OSError if one stays)."""
    for path in reversed(_tree(top)):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass


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
                kills = counts(read(os.path.join(directory, events))).get("oom_kill", 0)
            except OSError:
                continue
            if kills > 0:
                try:
                    return int(read(os.path.join(directory, limit)).strip())
                except (OSError, ValueError):
                    return 0
    return None


def own_cgroups(text: str | None = None) -> dict[str, str]:
    """This process's cgroup path in each hierarchy, from /proc/self/cgroup (`text`, read if
    None): "" for v2's; v1's under each controller's name and under a joint mount's name
    ("cpu,cpuacct") alike."""
    if text is None:
        text = read("/proc/self/cgroup")
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.count(":") < 2:
            continue
        _, controllers, path = line.split(":", 2)
        names = [*controllers.split(","), controllers] if controllers else [""]
        for name in names:
            out[name] = path
    return out


def homes(cgroups: list[str], root: str = "/sys/fs/cgroup", own: str | None = None) -> list[str]:
    """This process's own cgroup in the hierarchy of each of these (`own`: /proc/self/cgroup's
    text, read if None): v2's one, or v1's where the path lies under the controller's mount
    (`root`/cpu, or a joint `root`/cpu,cpuacct)."""
    mounts = {(f"{root}/{name}" if name else root): path for name, path in own_cgroups(own).items()}
    out = []
    for path in cgroups:
        # The longest mount the path lies under: v1's controllers sit below v2's root.
        mount = max(
            (d for d in mounts if path.startswith(d.rstrip("/") + "/")), key=len, default=root
        )
        mine = mounts.get(mount, "/")
        out.append(mount.rstrip("/") + "/" + mine.lstrip("/") if mine != "/" else mount)
    return out


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(cgroups: list[str], name: str) -> tuple[float, float] | None:
    """(user, system) CPU seconds counted in the first of these cgroups that has `name`: v2's
    cpu.stat (microseconds) or v1's cpuacct.stat (clock ticks); None where none has it."""
    for directory in cgroups:
        try:
            found = counts(read(os.path.join(directory, name)))
        except OSError:
            continue
        if "user_usec" in found:
            return found["user_usec"] / 1e6, found.get("system_usec", 0) / 1e6
        if "user" in found:
            return found["user"] / _TICKS, found.get("system", 0) / _TICKS
    return None


def read(path: str) -> str:
    """A whole control file, with os-level calls (the agent reads a few of them a task)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def counts(text: str) -> dict[str, int]:
    """A control file's "key value" lines (memory.stat, memory.events, cpu.stat...): key ->
    number; lines without a whole number are left out."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out
