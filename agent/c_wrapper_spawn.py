"""Spawning the C task wrapper (agent/task_wrapper.c) for one run: its command line, the
task's environment on a pipe, posix_spawn. Used by the agent itself (agent/direct_spawn.py)
and, where the agent has no pidfds, by the fork server (agent/fork_server_process.py).
Standard library only: the fork server imports it."""

from __future__ import annotations

import errno
import fcntl
import os
import signal

from agora.agent.launch_spec import LaunchSpec

__all__ = ["WRAPPER_BROKEN", "spawn_native", "write_all"]


PAGE_PIPE = 4096


def _fits_pipe(fd: int, size: int) -> bool:
    """Whether `size` bytes fit in the pipe `fd` at once (growing it if need be, up to the
    system's pipe-max-size): then writing them never waits for the reader."""
    if size <= PAGE_PIPE:
        return True  # every pipe holds a page, even one made when the user's pipes are capped
    try:
        if fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) >= size:
            return True
        return fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size) >= size
    except OSError:
        return False


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _native_argv(wrapper: str, run_dir: str, spec: LaunchSpec) -> list[str]:
    """The C wrapper's command line for one run (agent/task_wrapper.c's usage)."""
    user = spec.user
    who = "-" if user is None else f"{user.uid}:{user.gid}:" + ",".join(map(str, user.groups))
    ns = [f"--ns={spec.namespaces}"] if spec.namespaces else []
    if spec.rlimits:
        ns.append(f"--rlimits={spec.rlimits}")
    return [wrapper, *ns, run_dir, spec.stdout, spec.stderr, spec.cwd, who,
            str(len(spec.cgroups)), *spec.cgroups, "--", *spec.argv]  # fmt: skip


def _environment_block(env: dict[str, str]) -> bytes | None:
    """The task's environment as the C wrapper reads it on fd 3; None if it cannot be given so
    (a name with "=", or a NUL anywhere: the Python wrapper reports on those)."""
    if any(not name or "=" in name for name in env):
        return None
    # One string, encoded once (an agent builds one of these a task, some 40 variables).
    text = "".join([f"{name}={value}\0" for name, value in env.items()])
    if text.count("\0") != len(env):
        return None  # a NUL inside a name or a value
    # An empty string ends the block: the wrapper tells a whole environment from a cut one.
    return os.fsencode(text) + b"\0"


def spawn_native(
    wrapper: str,
    run_dir: str,
    spec: LaunchSpec,
    report_fd: int = 1,
    stderr_fd: int = 2,
    pipe_only: bool = False,
) -> int | None:
    """Spawns the C wrapper for one run, its reports going to `report_fd` and its complaints
    to `stderr_fd`; `pipe_only`: only if the environment fits in its pipe at once (the caller
    cannot wait for the wrapper to read it). Returns the wrapper's pid, or
    None for a spec the C wrapper cannot be given (the Python wrapper reports on it). Used by
    the launcher and, without it, by an agent that spawns C wrappers itself."""
    try:
        argv = _native_argv(wrapper, run_dir, spec)
        environment = _environment_block(spec.env)
    except (ValueError, TypeError, AttributeError):
        return None
    if environment is None or any("\0" in arg for arg in argv):
        return None
    # The wrapper (root, usually) runs with an empty environment: the task's, which a framework
    # chooses (LD_PRELOAD...), goes to the task alone, through a pipe on the wrapper's fd 3.
    # Its read end is moved above the low fds first, so that fd 3 is always a fresh dup2.
    low_read, write_fd = os.pipe()
    try:
        read_fd = fcntl.fcntl(low_read, fcntl.F_DUPFD_CLOEXEC, 10)
    except OSError:
        os.close(low_read)
        os.close(write_fd)
        raise
    os.close(low_read)
    if pipe_only and not _fits_pipe(write_fd, len(environment)):
        os.close(read_fd)
        os.close(write_fd)
        return None
    # Its stdin: the wrapper puts /dev/null there itself, before it reads anything.
    file_actions = [(os.POSIX_SPAWN_DUP2, read_fd, 3)]
    if report_fd != 1:
        file_actions.append((os.POSIX_SPAWN_DUP2, report_fd, 1))
    if stderr_fd != 2:
        file_actions.append((os.POSIX_SPAWN_DUP2, stderr_fd, 2))
    try:
        pid = os.posix_spawn(
            wrapper,
            argv,
            {},
            # Its own session, dispositions back to default (the launcher ignores SIGCHLD and
            # SIGINT); stdout is the shared report pipe, as for a spare.
            setsid=True,
            setsigdef=(signal.SIGCHLD, signal.SIGINT),
            file_actions=file_actions,
        )
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    try:
        write_all(write_fd, environment)
    except OSError:
        pass  # it died already: it never reports, and the agent learns that from its pid
    finally:
        os.close(write_fd)
    return pid


# The C wrapper's own failures to start: the launcher forks Python wrappers from then on. Others
# (EAGAIN, ENOMEM, EMFILE) pass, and fail this launch only.
WRAPPER_BROKEN = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ETXTBSY, errno.ENOTDIR}
