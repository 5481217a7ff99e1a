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
from pathlib import Path

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
    trial: Callable[[], str] = lambda: "",
) -> Decision:
    """`asked`: --task-namespaces (True), --no-task-namespaces (False), neither (None).
    `c_wrapper` finds (or builds) the C wrapper, and `trial` runs `true` in namespaces of its
    own ("" when it ran; else what failed: an LSM or a container may refuse a mount that root
    with CAP_SYS_ADMIN would make elsewhere); each is asked only when nothing else is missing.
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
    failed = "" if missing else trial()
    if not missing and not failed:
        return Decision(True)
    why = f"cannot be made here: {failed}" if failed else "needs " + " and ".join(missing)
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


def namespace_init(task_pid: int, wrapper_pid: int, proc: str = "/proc") -> tuple[int, int] | None:
    """The first process of a task's own pid namespace, as (pid, start in clock ticks): the
    task's process itself (the C wrapper clones it there), or a child of it (runc's, for a task
    from an image). None for a task in the agent's namespaces, or one gone. The chain up to the
    task's wrapper is checked, and the start time goes with the pid, so a pid reused by
    another process once the task ended is never taken for the task's (the wrapper's --enter
    checks it again as it opens the namespaces)."""
    try:
        ours = os.readlink(f"{proc}/self/ns/pid")
        parent, started = _stat(task_pid, proc)
        if parent != wrapper_pid:
            return None
        if os.readlink(f"{proc}/{task_pid}/ns/pid") != ours:
            return task_pid, started
        children: list[int] = []
        for thread in os.listdir(f"{proc}/{task_pid}/task"):  # runc forks from any thread
            with open(f"{proc}/{task_pid}/task/{thread}/children") as listed:
                children += [int(c) for c in listed.read().split()]
        for child in children:
            if os.readlink(f"{proc}/{child}/ns/pid") != ours:
                parent, started = _stat(child, proc)
                if parent == task_pid:
                    return child, started
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stat(pid: int, proc: str) -> tuple[int, int]:
    """(parent pid, start time in clock ticks) from /proc/PID/stat."""
    with open(f"{proc}/{pid}/stat") as f:
        text = f.read()
    fields = text[text.rindex(")") + 2 :].split()  # from field 3, the state
    return int(fields[1]), int(fields[19])


def trial(wrapper: str, sandboxes: Path, scratch: Path) -> str:
    """Runs `true` through `wrapper` in namespaces of its own, its sandbox under `sandboxes`
    (hidden from it but its own, as a task's) and its files in `scratch` (removed after): ""
    when it ran, else why not."""
    import shutil

    run, sandbox = scratch / "run", sandboxes / ".namespaces-trial"
    try:
        run.mkdir(parents=True, exist_ok=True)
        sandbox.mkdir(exist_ok=True)
        env_read, env_write = os.pipe()
        report_read, report_write = os.pipe()
        os.write(env_write, b"PATH=/usr/bin:/bin\0\0")
        os.close(env_write)
        argv = [
            wrapper, f"--ns={16 << 20}:{sandboxes}", str(run), str(sandbox / "stdout"),
            str(sandbox / "stderr"), str(sandbox), "-", "0", "--", "true",
        ]  # fmt: skip
        try:  # as the agent spawns it: the environment on fd 3, the report on stdout
            pid = os.posix_spawn(
                wrapper,
                argv,
                {},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_DUP2, report_write, 1),
                    (os.POSIX_SPAWN_DUP2, env_read, 3),
                ],
            )
        finally:
            os.close(env_read)
            os.close(report_write)
        with os.fdopen(report_read, "rb") as reports:
            report = reports.read().decode(errors="replace").strip()
        status = os.waitpid(pid, 0)[1]
        if " started " not in f" {report} ":
            code = os.waitstatus_to_exitcode(status)
            return report.partition(" error ")[2] or report or f"exit {code}"
        ended = (run / "exit.json").read_text()
        return "" if '"exit_code": 0' in ended else f"true ended {ended.strip()}"
    except OSError as e:
        return str(e)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(sandbox, ignore_errors=True)
