"""Starting, watching and killing one task's wrapper (agent/python_wrapper.py, task_wrapper.c).

`Launcher` starts wrappers through the spawners chosen when the agent starts, in the order of
agent/spawners.py: the C wrapper spawned by the agent itself (agent/direct_spawn.py), the fork
server (agent/fork_server.py), a one-shot `python -m agora.agent.executor RUN_DIR` last.

Watching works the same for a wrapper this agent started and for one a previous agent left
behind: through a pidfd (Linux >= 5.3), which reports the exit of any process, not only of a
child, or by polling where pidfds are unavailable. The wrapper's start time guards every
decision against pid reuse.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import structlog

from agora.agent import native_wrapper
from agora.agent.checkpoint import read_json
from agora.agent.direct_spawn import CWrapperSpawner, reap, usable
from agora.agent.fork_server import ForkServerSpawner
from agora.agent.launch_spec import LaunchSpec
from agora.agent.proc_stat import is_running
from agora.agent.spawners import OneShotSpawner, Spawner, SpawnerDown, WrapperDied
from agora.agent.task_user import TaskUser
from agora.agent.wrapper_reports import Started
from agora.common import ResourceError, Resources
from agora.v1 import common_pb2

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.25
# For records of older agents, which hold only a wall-clock start: how closely it must match.
START_TIME_SLACK = 0.05


class LaunchError(Exception):
    """The command could not be started; the message says why, for the task's status."""


class RunningWrapper(Protocol):
    """A run's wrapper as the task manager watches it: `Wrapper` here, a fake in the agent's
    harness (tests/agent/agent_harness.py)."""

    @property
    def task_pid(self) -> int:
        """The command's pid, also its process group id."""
        ...

    def alive(self) -> bool:
        """True while the wrapper runs."""
        ...

    def signal_group(self, signum: int) -> bool:
        """Signals the task's whole process group; False if it no longer exists."""
        ...

    async def wait(self) -> None:
        """Returns once the wrapper has ended (its exit.json then says how the task did)."""
        ...


class TaskLauncher(Protocol):
    """What the task manager asks of its launcher, as Mesos' Launcher: `launch` forks,
    `recover` finds a wrapper a previous agent started, and the wrapper's `signal_group` and
    `wait` destroy and watch. `Launcher` here; a fake in the agent's harness."""

    @property
    def spawns_directly(self) -> bool:
        """Whether task wrappers are this process's own children."""
        ...

    async def start(self) -> None: ...

    async def launch(self, run_dir: Path, spec: LaunchSpec) -> RunningWrapper:
        """Returns once the command runs; LaunchError (or OSError) when it could not start."""
        ...

    def recover(self, run_dir: Path) -> RunningWrapper | None:
        """The run's wrapper, if it started one (wrapper.json); None if it never did."""
        ...

    async def stop(self) -> None: ...


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


class Launcher:
    """The agent's one way to start task wrappers (a TaskLauncher), in the line of Mesos'
    Launcher: `launch` forks (through the spawners below), `recover` finds a wrapper again,
    `Wrapper.signal_group` destroys and `Wrapper.wait` is the status.

    Its spawners are chosen once, at the first start, from what the host offers (the C
    wrapper built, pidfds), in the order of preference of agent/spawners.py; `spawners` fixes
    them instead (tests, or an agent made without the fork server: only the one-shot route).
    """

    def __init__(
        self, log_path: Path | None = None, spawners: Sequence[Spawner] | None = None
    ) -> None:
        self._log_path = log_path
        # The C wrapper (agent/native_wrapper.py): found or built at the first start; None:
        # Python wrappers only.
        self.native: str | None = None
        self._native_checked = False
        self._spawners: tuple[Spawner, ...] | None = None
        if spawners is not None:
            self._spawners, self._native_checked = tuple(spawners), True
        self._starting = asyncio.Lock()

    @property
    def spawners(self) -> tuple[Spawner, ...]:
        """The routes in their order of preference (empty until the first start)."""
        return self._spawners or ()

    def spawner(self, kind: type[S]) -> S | None:
        """The spawner of this kind, if this host has that route."""
        return next((s for s in self.spawners if isinstance(s, kind)), None)

    @property
    def spawns_directly(self) -> bool:
        """Whether the agent spawns C wrappers itself (they are its children)."""
        c_wrappers = self.spawner(CWrapperSpawner)
        return c_wrappers is not None and c_wrappers.broken is None

    @property
    def pid(self) -> int | None:
        """The fork server's pid, while one runs."""
        fork_server = self.spawner(ForkServerSpawner)
        return fork_server.pid if fork_server is not None else None

    async def start(self) -> None:
        """Chooses the spawners (the first time) and starts them (the fork server unless one
        is running)."""
        async with self._starting:
            if self._spawners is None:
                if not self._native_checked:
                    where = self._log_path.parent / "bin" if self._log_path else None
                    self.native = await asyncio.to_thread(native_wrapper.wrapper_path, where)
                    self._native_checked = True
                self._spawners = await choose_spawners(self.native, self._log_path)
        for spawner in self.spawners:
            await spawner.start()

    async def launch(self, run_dir: Path, spec: LaunchSpec) -> Wrapper:
        """Starts the run's wrapper and returns once the command runs, through the first
        spawner that takes `spec`. Raises LaunchError when the command could not be started."""
        if self._spawners is None:
            await self.start()
        went_down: Spawner | None = None
        for spawner in self.spawners:
            if went_down is not None:
                log.warning(
                    "a task spawner is failing: starting the run through the next one",
                    failing=went_down.name,
                    next=spawner.name,
                )
            went_down = None
            for _ in range(spawner.tries):
                try:
                    report = await spawner.spawn(run_dir, spec)
                except SpawnerDown:
                    # No process can report on this run any more: its files say what happened.
                    wrapper = Wrapper.load(run_dir)
                    if wrapper is not None:
                        return wrapper
                    result = read_exit(run_dir)
                    if result is not None:
                        message = str(result.get("error", "the task wrapper failed"))
                        raise LaunchError(message) from None
                    went_down = spawner
                    continue
                except WrapperDied as e:
                    # Not retried: the command may have started before the wrapper died.
                    wrapper = Wrapper.load(run_dir)
                    if wrapper is not None:
                        return wrapper  # it ran: watching it reports how it ended
                    result = read_exit(run_dir) or {}
                    raise LaunchError(str(result.get("error", e))) from None
                if report is None:
                    break  # this route cannot take the spec: the next one does
                if isinstance(report, Started):
                    return Wrapper.reported(report)
                raise LaunchError(report.message)
        raise LaunchError("no task spawner could start the task wrapper")

    def recover(self, run_dir: Path) -> Wrapper | None:
        """The wrapper of a run a previous agent (or this one) started, from wrapper.json."""
        return Wrapper.load(run_dir)

    async def stop(self) -> None:
        """Lets go of every spawner (the fork server ends); wrappers keep running. Later
        launches go to the one-shot route."""
        for spawner in reversed(self.spawners):
            await spawner.stop()


S = TypeVar("S")


async def choose_spawners(c_wrapper: str | None, log_path: Path | None) -> tuple[Spawner, ...]:
    """The routes to a task wrapper this host offers, in the order of agent/spawners.py."""
    chosen: list[Spawner] = []
    if c_wrapper is not None and usable():
        c_wrappers = CWrapperSpawner(c_wrapper, log_path)
        try:
            await c_wrappers.start()
            chosen.append(c_wrappers)
        except OSError as e:
            log.warning("cannot spawn C wrappers from the agent; the launcher does", error=str(e))
    chosen.append(ForkServerSpawner(c_wrapper, log_path))
    chosen.append(OneShotSpawner())
    return tuple(chosen)


async def start_wrapper(
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    sandbox: Path,
    cgroups: list[str] | None = None,
    launcher: Launcher | None = None,
    user: TaskUser | None = None,
) -> Wrapper:
    """Starts the task's wrapper through `launcher` (None: a one-shot wrapper) and returns once
    the command runs. Raises LaunchError when the command could not be started."""
    spec = LaunchSpec.in_sandbox(
        argv,
        env,
        sandbox,
        cgroups or (),
        None if user is None else user.wrapper_user(),
    )
    if launcher is None:
        launcher = Launcher(spawners=[OneShotSpawner()])
    return await launcher.launch(run_dir, spec)


def end_usage(result: dict | None) -> common_pb2.TaskEndUsage | None:
    """What the task used, as its wrapper recorded it in exit.json (None: not recorded)."""
    if not result or "cpu_user" not in result:
        return None
    try:
        return common_pb2.TaskEndUsage(
            cpu_user_seconds=float(result["cpu_user"]),
            cpu_system_seconds=float(result.get("cpu_system", 0.0)),
            mem_peak_bytes=int(result.get("max_rss_kb", 0)) * 1024,
        )
    except (TypeError, ValueError):
        return None


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
