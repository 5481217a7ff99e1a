"""The agent's harness: a TaskManager with a fake launcher and a paused clock.

No process is started: `FakeLauncher` stands where agent/launcher.py's `Launcher` does (the
`TaskLauncher` seam) and hands out `FakeWrapper`s, which end when a test says so or when a
kill's signal reaches them, writing exit.json as a real wrapper does. The clock moves only
when the test advances it, so a kill's grace period or a sandbox's GC delay passes without
sleeping (Mesos pauses its clock in its tests, and the master's harness does the same). The
work dir is a real one under tmp_path: recovery after a restart reads what the last task
manager wrote. The end-to-end tests (test_agent_tasks.py, test_agent_launcher.py...) keep
proving the real path.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
import signal
from dataclasses import dataclass, field
from pathlib import Path

from agora.agent.checkpoint import WorkDir
from agora.agent.isolation import Isolator
from agora.agent.launch_spec import LaunchSpec
from agora.agent.launcher import LaunchError
from agora.agent.task_manager import TaskManager
from agora.common.task_states import is_terminal
from agora.v1 import common_pb2


async def settle() -> None:
    """Lets every task that can run now run until it waits again."""
    for _ in range(20):
        await asyncio.sleep(0)


class PausedClock:
    """An AgentClock that moves only in `advance`; sleepers wake in due order."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def time(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + max(0.0, seconds), next(self._order), wake))
        await wake

    def sleeping(self) -> int:
        """Sleeps not yet due (and not cancelled)."""
        return sum(1 for _, _, wake in self._sleepers if not wake.done())

    async def advance(self, seconds: float) -> None:
        """Moves the clock on, waking each sleeper at its own time and letting it act."""
        await settle()
        until = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= until:
            due, _, wake = heapq.heappop(self._sleepers)
            if wake.done():
                continue  # cancelled: the task it slept in ended
            self._now = max(self._now, due)
            wake.set_result(None)
            await settle()
        self._now = until
        await settle()


@dataclass
class FakeWrapper:
    """A run's wrapper without a process: it records the signals sent to its task's group."""

    run_dir: Path
    spec: LaunchSpec
    task_pid: int
    ignores_sigterm: bool = False
    signals: list[int] = field(default_factory=list)
    _ended: asyncio.Event = field(default_factory=asyncio.Event)

    def alive(self) -> bool:
        return not self._ended.is_set()

    def signal_group(self, signum: int) -> bool:
        if not self.alive():
            return False
        self.signals.append(signum)
        if signum == signal.SIGKILL or (signum == signal.SIGTERM and not self.ignores_sigterm):
            self.exit(signal=signum)
        return True

    async def wait(self) -> None:
        await self._ended.wait()

    def exit(self, code: int | None = None, signal: int | None = None) -> None:
        """The command ends: exit.json as the real wrappers write it."""
        result = {"signal": signal} if signal is not None else {"exit_code": code or 0}
        (self.run_dir / "exit.json").write_text(json.dumps(result))
        self._ended.set()


class FakeHost:
    """The machine the fake wrappers run on; it outlives a task manager, as processes do."""

    def __init__(self) -> None:
        self.wrappers: dict[str, FakeWrapper] = {}  # run id -> its wrapper
        self.refuse: dict[str, str] = {}  # argv[0] -> the launch error it gets
        self.ignoring_sigterm: set[str] = set()  # argv[0]s whose tasks ignore SIGTERM
        # Launches wait here while it is clear: a wrapper still starting.
        self.launches_go = asyncio.Event()
        self.launches_go.set()
        self._pids = itertools.count(10_000)

    def wrapper_of(self, run_dir: Path) -> FakeWrapper:
        return self.wrappers[run_dir.name]


class FakeLauncher:
    """A TaskLauncher that starts FakeWrappers on a FakeHost."""

    spawns_directly = False

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.launched: list[LaunchSpec] = []

    async def start(self) -> None:
        pass

    async def launch(self, run_dir: Path, spec: LaunchSpec) -> FakeWrapper:
        self.launched.append(spec)
        await self.host.launches_go.wait()
        command = spec.argv[0]
        if command in self.host.refuse:
            (run_dir / "exit.json").write_text(json.dumps({"error": self.host.refuse[command]}))
            raise LaunchError(self.host.refuse[command])
        wrapper = FakeWrapper(
            run_dir, spec, next(self.host._pids), command in self.host.ignoring_sigterm
        )
        self.host.wrappers[run_dir.name] = wrapper
        return wrapper

    def recover(self, run_dir: Path) -> FakeWrapper | None:
        return self.host.wrappers.get(run_dir.name)

    async def stop(self) -> None:
        pass


def task(task_id: str, *argv: str, grace: float = 0.0) -> common_pb2.TaskInfo:
    """A task running `argv` (default `sleep 1000`), 0.1 cpus and 32 MB."""
    resources = [
        common_pb2.Resource(name="cpus", type=common_pb2.Resource.SCALAR, scalar=0.1),
        common_pb2.Resource(name="mem", type=common_pb2.Resource.SCALAR, scalar=32),
    ]
    info = common_pb2.TaskInfo(
        task_id=task_id,
        name=task_id,
        command=common_pb2.CommandInfo(argv=list(argv or ("sleep", "1000"))),
        resources=resources,
    )
    if grace:
        info.kill_grace_period_seconds = grace
    return info


class AgentHarness:
    """One agent's task manager on a fake host and a paused clock, recording its updates."""

    framework_id = "fw-1"

    def __init__(self, root: Path) -> None:
        self.work = WorkDir(root / "work")
        self.clock = PausedClock()
        self.host = FakeHost()
        self.updates: list[common_pb2.TaskStatus] = []
        self.unacked: list[common_pb2.TaskStatus] = []
        self.launcher = FakeLauncher(self.host)
        self.manager = self._new_manager()
        self.manager.recover(self._pending)

    def _new_manager(self) -> TaskManager:
        return TaskManager(
            self.work,
            self._emit,
            lambda: "agent-1",
            base_env={},
            isolator=Isolator(enabled=False),
            task_launcher=self.launcher,
            clock=self.clock,
        )

    def _emit(self, framework_id: str, status: common_pb2.TaskStatus) -> None:
        self.updates.append(status)
        self.unacked.append(status)

    def _pending(self, framework_id: str, task_id: str) -> list[common_pb2.TaskStatus]:
        return [s for s in self.unacked if s.task_id == task_id]

    async def run(self, info: common_pb2.TaskInfo) -> FakeWrapper:
        """Launches the task and returns its wrapper once it runs."""
        self.manager.run_task(self.framework_id, info)
        await settle()
        run = self.manager.find(self.framework_id, info.task_id)
        assert run is not None and run.wrapper is not None, self.states(info.task_id)
        assert isinstance(run.wrapper, FakeWrapper)
        return run.wrapper

    def states(self, task_id: str) -> list[str]:
        """The task's updates so far, by state name."""
        return [
            common_pb2.TaskState.Name(s.state).removeprefix("TASK_")
            for s in self.updates
            if s.task_id == task_id
        ]

    def last(self, task_id: str) -> common_pb2.TaskStatus:
        return [s for s in self.updates if s.task_id == task_id][-1]

    def acknowledge_all(self) -> None:
        """The master acknowledges every update: terminal runs complete."""
        for status in self.unacked:
            if is_terminal(status.state):
                self.manager.complete(status.framework_id, status.task_id)
        self.unacked.clear()

    async def restart(self) -> None:
        """The agent stops (its tasks run on) and a new one recovers from the work dir."""
        await self.manager.stop()
        self.launcher = FakeLauncher(self.host)
        self.manager = self._new_manager()
        self.manager.recover(self._pending)
        await settle()

    async def stop(self) -> None:
        await self.manager.stop()
