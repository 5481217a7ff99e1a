"""The Python task wrapper: one per run, outliving the agent; the reference the C one follows.

The wrapper starts the task's command in a process group of its own (inside the task's
cgroups) with stdout and stderr in the sandbox, reports the launch on its stdout (one line,
agora.agent.wrapper_reports), waits for the command, kills whatever it left behind in its group
and cgroups, and writes the exit status to RUN_DIR/exit.json. The C wrapper
(agent/task_wrapper.c) does the same for a fraction of the CPU; this one takes what the C one
cannot be given.

It runs in one of two ways (agent/spawners.py):
    forked by the fork server (agent/fork_server_process.py) ahead of its launch, a "spare"
        that takes one launch line on a pipe (`take_launch_line`); its report on the server's
        stdout, which every spare shares, starts with the run id;
    one-shot, `python -m agora.agent.executor RUN_DIR` (`run_one_shot`): it forks once so
        that it is no longer the agent's child (a restarted agent re-attaches to it through
        its pid) and reads RUN_DIR/spec.json; its stdout is its own.
Nothing here uses threads, so forking is safe.

Files in RUN_DIR:
    spec.json     the LaunchSpec's wire form: written by the agent for the one-shot wrapper
                  only (the fork server's wrappers get it on the pipe)
    wrapper.json  written here once the command runs: wrapper_pid, wrapper_start (wall clock),
                  wrapper_start_ticks (since boot: the pid-reuse guard), task_pid
    exit.json     written here at the end: {"exit_code": N} | {"signal": N} | {"error": "..."}
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import stat
import subprocess
import time
from pathlib import Path

from agora.agent import cgroup_members
from agora.agent.atomic_files import write_json_in_place
from agora.agent.launch_spec import LaunchSpec, WrapperUser
from agora.agent.proc_stat import start_ticks, ticks_to_time
from agora.agent.wrapper_reports import Refused, Report, Started, format_report

__all__ = ["become_wrapper", "read_exit_json", "report", "run_one_shot", "take_launch_line"]

# In the fork server's wrappers: the run id, before every report on the shared pipe.
_report_run_id = ""


def report(launch: Report) -> None:
    """Tells the agent (if it is still listening) and then lets go of the pipe."""
    try:
        os.write(1, format_report(launch, _report_run_id))
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


def _rlimits(text: str):
    """A preexec_fn setting "NAME:VALUE,..." (TaskInfo.rlimits) as soft and hard limits."""
    import resource

    limits = []
    for item in text.split(","):
        name, _, value = item.partition(":")
        limits.append((getattr(resource, f"RLIMIT_{name.upper()}"), int(value)))

    def apply() -> None:
        for which, value in limits:
            resource.setrlimit(which, (value, value))

    return apply


def _launch(run_dir: Path, spec: LaunchSpec | None, spawner: int) -> int:
    if spec is None:
        spec = LaunchSpec.from_wire(json.loads((run_dir / "spec.json").read_text()))
    cgroups = list(spec.cgroups)
    if spec.namespaces:
        # Only the C wrapper makes them (agent/task_wrapper.c): the task does not run without.
        message = "the task's namespaces need the C task wrapper, which this agent lacks"
        write_json_in_place(run_dir / "exit.json", {"error": message})
        _let_go(cgroups, spawner, run_dir)
        report(Refused(message))
        return 1
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
                    # Only when asked: a preexec_fn makes Popen fork rather than vfork.
                    preexec_fn=_rlimits(spec.rlimits) if spec.rlimits else None,
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
        report(Refused(message))
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
        report(Refused(message))
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
    report(Started(proc.pid, me, start, ticks))
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
    result: dict[str, float] = (
        {"signal": -returncode} if returncode < 0 else {"exit_code": returncode}
    )
    if memory_limit_hit is not None:
        result["memory_limit_hit"] = memory_limit_hit
    # What the command used, all told: the processes this wrapper waited for (the task).
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    result.update(cpu_user=used.ru_utime, cpu_system=used.ru_stime, max_rss_kb=used.ru_maxrss)
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
        report(Refused(f"executor failed: {e!r}"))
        raise


def become_wrapper() -> None:
    """In a freshly forked child of the fork server: a session and dispositions of its own."""
    # The launcher's dispositions are not the wrapper's: it waits for its command (an
    # ignored SIGCHLD would make that fail) and the command inherits what it has.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.setsid()
    # The wrapper needs none of the launcher's input: only its stdout, until it reports.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)


def take_launch_line(line: bytes) -> int:
    """One launch line: "RUN_DIR\tSPEC_JSON", or "RUN_DIR" alone to read RUN_DIR/spec.json."""
    global _report_run_id
    raw_dir, _, raw_spec = line.partition(b"\t")
    run_dir = Path(os.fsdecode(raw_dir))
    _report_run_id = run_dir.name
    return _wrap(run_dir, LaunchSpec.from_wire(json.loads(raw_spec)) if raw_spec else None)


def run_one_shot(run_dir: Path) -> int:
    """`python -m agora.agent.executor RUN_DIR`: detaches from the agent, then wraps the run
    that RUN_DIR/spec.json describes."""
    agent = os.getppid()  # before the fork: the wrapper below is re-parented
    if os.fork() > 0:
        # The intermediate process: exit at once so the agent reaps it and the wrapper below
        # is re-parented, free to outlive the agent.
        os._exit(0)
    return _wrap(run_dir, spawner=agent)


def read_exit_json(run_dir: Path) -> dict:
    """exit.json's content; {} while it is missing or still the agent's placeholder."""
    try:
        with open(run_dir / "exit.json") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
