"""Starting, watching and killing one task's wrapper process (see agent.executor).

Watching works the same for a wrapper this agent started and for one a previous agent left
behind: through a pidfd (Linux >= 5.3), which reports the exit of any process, not only of a
child, or by polling where pidfds are unavailable. The wrapper's start time guards every
decision against pid reuse.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import structlog
from agora.v1 import common_pb2

from agent.atomic_files import atomic_write_json
from agent.checkpoint import read_json
from common import ResourceError, Resources

log = structlog.get_logger(__name__)

POLL_SECONDS = 0.25
# How closely a recorded start time must match psutil's (both derive from boot time + ticks).
START_TIME_SLACK = 0.05


class LaunchError(Exception):
    """The command could not be started; the message says why, for the task's status."""


@dataclass(frozen=True)
class Wrapper:
    """A running task wrapper: enough to re-find it after an agent restart."""

    wrapper_pid: int
    wrapper_start: float
    task_pid: int  # also the task's process group id

    @classmethod
    def load(cls, run_dir: Path) -> Wrapper | None:
        data = read_json(run_dir / "wrapper.json")
        if data is None:
            return None
        try:
            return cls(
                int(data["wrapper_pid"]), float(data["wrapper_start"]), int(data["task_pid"])
            )
        except (KeyError, TypeError, ValueError):
            return None

    def alive(self) -> bool:
        """True while the very process we started runs (not a zombie, not a reused pid)."""
        try:
            proc = psutil.Process(self.wrapper_pid)
            if abs(proc.create_time() - self.wrapper_start) > START_TIME_SLACK:
                return False
            return proc.status() != psutil.STATUS_ZOMBIE
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False

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
        """Returns once the wrapper has exited."""
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
    return read_json(run_dir / "exit.json")


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
    try:
        ranges = Resources.from_proto(task.resources).port_ranges()
    except ResourceError:
        return []
    return [port for begin, end in ranges for port in range(begin, end + 1)]


def task_environment(
    base: dict[str, str], task: common_pb2.TaskInfo, framework_id: str, agent_id: str, sandbox: Path
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
    ports = task_ports(task)
    for i, port in enumerate(ports):
        env[f"PORT{i}"] = str(port)
    if ports:
        env["PORT"] = str(ports[0])
        env["PORTS"] = ",".join(str(p) for p in ports)
    env.update(task.command.environment)
    return env


async def start_wrapper(
    run_dir: Path,
    argv: list[str],
    env: dict[str, str],
    sandbox: Path,
    cgroups: list[str] | None = None,
) -> Wrapper:
    """Starts `python -m agent.executor RUN_DIR` and returns once the command runs.

    Raises LaunchError when the command could not be started.
    """
    atomic_write_json(
        run_dir / "spec.json",
        {
            "argv": argv,
            "env": env,
            "cwd": str(sandbox),
            "stdout": str(sandbox / "stdout"),
            "stderr": str(sandbox / "stderr"),
            "cgroups": cgroups or [],
        },
    )
    # The agent's package must be importable by the wrapper wherever the agent runs from.
    package_root = str(Path(__file__).resolve().parents[1])
    wrapper_env = dict(os.environ)
    wrapper_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, wrapper_env.get("PYTHONPATH", "")) if p
    )
    with open(run_dir / "executor.log", "ab") as executor_log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agent.executor",
            str(run_dir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=executor_log,
            start_new_session=True,
            env=wrapper_env,
        )
        # EOF comes once the wrapper has started the command (or failed to) and let go of
        # the pipe; the intermediate process exits at once.
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            await _let_go(proc)
            raise
    line = out.decode(errors="replace").strip()
    if line.startswith("started "):
        wrapper = Wrapper.load(run_dir)
        if wrapper is None:
            raise LaunchError("the task wrapper started the command but wrote no pid file")
        return wrapper
    if line.startswith("error "):
        raise LaunchError(line[len("error ") :])
    detail = (run_dir / "executor.log").read_text(errors="replace").strip().splitlines()
    raise LaunchError(
        "the task wrapper failed to start"
        + (f": {detail[-1]}" if detail else f" (exit code {proc.returncode})")
    )


async def _let_go(proc: asyncio.subprocess.Process) -> None:
    """The agent is stopping mid-launch: closes our end of the wrapper's stdout now.

    Left open, the pipe outlives the event loop and warns (ResourceWarning) when collected.
    The wrapper carries on (a write to the closed pipe fails quietly) and the next agent
    re-attaches to it through wrapper.json. The intermediate process exits at once, so
    waiting for it is short; reaped, it lets asyncio close the process transport too.
    """
    # asyncio.subprocess.Process offers no public way to close one pipe.
    stdout = proc._transport.get_pipe_transport(1)  # noqa: SLF001
    if stdout is not None:
        stdout.close()
    await proc.wait()


def exit_outcome(result: dict | None, killed: bool) -> tuple[int, str, str, int | None]:
    """(state, message, reason, exit_code) for what the wrapper recorded in exit.json."""
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
