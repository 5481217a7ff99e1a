"""Whether this agent runs plain tasks in namespaces of their own (the C wrapper's --ns).

On by default wherever the host allows it, as Nomad's exec driver and every container runtime
do: a task then sees only its own processes, a private /tmp and /dev/shm, and no other task's
sandbox, however many tasks share a Unix user. It needs root with CAP_SYS_ADMIN (to make
namespaces and mounts), the kernel's pid, mount, ipc and uts namespaces, and the C task wrapper
(agent/native_wrapper.py builds it with a C compiler). Where a part is missing, an agent left to
its default runs tasks without namespaces and says why, at start and in `agora cluster agents`
(`no-namespaces`); one told `--task-namespaces` refuses to start instead, since its operator
asked for isolation it cannot give. `--no-task-namespaces` turns them off.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

NEEDED_KINDS = ("pid", "mnt", "ipc", "uts")  # as named in /proc/self/ns
CAP_SYS_ADMIN = 21


@dataclass(frozen=True)
class Decision:
    on: bool
    why_not: str = ""  # what is missing (or that the operator said no), when off


def decide(
    asked: bool | None,
    root: bool,
    sys_admin: bool,
    kernel_kinds: Iterable[str],
    c_wrapper: Callable[[], bool],
) -> Decision:
    """`asked`: --task-namespaces (True), --no-task-namespaces (False), neither (None).
    `c_wrapper` finds (or builds) the C wrapper; it is asked only when nothing else is missing.
    Raises ValueError, saying what is missing and what to pass instead, when they were asked
    for and cannot be had."""
    if asked is False:
        return Decision(False, "--no-task-namespaces")
    missing = []
    if not root:
        missing.append("root")
    elif not sys_admin:
        missing.append("CAP_SYS_ADMIN")
    absent = [k for k in NEEDED_KINDS if k not in set(kernel_kinds)]
    if absent:
        missing.append(f"the kernel's {', '.join(absent)} namespaces")
    if not missing and not c_wrapper():
        missing.append("the C task wrapper (a C compiler to build it)")
    if not missing:
        return Decision(True)
    why = "needs " + " and ".join(missing)
    if asked:
        raise ValueError(
            f"--task-namespaces {why}; give the agent them, or pass --no-task-namespaces to "
            "run tasks without namespaces"
        )
    return Decision(False, why)


def has_capability(bit: int, status_path: str = "/proc/self/status") -> bool:
    """Whether this process holds capability `bit` in its effective set."""
    try:
        with open(status_path) as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def namespace_init(task_pid: int, proc: str = "/proc") -> int | None:
    """The pid of the first process of a task's own pid namespace: `task_pid` itself (the C
    wrapper clones it there), or a child of it (runc's, for a task from an image); None for a
    task in the agent's namespaces, or one gone."""
    try:
        ours = os.readlink(f"{proc}/self/ns/pid")
        if os.readlink(f"{proc}/{task_pid}/ns/pid") != ours:
            return task_pid
        children: list[int] = []
        for thread in os.listdir(f"{proc}/{task_pid}/task"):  # runc forks from any thread
            with open(f"{proc}/{task_pid}/task/{thread}/children") as listed:
                children += [int(c) for c in listed.read().split()]
        for child in children:
            if os.readlink(f"{proc}/{child}/ns/pid") != ours:
                return child
    except (OSError, ValueError):
        pass
    return None
