"""Real daemons as real processes for end-to-end tests, and waiting without sleeps."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"listening on (\S+:\d+)")


def eventually(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    interval: float = 0.05,
    message: str = "condition",
):
    """Polls `predicate` until it returns something truthy; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # the daemon may not be up yet
            last_error = e
        time.sleep(interval)
    detail = f": {last_error!r}" if last_error else ""
    raise AssertionError(f"timed out waiting for {message}{detail}")


async def eventually_async(
    predicate, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"
):
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return value
        except Exception as e:
            last_error = e
        await asyncio.sleep(interval)
    detail = f": {last_error!r}" if last_error else ""
    raise AssertionError(f"timed out waiting for {message}{detail}")


def agora(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs the `agora` command as a user would, capturing its output (in `env`, or ours)."""
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def agora_async(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`agora` from an async test: in a thread, so the test's event loop (and the daemons or
    frameworks running on it) keeps going meanwhile."""
    return await asyncio.to_thread(agora, *args, timeout=timeout)


def tls_flags(certs: Path, name: str) -> list[str]:
    """--tls-ca/--tls-cert/--tls-key for `name`'s certificate made by `agora tls` in `certs`."""
    return [
        "--tls-ca",
        str(certs / "ca.pem"),
        "--tls-cert",
        str(certs / f"{name}.pem"),
        "--tls-key",
        str(certs / f"{name}-key.pem"),
    ]


class Daemon:
    """One `agora` daemon subprocess; `address` is what it printed when it began serving."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = args
        self.log_path = log_path
        self.prefix = prefix or []
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.lines: list[str] = []

    def start(self, timeout: float = 30.0) -> Daemon:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(self.env or {}))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "agora.cli.main", *self.args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        ready = threading.Event()

        def pump() -> None:
            assert self.proc and self.proc.stdout
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                self.lines.append(line)
                match = _LISTENING.search(line)
                if match and not self.address:
                    self.address = match.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(timeout) or not self.address:
            self.stop()
            raise AssertionError(f"{' '.join(self.args[:1])} did not start: {self.log_tail()}")
        return self

    @property
    def port(self) -> int:
        assert self.address
        return int(self.address.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signals the daemon itself only (not the tasks it started in their own sessions)."""
        if self.alive():
            assert self.proc
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        if getattr(self, "_log", None):
            self._log.close()

    def stop(self, timeout: float = 15.0, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()
        if getattr(self, "_log", None):
            self._log.close()

    def log_tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-n:])


class Cluster:
    """A master and agents as processes, each with its own dirs under `root`."""

    def __init__(self, root: Path, heartbeat: float = 0.5, agent_timeout: float = 3.0) -> None:
        self.root = root
        self.heartbeat = heartbeat
        self.agent_timeout = agent_timeout
        self.master: Daemon | None = None
        self.agents: list[Daemon] = []

    def start_master(self, port: int = 0) -> Daemon:
        self.master = Daemon(
            [
                "master",
                "--port",
                str(port),
                "--state-dir",
                str(self.root / "master"),
                "--heartbeat-interval",
                str(self.heartbeat),
                "--agent-timeout",
                str(self.agent_timeout),
                "--log-level",
                "debug",
            ],
            self.root / "logs" / "master.log",
        ).start()
        return self.master

    def agent_args(self, index: int, resources: str | None = None) -> list[str]:
        assert self.master and self.master.address
        first = 31000 + index * 1000
        return [
            "agent",
            "--master",
            self.master.address,
            "--port",
            "0",
            "--resources",
            resources or f"cpus:2;mem:2048;disk:4096;ports:[{first}-{first + 999}]",
            "--attributes",
            f"rack:r{index % 2}",
            "--work-dir",
            str(self.root / f"agent-{index}"),
            "--hostname",
            f"host-{index}",
            "--log-level",
            "debug",
        ]

    def start_agent(self, index: int | None = None, resources: str | None = None) -> Daemon:
        index = len(self.agents) if index is None else index
        agent = Daemon(
            self.agent_args(index, resources), self.root / "logs" / f"agent-{index}.log"
        ).start()
        if index < len(self.agents):
            self.agents[index] = agent
        else:
            self.agents.append(agent)
        return agent

    def restart_agent(self, index: int) -> Daemon:
        return self.start_agent(index)

    def stop(self) -> None:
        # SIGUSR1: the agent kills its tasks before exiting (SIGTERM would leave them running
        # for a successor agent, as on a real machine).
        for agent in self.agents:
            agent.stop(sig=signal.SIGUSR1)
        if self.master:
            self.master.stop()

    def logs(self) -> str:
        parts = []
        for d in [self.master, *self.agents]:
            if d:
                parts.append(f"--- {d.log_path.name}\n{d.log_tail()}")
        return "\n".join(parts)


def host_pid(task_pid: int, pid_inside: int) -> int:
    """The pid, here, of the process that is `pid_inside` in the pid namespace of the task
    whose first process is `task_pid` (a task in namespaces of its own writes its `$!` as it
    sees it); `pid_inside` itself for a task in this namespace. NSpid lists a process's pid
    in each namespace it is in, this one first."""
    import psutil

    first = psutil.Process(task_pid)
    for process in [first, *first.children(recursive=True)]:
        with open(f"/proc/{process.pid}/status") as status:
            ids = next(line.split()[1:] for line in status if line.startswith("NSpid:"))
        if int(ids[-1]) == pid_inside:
            return process.pid
    raise AssertionError(f"no process of task {task_pid} is pid {pid_inside} in its namespace")


def command_pid(task_pid: int) -> int:
    """The task's command: `task_pid` itself, or for a task in namespaces of its own, the one
    child of its init (pid 1 there, which stays root and reaps)."""
    import psutil

    if os.readlink(f"/proc/{task_pid}/ns/pid") == os.readlink("/proc/self/ns/pid"):
        return task_pid
    (command,) = psutil.Process(task_pid).children()
    return command.pid
