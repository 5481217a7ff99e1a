"""Starting, watching and killing one task's wrapper process (see agora.agent.executor).

The C wrapper is spawned by the agent itself (agent/direct_spawn.py); Python wrappers are forked
by one long-lived launcher process (`Launcher`), so a launch costs a fork rather than a Python
start-up; `python -m agora.agent.executor RUN_DIR` per task is the last fallback.

Watching works the same for a wrapper this agent started and for one a previous agent left
behind: through a pidfd (Linux >= 5.3), which reports the exit of any process, not only of a
child, or by polling where pidfds are unavailable. The wrapper's start time guards every
decision against pid reuse.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import structlog

from agora.agent import native_wrapper
from agora.agent.atomic_files import atomic_write_json
from agora.agent.checkpoint import read_json
from agora.agent.direct_spawn import REPORT_GRACE, DirectSpawns, WrapperDied, reap, usable
from agora.agent.launch_spec import LaunchSpec, WrapperUser
from agora.agent.proc_stat import is_running
from agora.agent.task_user import TaskUser
from agora.agent.wrapper_reports import Handed, Refused, Report, Started, parse_line, parse_report
from agora.common import ResourceError, Resources
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.25
# For records of older agents, which hold only a wall-clock start: how closely it must match.
START_TIME_SLACK = 0.05


class LaunchError(Exception):
    """The command could not be started; the message says why, for the task's status."""


@dataclass(frozen=True)
class Wrapper:
    """A running task wrapper: enough to re-find it after an agent restart."""

    wrapper_pid: int
    wrapper_start: float  # wall clock, for people (and the only guard in older records)
    task_pid: int  # also the task's process group id
    start_ticks: int | None = None  # clock ticks since boot: what guards against pid reuse

    @classmethod
    def reported(cls, started: Started) -> Wrapper:
        """The wrapper a "started" report names (wrapper.json, written after it, says the same)."""
        return cls(
            started.wrapper_pid, started.wrapper_start, started.task_pid, started.start_ticks
        )

    @classmethod
    def load(cls, run_dir: Path) -> Wrapper | None:
        data = read_json(run_dir / "wrapper.json")
        if data is None:
            return None
        try:
            ticks = data.get("wrapper_start_ticks")
            return cls(
                int(data["wrapper_pid"]),
                float(data["wrapper_start"]),
                int(data["task_pid"]),
                None if ticks is None else int(ticks),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def alive(self) -> bool:
        """True while the very process we started runs (not a zombie, not a reused pid)."""
        return is_running(self.wrapper_pid, self.start_ticks, self.wrapper_start, START_TIME_SLACK)

    def signal_group(self, signum: int) -> bool:
        """Signals the task's whole process group; False if it no longer exists."""
        try:
            os.killpg(self.task_pid, signum)
            return True
        except ProcessLookupError:
            return False
        except PermissionError as e:
            log.warning("cannot signal task group", pgid=self.task_pid, error=str(e))
            return False

    async def wait(self) -> None:
        """Returns once the wrapper has exited (reaped, if it is this process's child: a C
        wrapper the agent spawned itself)."""
        try:
            await self._wait()
        finally:
            reap(self.wrapper_pid)

    async def _wait(self) -> None:
        try:
            fd = os.pidfd_open(self.wrapper_pid)
        except ProcessLookupError:
            return
        except OSError:
            while self.alive():
                await asyncio.sleep(POLL_SECONDS)
            return
        loop = asyncio.get_running_loop()
        exited = loop.create_future()

        def on_readable() -> None:
            if not exited.done():
                exited.set_result(None)

        try:
            # Opened the fd after checking nothing: make sure it is our process, not a new one.
            if not self.alive():
                return
            loop.add_reader(fd, on_readable)
            try:
                # A zombie wrapper (a parent that does not reap) also makes the pidfd readable.
                await exited
            finally:
                loop.remove_reader(fd)
        finally:
            os.close(fd)


def read_exit(run_dir: Path) -> dict | None:
    """What the wrapper recorded of the task's end; None while it has not (the file is
    missing, or still the placeholder the agent reserved it with)."""
    return read_json(os.path.join(run_dir, "exit.json")) or None


def command_argv(command: common_pb2.CommandInfo) -> list[str]:
    """argv exec'd directly, or the shell string run by /bin/sh -c; ValueError if neither."""
    if command.argv and command.shell:
        raise ValueError("the command sets both argv and shell: give exactly one")
    if command.argv:
        return list(command.argv)
    if command.shell:
        return ["/bin/sh", "-c", command.shell]
    raise ValueError("the task has no command: set command.argv or command.shell")


def task_ports(task: common_pb2.TaskInfo) -> list[int]:
    if not any(r.name == "ports" for r in task.resources):
        return []  # most tasks: no need to parse (and check) all of their resources
    try:
        ranges = Resources.from_proto(task.resources).port_ranges()
    except ResourceError:
        return []
    return [port for begin, end in ranges for port in range(begin, end + 1)]


def task_environment(
    base: dict[str, str],
    task: common_pb2.TaskInfo,
    framework_id: str,
    agent_id: str,
    sandbox: Path,
    user: TaskUser | None = None,
) -> dict[str, str]:
    """The agent's environment, then Agora's variables, then the command's own."""
    env = dict(base)
    env.update(
        {
            "AGORA_TASK_ID": task.task_id,
            "AGORA_FRAMEWORK_ID": framework_id,
            "AGORA_AGENT_ID": agent_id,
            "AGORA_SANDBOX": str(sandbox),
            "HOME": env.get("HOME", str(sandbox)),
        }
    )
    if user is not None:  # who the task runs as, not who the agent is
        env.update({"USER": user.name, "LOGNAME": user.name, "HOME": user.home})
    ports = task_ports(task)
    for i, port in enumerate(ports):
        env[f"PORT{i}"] = str(port)
    if ports:
        env["PORT"] = str(ports[0])
        env["PORTS"] = ",".join(str(p) for p in ports)
    env.update(task.command.environment)
    return env


class LauncherDied(Exception):
    """The launcher process ended before any wrapper reported on this run."""


class Launcher:
    """How the agent starts wrappers: C ones it spawns itself (agent/direct_spawn.py), others
    through `python -m agora.agent.executor --serve`, the wrapper-forking launcher.

    To the launcher, one line per launch goes to its stdin (the run dir); one reader task reads
    the reports that the forked wrappers write to the shared stdout pipe and resolves each
    run's future. A dead launcher is restarted by the next launch that needs it. Its in-flight
    launches fail with LauncherDied once its stdout reaches EOF, i.e. once no process (launcher
    or a wrapper it forked) can still report on them, so the caller may decide from the run
    dir's files.
    """

    def __init__(self, log_path: Path | None = None) -> None:
        self._log_path = log_path
        # The C wrapper (agent/native_wrapper.py): found or built at the first start; None:
        # Python wrappers only. The agent spawns it itself (below); the launcher does where
        # that is not possible (no pidfds).
        self.native: str | None = None
        self._native_checked = False
        # Where the C wrapper is used, the agent spawns it itself (agent/direct_spawn.py); the
        # launcher process is then the fallback, for specs the C wrapper cannot take.
        self._direct: DirectSpawns | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[str, _Launch] = {}
        # Every launcher process not yet reaped, with its reader task.
        self._generations: list[tuple[asyncio.subprocess.Process, asyncio.Task]] = []
        self._starting = asyncio.Lock()
        self._stopped = False

    def _usable(self) -> bool:
        proc = self._proc
        return (
            proc is not None
            and proc.returncode is None
            and proc.stdin is not None
            and not proc.stdin.is_closing()
        )

    @property
    def spawns_directly(self) -> bool:
        """Whether the agent spawns C wrappers itself (they are its children)."""
        return self._direct is not None and self._direct.broken is None

    async def start(self) -> None:
        """Starts the launcher process unless one is running."""
        async with self._starting:
            if self._stopped or self._usable():
                return
            if self._proc is not None:
                log.warning("the task launcher died; starting a new one")
            if not self._native_checked:
                where = self._log_path.parent / "bin" if self._log_path else None
                self.native = await asyncio.to_thread(native_wrapper.wrapper_path, where)
                self._native_checked = True
                if self.native is not None and usable():
                    direct = DirectSpawns(self.native, self._log_path)
                    try:
                        await direct.start()
                        self._direct = direct
                    except OSError as e:
                        log.warning(
                            "cannot spawn C wrappers from the agent; the launcher does",
                            error=str(e),
                        )
            native = ["--native", self.native] if self.native else []
            log_file = open(self._log_path, "ab") if self._log_path else None
            try:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "agora.agent.executor",
                    "--serve",
                    *native,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=log_file if log_file is not None else asyncio.subprocess.DEVNULL,
                    start_new_session=True,
                )
            finally:
                if log_file is not None:
                    log_file.close()
            pending: dict[str, _Launch] = {}
            reader = asyncio.create_task(self._read(proc, pending), name="task-launcher-reader")
            self._proc, self._pending = proc, pending
            self._generations.append((proc, reader))

    async def launch(self, run_dir: Path, spec: LaunchSpec | None = None) -> Started | Refused:
        """The wrapper's report on run_dir. A C wrapper spawned here gets the spec on its command
        line and a pipe; else the spec goes down the launcher's pipe with the run dir (None: the
        wrapper reads RUN_DIR/spec.json). Raises LauncherDied, or WrapperDied when the wrapper
        handed the run died before reporting."""
        if not self._native_checked:
            await self.start()
        if spec is not None and self._direct is not None:
            report = await self._direct.launch(run_dir, spec)
            if isinstance(report, Started | Refused):
                return report
        await self.start()
        if not self._usable():
            raise LauncherDied("the task launcher is not running")
        assert self._proc is not None and self._proc.stdin is not None
        launch = _Launch(asyncio.get_running_loop())
        pending = self._pending
        pending[run_dir.name] = launch
        try:
            line = os.fsencode(str(run_dir))
            if spec is not None:
                # JSON holds no raw newline or tab: one line, split at the first tab.
                line += b"\t" + json.dumps(spec.to_wire(), separators=(",", ":")).encode()
            self._proc.stdin.write(line + b"\n")
            first: set[asyncio.Future[Started | Refused] | asyncio.Future[Handed]] = {
                launch.report,
                launch.handed,
            }
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if not launch.report.done():
                await _report_or_death(launch.report, launch.handed.result())
            return launch.report.result()
        finally:
            launch.handed.cancel()
            if pending.get(run_dir.name) is launch:
                del pending[run_dir.name]

    async def _read(self, proc: asyncio.subprocess.Process, pending: dict[str, _Launch]) -> None:
        assert proc.stdout is not None
        try:
            while line := await proc.stdout.readline():
                run_id, report = parse_line(line)
                launch = pending.get(run_id)
                if launch is None:
                    continue  # a "handed" line after the wrapper's own report
                if isinstance(report, Handed):
                    if not launch.handed.done():
                        launch.handed.set_result(report)
                    continue
                del pending[run_id]
                if not launch.report.done():
                    launch.report.set_result(report or Refused("the task wrapper failed to start"))
        except asyncio.CancelledError:
            for launch in pending.values():
                launch.report.cancel()
            raise
        except (OSError, ValueError) as e:
            log.warning("cannot read the task launcher's reports", error=str(e))
        for launch in pending.values():
            if not launch.report.done():
                launch.report.set_exception(
                    LauncherDied("the task launcher ended before reporting")
                )
        pending.clear()
        await self._reap(proc)

    async def _reap(self, proc: asyncio.subprocess.Process) -> None:
        if proc.stdin is not None:
            proc.stdin.close()
        # asyncio.subprocess.Process offers no public way to close one pipe.
        stdout = proc._transport.get_pipe_transport(1)  # type: ignore[attr-defined]  # noqa: SLF001
        if stdout is not None:
            stdout.close()
        try:
            await asyncio.wait_for(proc.wait(), 5.0)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        self._generations = [g for g in self._generations if g[0] is not proc]

    async def stop(self) -> None:
        """Ends the launcher (it exits when its stdin closes); wrappers keep running."""
        self._stopped = True
        generations = list(self._generations)
        for _, reader in generations:
            reader.cancel()
        await asyncio.gather(*(r for _, r in generations), return_exceptions=True)
        for proc, _ in generations:
            await self._reap(proc)
        self._proc = None
        if self._direct is not None:
            await self._direct.close()
            self._direct = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None


class _Launch:
    """One launch in flight: the wrapper's report, and the pid of the wrapper handed it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.report: asyncio.Future[Started | Refused] = loop.create_future()
        # The wrapper that took the run (the launcher's "handed" line).
        self.handed: asyncio.Future[Handed] = loop.create_future()


async def _report_or_death(report: asyncio.Future[Started | Refused], handed: Handed) -> None:
    """Waits for the report; raises WrapperDied if the wrapper ends without one.

    Without this a wrapper killed between taking the run and reporting (the OOM killer, an
    operator) would leave the launch waiting for ever while the launcher lives on.
    """
    loop = asyncio.get_running_loop()
    wrapper_pid, ticks = handed
    try:
        fd = os.pidfd_open(wrapper_pid)
    except ProcessLookupError:
        fd = None
    except OSError:
        fd = None
        # No pidfd (Linux < 5.3, or no fd to spare): poll instead.
        while not report.done() and is_running(wrapper_pid, ticks):
            await asyncio.wait({report}, timeout=POLL_SECONDS)
    try:
        # Checked after opening the pidfd: a pid already taken by another process means ours
        # is gone, and the pidfd would watch the wrong one.
        if fd is not None and is_running(wrapper_pid, ticks):
            died = loop.create_future()

            def on_exit() -> None:
                if not died.done():
                    died.set_result(None)

            loop.add_reader(fd, on_exit)
            try:
                await asyncio.wait({report, died}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
                died.cancel()
        if not report.done():
            # A report written just before the end may still be in the pipe.
            await asyncio.wait({report}, timeout=REPORT_GRACE)
        if not report.done():
            raise WrapperDied(f"the task wrapper (pid {wrapper_pid}) ended without reporting")
    finally:
        if fd is not None:
            os.close(fd)


async def start_wrapper(
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    sandbox: Path,
    cgroups: list[str] | None = None,
    launcher: Launcher | None = None,
    user: TaskUser | None = None,
) -> Wrapper:
    """Starts the task's wrapper and returns once the command runs.

    Through `launcher` when given (a C wrapper it spawns, or a fork of its already-running
    Python launcher), else, or when the launcher died before starting this run, with
    `python -m agora.agent.executor RUN_DIR`.
    Raises LaunchError when the command could not be started.
    """
    spec = LaunchSpec.in_sandbox(
        argv,
        env,
        sandbox,
        cgroups or (),
        None if user is None else WrapperUser(user.uid, user.gid, user.groups),
    )
    report: Report | None = None
    # A second try goes to a restarted launcher: the first may have died before reading us.
    for _ in range(2 if launcher is not None else 0):
        assert launcher is not None
        try:
            report = await launcher.launch(run_dir, spec)
            break
        except LauncherDied:
            # No process can report on this run any more: its files say what happened.
            wrapper = Wrapper.load(run_dir)
            if wrapper is not None:
                return wrapper
            result = read_exit(run_dir)
            if result is not None:
                raise LaunchError(str(result.get("error", "the task wrapper failed"))) from None
        except WrapperDied as e:
            # Not retried: the command may have started before the wrapper died.
            wrapper = Wrapper.load(run_dir)
            if wrapper is not None:
                return wrapper  # it ran: watching it reports how it ended
            result = read_exit(run_dir) or {}
            raise LaunchError(str(result.get("error", e))) from None
    if report is None and launcher is not None:
        log.warning("the task launcher is failing: starting the run with a one-shot wrapper")
    returncode = None
    if report is None:
        # Not fsync'd: the wrapper reads it at once, and a machine crash ends the run anyway.
        atomic_write_json(run_dir / "spec.json", spec.to_wire(), durable=False)
        line, returncode = await _start_one_shot(run_dir)
        report = parse_report(line)
    if isinstance(report, Started):
        return Wrapper.reported(report)
    if isinstance(report, Refused):
        raise LaunchError(report.message)
    detail = []
    if returncode is not None:
        detail = (run_dir / "executor.log").read_text(errors="replace").strip().splitlines()
    raise LaunchError(
        "the task wrapper failed to start"
        + (f": {detail[-1]}" if detail else f" (exit code {returncode})")
    )


async def _start_one_shot(run_dir: Path) -> tuple[str, int | None]:
    """Runs `python -m agora.agent.executor RUN_DIR`: (its report line, the first exit code)."""
    with open(run_dir / "executor.log", "ab") as executor_log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agora.agent.executor",
            str(run_dir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=executor_log,
            start_new_session=True,
        )
        # EOF comes once the wrapper has started the command (or failed to) and let go of
        # the pipe; the intermediate process exits at once.
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            await _let_go(proc)
            raise
    return out.decode(errors="replace").strip(), proc.returncode


async def _let_go(proc: asyncio.subprocess.Process) -> None:
    """The agent is stopping mid-launch: closes our end of the wrapper's stdout now.

    Left open, the pipe outlives the event loop and warns (ResourceWarning) when collected.
    The wrapper carries on (a write to the closed pipe fails quietly) and the next agent
    re-attaches to it through wrapper.json. The intermediate process exits at once, so
    waiting for it is short; reaped, it lets asyncio close the process transport too.
    """
    # asyncio.subprocess.Process offers no public way to close one pipe.
    stdout = proc._transport.get_pipe_transport(1)  # type: ignore[attr-defined]  # noqa: SLF001
    if stdout is not None:
        stdout.close()
    await proc.wait()


def exit_outcome(
    result: dict | None, killed: bool
) -> tuple[common_pb2.TaskState, str, str, int | None]:
    """(state, message, reason, exit_code) for what the wrapper recorded in exit.json.

    When the kernel's OOM killer acted in the task's cgroup, the wrapper recorded the limit
    (`memory_limit_hit`, bytes): the task failed because of its limit, which the reason and
    message say rather than "terminated by signal SIGKILL" or "exited with code 137".
    """
    if result is None:
        return (
            common_pb2.TASK_FAILED,
            "the task wrapper died; the exit status is unknown",
            "REASON_EXECUTOR_TERMINATED",
            None,
        )
    if "error" in result:
        return (common_pb2.TASK_ERROR, str(result["error"]), "REASON_CONTAINER_LAUNCH_FAILED", None)
    if killed:
        how = (
            f"signal {_signal_name(result['signal'])}"
            if "signal" in result
            else f"exit code {result.get('exit_code')}"
        )
        return (
            common_pb2.TASK_KILLED,
            f"killed by the agent ({how})",
            "REASON_TASK_KILLED",
            result.get("exit_code"),
        )
    memory_limit_hit = result.get("memory_limit_hit")
    if memory_limit_hit is not None and "error" not in result:
        limit = f"of {memory_limit_hit / (1024 * 1024):g} MB " if memory_limit_hit else ""
        return (
            common_pb2.TASK_FAILED,
            f"memory limit {limit}exceeded: the kernel killed the task (ask for more mem)",
            "REASON_CONTAINER_LIMITATION_MEMORY",
            result.get("exit_code"),
        )
    if "signal" in result:
        return (
            common_pb2.TASK_FAILED,
            f"terminated by signal {_signal_name(result['signal'])}",
            "REASON_COMMAND_EXITED",
            None,
        )
    code = int(result.get("exit_code", -1))
    if code == 0:
        return common_pb2.TASK_FINISHED, "exited with code 0", "REASON_COMMAND_EXITED", 0
    return common_pb2.TASK_FAILED, f"exited with code {code}", "REASON_COMMAND_EXITED", code


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(int(number)).name
    except ValueError:
        return str(number)
