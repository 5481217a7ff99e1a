"""The task wrapper: one per task, outliving the agent; and the launcher that forks wrappers.

Two modes:
    python -m agora.agent.executor --serve    the launcher ("zygote"): started once by the agent,
                                        already imported; it reads one launch per line on
                                        stdin ("RUN_DIR<TAB>SPEC_JSON") and hands it to a
                                        wrapper it forked ahead of time, so a launch costs
                                        neither a Python start-up nor a fork on its way.
    python -m agora.agent.executor RUN_DIR    one wrapper for one run, reading RUN_DIR/spec.json
                                        (the fallback).

The agent spawns the C wrapper (agent/task_wrapper.c, built by agent/native_wrapper.py) itself
(agent/direct_spawn.py, with spawn_native here); where it cannot (no pidfds), `--serve --native
WRAPPER` makes the launcher spawn it for each launch that carries its spec, instead of handing
it to a forked Python spare: the same reports and files, for a fraction of the CPU. This module's
wrapper is the reference the C one follows, and takes what the C one cannot be given.

A wrapper forked by the launcher (a "spare", forked before its launch arrives and replaced as
soon as it gets one) has a session of its own, like the one-shot one; it is the launcher's
child (not the agent's), reaped by the kernel since the launcher ignores SIGCHLD, and adopted
by init when the launcher exits, so it outlives both. The launcher's stdout is
shared by every wrapper it forks; each reports with ONE write shorter than PIPE_BUF
("RUN_ID started TASK_PID WRAPPER_PID WRAPPER_START START_TICKS" or "RUN_ID error MESSAGE"),
which the kernel never interleaves with another; the launcher's own line after a hand-off,
"RUN_ID handed PID START_TICKS", names the wrapper that took the run. Nothing here uses
threads, so forking is safe.

The one-shot wrapper: the agent starts this in a new session. It forks once so that it is no
longer the agent's child (a restarted agent re-attaches to it through its pid), starts the
task's command in a process group of its own with stdout and stderr in the sandbox, waits for
it, kills whatever the command left behind in its group, and writes the exit status atomically
to RUN_DIR/exit.json. It reports "started TASK_PID WRAPPER_PID WRAPPER_START START_TICKS" or
"error MESSAGE" on its stdout, then closes it, so the agent learns the outcome of the launch
without polling.

Files in RUN_DIR:
    spec.json     argv, cwd, env, stdout, stderr, cgroups: written by the agent for the
                  one-shot wrapper only (the launcher's wrappers get it on the pipe)
    wrapper.json  written here once the command runs: wrapper_pid, wrapper_start (wall clock),
                  wrapper_start_ticks (since boot: the pid-reuse guard), task_pid
    exit.json     written here at the end: {"exit_code": N} | {"signal": N} | {"error": "..."}
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from agora.agent import cgroup_members
from agora.agent.atomic_files import write_json_in_place
from agora.agent.launch_spec import LaunchSpec, WrapperUser
from agora.agent.proc_stat import start_ticks, ticks_to_time
from agora.agent.wrapper_reports import Handed, Refused, Report, Started, format_report

# In the launcher's wrappers: the run id, before every report on the shared pipe.
_report_run_id = ""


def _report(report: Report) -> None:
    """Tells the agent (if it is still listening) and then lets go of the pipe."""
    try:
        os.write(1, format_report(report, _report_run_id))
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def _as_user(user: WrapperUser | None) -> dict:
    """Popen's arguments to start the command as the task's user (agora.agent.task_user)."""
    if user is None:
        return {}  # the agent's own user; Popen can then vfork
    return {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}


def _launch(run_dir: Path, spec: LaunchSpec | None, spawner: int) -> int:
    if spec is None:
        spec = LaunchSpec.from_wire(json.loads((run_dir / "spec.json").read_text()))
    cgroups = list(spec.cgroups)
    # The wrapper steps into the task's cgroups just for the spawn, so the command starts
    # inside (and all it forks stays there) without a preexec_fn: that would make Popen fork
    # this process and run Python in the child instead of a vfork (~1 ms of CPU a task).
    # The wrapper started in the agent's own cgroups: that is where it goes back to.
    homes = cgroup_members.homes(cgroups) if cgroups else []
    try:
        user = spec.user
        with _open_log(spec.stdout, user) as out, _open_log(spec.stderr, user) as err:
            proc = None
            try:
                try:
                    _move_self_to(cgroups)
                except OSError as e:
                    raise _NoCgroup(f"cannot put the task in its cgroup: {e}") from e
                proc = subprocess.Popen(
                    spec.argv,
                    cwd=spec.cwd,
                    env=spec.env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    close_fds=True,
                    process_group=0,
                    **_as_user(user),
                )
            finally:
                try:
                    _move_self_to(homes)
                except OSError as e:
                    # Left inside, the wrapper would count against the task's limits and die
                    # in its kills, losing the exit status: the task does not run instead.
                    if proc is not None:
                        _kill_group(proc.pid)
                        proc.wait()
                    raise _NoCgroup(f"cannot take the task wrapper out of its cgroup: {e}") from e
    except _NoCgroup as e:
        _empty_cgroups(cgroups)
        message = str(e)
        write_json_in_place(run_dir / "exit.json", {"error": message})
        _let_go(cgroups, spawner, run_dir)
        _report(Refused(message))
        return 1
    except OSError as e:
        what = e.strerror or str(e)
        if isinstance(e, FileNotFoundError):
            what = "command not found"
        elif isinstance(e, PermissionError):
            what = "permission denied"
        message = f"cannot run {spec.argv[0]!r}: {what}"
        write_json_in_place(run_dir / "exit.json", {"error": message})
        _let_go(cgroups, spawner, run_dir)
        _report(Refused(message))
        return 1

    def forward(signum, _frame):
        try:
            os.killpg(proc.pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    me = os.getpid()
    ticks = start_ticks(me)
    assert ticks is not None  # our own pid: its /proc entry is there
    start = ticks_to_time(ticks)
    # The report carries what wrapper.json does, so the agent need not wait for the file
    # (only a restarted agent reads it, long after it is written).
    _report(Started(proc.pid, me, start, ticks))
    # Not fsync'd: it only matters while this process lives, and a crash of the machine that
    # loses it ends the task too (the agent then reports the launch as interrupted). In place,
    # into the room the agent reserved: a full disk does not stop it.
    write_json_in_place(
        run_dir / "wrapper.json",
        {
            "wrapper_pid": me,
            "wrapper_start": start,
            "wrapper_start_ticks": ticks,
            "task_pid": proc.pid,
        },
    )

    returncode = proc.wait()
    # The command is gone; so must be anything it left running in its group.
    _kill_group(proc.pid)
    memory_limit_hit = cgroup_members.memory_limit_hit(cgroups)
    _empty_cgroups(cgroups)
    result = {"signal": -returncode} if returncode < 0 else {"exit_code": returncode}
    if memory_limit_hit is not None:
        result["memory_limit_hit"] = memory_limit_hit
    # Not fsync'd (0.5 ms of CPU a task): the agent reads it as soon as this process ends and
    # logs the terminal update; a machine crash before that ends the task's run anyway. In
    # place, into the room the agent reserved: the task may have filled the disk.
    write_json_in_place(run_dir / "exit.json", result)
    _let_go(cgroups, spawner, run_dir)
    return 0


def _open_log(path: str, user: WrapperUser | None):
    """A sandbox file for the task's output, appended to. The sandbox belongs to the task's
    user, who could put anything there: never through a symlink, only a plain file with one
    link (of that user's, when the task runs as one), and a FIFO does not block the open."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o666)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or (user and st.st_uid != user.uid):
            raise PermissionError(errno.EACCES, "not a plain file of the task's", path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "ab")


class _NoCgroup(Exception):
    """The wrapper could not enter the task's cgroup: the task is not started."""


def _move_self_to(cgroups: list[str]) -> None:
    """Moves this process into each cgroup; OSError from the first that refuses it.

    Single-threaded on cgroup v1, it moves its one thread ("0" into `tasks`), which spares the
    kernel's write lock on every thread group that a move by pid takes (an RCU grace period,
    5-15 ms on an idle machine; agent/task_wrapper.c does the same). Cgroup v2 has no `tasks`.
    """
    alone = len(os.listdir("/proc/self/task")) == 1
    for path in cgroups:
        if alone:
            try:
                with open(os.path.join(path, "tasks"), "w") as f:
                    f.write("0")
                continue
            except FileNotFoundError:
                pass
        with open(os.path.join(path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _empty_cgroups(cgroups: list[str]) -> None:
    """Kills what escaped the process group (setsid) but not the cgroup. The agent removes it
    after, or keeps it for its next task (agora.agent.isolation)."""
    for _ in range(50):
        # This process is still inside only if it could not step out after the spawn.
        if not cgroup_members.kill(cgroups, spare=os.getpid()):
            break
        time.sleep(0.02)


def _let_go(cgroups: list[str], spawner: int, run_dir: Path) -> None:
    """After exit.json: where no agent watches (this process was re-parented away from
    `spawner`, the agent's process, or the agent is stopping: the work dir's meta/unwatched),
    nobody will keep or remove the run's cgroups but this wrapper. Checked after exit.json, so
    a stopping agent that found no exit.json is sure to have left its mark before this."""
    if os.getppid() != spawner or (run_dir.parent.parent / "unwatched").exists():
        for path in cgroups:
            try:
                os.rmdir(path)
            except OSError:
                pass


def _wrap(run_dir: Path, spec: LaunchSpec | None = None, spawner: int | None = None) -> int:
    """The wrapper's life, in the process that has already detached; `spec` None: read
    RUN_DIR/spec.json."""
    try:
        # The spawner: the launcher, which ends with the agent, or the one-shot's agent.
        return _launch(run_dir, spec, os.getppid() if spawner is None else spawner)
    except BaseException as e:  # noqa: BLE001 - the agent must learn of any failure
        if not read_exit_json(run_dir):
            write_json_in_place(run_dir / "exit.json", {"error": f"executor failed: {e!r}"})
        _report(Refused(f"executor failed: {e!r}"))
        raise


def _become_wrapper() -> None:
    """In a freshly forked child of the launcher: a session and dispositions of its own."""
    # The launcher's dispositions are not the wrapper's: it waits for its command (an
    # ignored SIGCHLD would make that fail) and the command inherits what it has.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    # The wrapper needs none of the launcher's input: only its stdout, until it reports.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _fork_spare() -> tuple[int, int]:
    """In the launcher: forks the next run's wrapper ahead of time; returns (pid, fd).

    The spare has its session set up and waits for one launch line on the pipe behind `fd`,
    so a launch costs a pipe write instead of a fork. Unlike the one-shot wrapper it needs no
    second fork: it is the launcher's child, not the agent's, and the launcher ignores SIGCHLD
    so the kernel reaps it when it ends (no zombie for a pidfd or a /proc check to mistake).
    When the launcher exits, init adopts it; a spare still waiting reads EOF and exits.
    """
    read_fd, write_fd = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read_fd)
        os.close(write_fd)
        raise
    if pid > 0:
        os.close(read_fd)
        return pid, write_fd
    code = 1
    try:
        os.close(write_fd)
        _become_wrapper()
        line = _read_all(read_fd)
        os.close(read_fd)
        if line:
            code = _run_line(line)
        else:
            code = 0  # the launcher ended: nothing to run
    except BaseException as e:  # noqa: BLE001 - never return into the launcher's loop
        try:
            _report(Refused(f"executor failed: {e!r}"))
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _run_line(line: bytes) -> int:
    """One launch line: "RUN_DIR\tSPEC_JSON", or "RUN_DIR" alone to read RUN_DIR/spec.json."""
    global _report_run_id
    raw_dir, _, raw_spec = line.partition(b"\t")
    run_dir = Path(os.fsdecode(raw_dir))
    _report_run_id = run_dir.name
    return _wrap(run_dir, LaunchSpec.from_wire(json.loads(raw_spec)) if raw_spec else None)


class _Spares:
    """The launcher's one spare wrapper, replaced as soon as it is handed a launch."""

    def __init__(self) -> None:
        self._spare: tuple[int, int] | None = None

    def refill(self) -> None:
        if self._spare is None:
            try:
                self._spare = _fork_spare()
            except OSError:
                pass  # no process to spare now (EAGAIN, ENOMEM): the next launch forks

    def launch(self, line: bytes) -> int:
        """Hands the line to the spare (forking one if none is ready) and returns its pid;
        OSError if impossible."""
        for _ in range(2):
            if self._spare is None:
                self._spare = _fork_spare()
            pid, fd = self._spare
            self._spare = None
            try:
                _write_all(fd, line)
                return pid
            except BrokenPipeError:
                continue  # the spare died before its launch (killed?): fork another
            finally:
                os.close(fd)
        raise OSError("the task wrapper died before it could start the command")

    def close(self) -> None:
        if self._spare is not None:
            os.close(self._spare[1])  # the spare reads EOF and exits
            self._spare = None


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


PAGE_PIPE = 4096


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _native_argv(wrapper: str, run_dir: str, spec: LaunchSpec) -> list[str]:
    """The C wrapper's command line for one run (agent/task_wrapper.c's usage)."""
    user = spec.user
    who = "-" if user is None else f"{user.uid}:{user.gid}:" + ",".join(map(str, user.groups))
    return [wrapper, run_dir, spec.stdout, spec.stderr, spec.cwd, who,
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


def _spawn_native(wrapper: str, line: bytes) -> int | None:
    """Spawns the C wrapper for a launch line that carries its spec; returns its pid, or None
    for a line the Python wrapper must take (no spec, or one the C one cannot be given)."""
    raw_dir, _, raw_spec = line.partition(b"\t")
    if not raw_spec:
        return None
    try:
        spec = LaunchSpec.from_wire(json.loads(raw_spec))
    except ValueError:
        return None  # the Python wrapper reports what is wrong with it
    return spawn_native(wrapper, os.fsdecode(raw_dir), spec)


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
        _write_all(write_fd, environment)
    except OSError:
        pass  # it died already: it never reports, and the agent learns that from its pid
    finally:
        os.close(write_fd)
    return pid


# The C wrapper's own failures to start: the launcher forks Python wrappers from then on. Others
# (EAGAIN, ENOMEM, EMFILE) pass, and fail this launch only.
WRAPPER_BROKEN = {errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ETXTBSY, errno.ENOTDIR}


def serve(native: str | None = None) -> int:
    """The launcher: one launch line per line on stdin; exits at EOF (the agent is gone).
    `native`: the C wrapper (agent/native_wrapper.py) to spawn for each launch, instead of
    handing it to a forked Python wrapper."""
    # Ctrl-C in the agent's terminal is the agent's business; it closes our stdin when done.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Wrappers are reaped by the kernel as they end: the launcher never waits for them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    spares = _Spares()
    if native is None:
        spares.refill()
    pending = b""
    try:
        while True:
            try:
                chunk = os.read(0, 65536)
            except InterruptedError:
                continue
            if not chunk:
                return 0
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                run_id = Path(os.fsdecode(line.partition(b"\t")[0].strip())).name
                try:
                    pid = None
                    if native is not None:
                        try:
                            pid = _spawn_native(native, line.strip())
                        except OSError as e:
                            if e.errno not in WRAPPER_BROKEN:
                                raise
                            # Gone or broken (a cleaned cache?): Python wrappers from now on.
                            message = f"the C task wrapper cannot be spawned ({e}); forking "
                            print(message + "Python wrappers from now on", file=sys.stderr)
                            native = None
                    if pid is None:
                        pid = spares.launch(line.strip())
                except OSError as e:
                    # No process to spare (EAGAIN, ENOMEM): this launch fails, the launcher
                    # lives.
                    refused = Refused(f"cannot fork the task wrapper: {e}")
                    os.write(1, format_report(refused, run_id))
                    continue
                # Lets the agent watch the wrapper until it reports: one that dies before
                # that (killed) would otherwise leave the launch waiting for ever. The start
                # ticks let it tell that process from a later one with the same pid.
                os.write(1, format_report(Handed(pid, start_ticks(pid)), run_id))
            # Off the launch's path: the next spare is forked while this one starts its command.
            if native is None:
                spares.refill()
    finally:
        spares.close()


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[1] == "--serve":
        return serve()
    if len(argv) == 4 and argv[1] == "--serve" and argv[2] == "--native":
        return serve(argv[3])
    if len(argv) != 2:
        print(
            "usage: python -m agora.agent.executor RUN_DIR | --serve [--native WRAPPER]",
            file=sys.stderr,
        )
        return 2
    run_dir = Path(argv[1])
    agent = os.getppid()  # before the fork: the wrapper below is re-parented
    if os.fork() > 0:
        # The intermediate process: exit at once so the agent reaps it and the wrapper below
        # is re-parented, free to outlive the agent.
        os._exit(0)
    return _wrap(run_dir, spawner=agent)


if __name__ == "__main__":
    sys.exit(main(sys.argv))


def read_exit_json(run_dir: Path) -> dict:
    """exit.json's content; {} while it is missing or still the agent's placeholder."""
    try:
        with open(run_dir / "exit.json") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
