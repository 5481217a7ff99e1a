"""throughput: one phase's cluster of real processes, and a framework that runs tasks on demand.

A phase runs on a fresh cluster: a master, real agents (each its own `agora agent` process,
running real processes) and, for the batch path, the `agora batch` daemon. `OnDemand` is a
small SDK framework at rest that launches what it is given when it is given it (revive, launch
on the offers that come, decline the rest, suppress): it warms every agent up before a phase
measures, and times the SDK's single-task submit -> start.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from agora.common.rpc import open_channel
from agora.experiments.cpu_account import Component
from agora.experiments.cpu_burner import shares
from agora.experiments.processes import (
    Daemon,
    MasterOptions,
    agora_argv,
    launcher_pids,
    start_master,
    start_real_agent,
)
from agora.frameworks.sdk import (
    Driver,
    Framework,
    GrpcSchedulerTransport,
    SchedulerError,
    TaskSpec,
    fit,
    framework_info,
    is_terminal,
    new_task_id,
)
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc

READY_TIMEOUT = 60.0
IMAGE = "agora-lab-busybox:1"  # what --isolation image runs the batch path's tasks from
# The agents' flags for each --isolation ("" and "image": as an operator starts them).
AGENT_FLAGS = {"none": ["--no-task-namespaces"], "namespaces": ["--task-namespaces"]}


def _import_image(work: Path, agents: int) -> None:
    """The lab's busybox image, built offline, imported into each agent's work dir."""
    from agora.agent.images import ImageStore
    from agora.experiments.busybox_image import build_image

    layout, _ = build_image(work / "image")
    for i in range(agents):
        ImageStore(work / f"agent-{i}" / "images").import_layout(layout, IMAGE)


@dataclass
class Cluster:
    master: Daemon
    agents: list[Daemon]
    batch: Daemon | None = None
    # With --batch-zk: the batch set's standby and the ZooKeeper they share.
    standby: Daemon | None = None
    zookeeper: object | None = None
    # What each agent says its tasks get (AgentInfo.isolation: namespaces, pids, cgroups...).
    isolation: list[list[str]] = field(default_factory=list)
    # --background-load's processes (experiments/cpu_burner.py), while the cluster runs.
    burners: list[subprocess.Popen] = field(default_factory=list)

    def components(self) -> list[Component]:
        """The cluster's daemons as CPU components: the master; each agent's own process and,
        apart, what it reaped in the window (each task's wrapper and, through it, the task:
        the agent spawns the C wrapper itself and waits for it); any task launchers."""
        found = [Component("master", "master", self.master.pid, "the master process")]
        for i, agent in enumerate(self.agents):
            found.append(Component(f"agent-{i}", "agents", agent.pid, f"agent {i}'s own process"))
            found.append(
                Component(
                    f"agent-{i} tasks",
                    "tasks",
                    agent.pid,
                    f"the task wrappers agent {i} spawned and reaped in the window, with the "
                    "tasks they ran (their CPU as reaped)",
                    reaped_children=True,
                )
            )
            for k, pid in enumerate(launcher_pids(agent.pid)):
                found.append(
                    Component(
                        f"launcher-{i}" + (f".{k}" if k else ""),
                        "launchers",
                        pid,
                        f"agent {i}'s task launcher (`python -m agora.agent.executor --serve`)",
                    )
                )
        for k, burner in enumerate(self.burners):
            found.append(
                Component(
                    f"background load-{k}",
                    "load",
                    burner.pid,
                    "a process keeping a share of a core busy (--background-load)",
                )
            )
        return found

    async def stop(self) -> None:
        for burner in self.burners:
            burner.kill()
            burner.wait()
        for daemon in [self.batch, self.standby, *self.agents, self.master]:
            if daemon is not None:
                await daemon.stop()
        if self.zookeeper is not None:
            await asyncio.to_thread(self.zookeeper.stop)  # type: ignore[attr-defined]


async def _wait_for(what: str, check, timeout: float = READY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        await asyncio.sleep(0.05)


async def _operator(master: str, method: str, request):
    async with open_channel(master) as channel:
        try:
            return await getattr(operator_pb2_grpc.OperatorStub(channel), method)(
                request, timeout=2.0
            )
        except grpc.aio.AioRpcError:
            return None


async def wait_for_agents(master: str, count: int) -> list[list[str]]:
    """Until `count` agents are active; what each says its tasks get (AgentInfo.isolation)."""
    active: list[list[str]] = []

    async def registered() -> bool:
        reply = await _operator(master, "ListAgents", operator_pb2.ListAgentsRequest())
        if reply is None:
            return False
        active[:] = [list(a.info.isolation) for a in reply.agents if a.state == "ACTIVE"]
        return len(active) >= count

    await _wait_for(f"{count} agents did not register", registered)
    return active


async def wait_for_framework(master: str, name: str) -> None:
    """Until a connected framework called `name` has published its API to the master (what
    `agora job` looks for)."""

    async def published() -> bool:
        reply = await _operator(master, "ListFrameworks", operator_pb2.ListFrameworksRequest())
        return reply is not None and any(
            f.connected and f.info.name == name and f.info.service_address for f in reply.frameworks
        )

    await _wait_for(f"the {name} framework did not publish its API", published)


@contextlib.asynccontextmanager
async def cluster(
    work: Path,
    logs: Path,
    agents: int,
    resources: str,
    batch: bool,
    batch_zk: bool = False,
    isolation: str = "",
    background_load: float = 0.0,
) -> AsyncIterator[Cluster]:
    """A fresh master and `agents` real agents (and the batch daemon), stopped on the way out.
    `batch_zk`: the batch daemon is the leader of a pair on a ZooKeeper of its own (`agora batch
    --zk`), its state in ZooKeeper. `isolation`: "" leaves the agents to their default
    (namespaces where the host allows them), "none" and "namespaces" say so (AGENT_FLAGS),
    "image" imports the lab's busybox image (IMAGE) into each agent. `background_load`: cores
    kept busy by processes of their own (experiments/cpu_burner.py) once the cluster is up."""
    logs.mkdir(parents=True, exist_ok=True)
    master = await start_master(MasterOptions(), logs)
    started = Cluster(master, [])
    try:
        started.agents = list(
            await asyncio.gather(
                *(
                    start_real_agent(
                        master.address,
                        logs,
                        work / f"agent-{i}",
                        resources,
                        f"agent-{i}",
                        extra=AGENT_FLAGS.get(isolation),
                    )
                    for i in range(agents)
                )
            )
        )
        started.isolation = await wait_for_agents(master.address, agents)
        if isolation == "image":
            await asyncio.to_thread(_import_image, work, agents)
        if batch and batch_zk:
            from agora.common.zookeeper_server import ZooKeeperServer

            zk = ZooKeeperServer(work / "zookeeper")
            started.zookeeper = await asyncio.to_thread(zk.start)
            url = f"zk://{zk.address}/agora-batch"
            members = []
            for i in range(2):  # the first leads: it is first in line
                argv = agora_argv(
                    "batch", "--master", master.address, "--port", "0", "--zk", url,
                    "--state-dir", str(work / f"batch-{i}"), "--log-level", "warning",
                )  # fmt: skip
                members.append(await Daemon(f"batch-{i}", argv, logs).start())
                if i == 0:
                    await wait_for_framework(master.address, "batch")
            started.batch, started.standby = members
        elif batch:
            argv = agora_argv(
                "batch", "--master", master.address, "--port", "0",
                "--state-dir", str(work / "batch"), "--log-level", "warning",
            )  # fmt: skip
            started.batch = await Daemon("batch", argv, logs).start()
            await wait_for_framework(master.address, "batch")
        for share in shares(background_load) if background_load else []:
            argv = [sys.executable, "-m", "agora.experiments.cpu_burner", repr(share)]
            started.burners.append(subprocess.Popen(argv))
        yield started
    finally:
        await started.stop()


@dataclass
class TaskTimes:
    submitted: float  # time.monotonic() of each step, as this process saw it
    launched: float | None = None
    running: float | None = None
    ended: float | None = None
    state: int = 0


@dataclass
class OnDemand(Framework):
    """A framework at rest that runs what `submit()` gives it: it revives, fits the tasks into
    the offers that come (one an agent per round, taking turns), launches them, declines the
    rest and suppresses again, as the README's framework does once its list is empty."""

    cpus: float
    mem: float
    command: str = "true"
    pending: list[TaskSpec] = field(default_factory=list)
    times: dict[str, TaskTimes] = field(default_factory=dict)
    driver: Driver | None = None
    _all_ended: asyncio.Event = field(default_factory=asyncio.Event)
    _subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    _deciding: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def on_subscribed(self, driver, framework_id):
        self._subscribed.set()

    async def on_offers(self, driver, offers):
        async with self._deciding:
            if not self.pending:
                await driver.decline(offers)
                await driver.suppress()
                return
            result = fit(offers, self.pending, max_per_agent=1, spread=True)
            self.pending = result.unplaced
            for placement in result.placements:
                now = time.monotonic()
                for task in placement.tasks:
                    self.times[task.task_id].launched = now
                try:
                    await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
                except SchedulerError:
                    self.pending.extend(placement.specs)  # rescinded meanwhile: the next offer
            await driver.decline(result.unused)
            if not self.pending:
                await driver.suppress()

    async def on_update(self, driver, status):
        times = self.times.get(status.task_id)
        if times is None:
            return
        now = time.monotonic()
        if status.state == common_pb2.TASK_RUNNING and times.running is None:
            times.running = now
        elif is_terminal(status.state) and times.ended is None:
            times.ended, times.state = now, status.state
            if all(t.ended is not None for t in self.times.values()):
                self._all_ended.set()

    async def run_tasks(self, count: int, timeout: float = 60.0) -> list[TaskTimes]:
        """Submits `count` tasks at once and returns their times once all have ended."""
        assert self.driver is not None
        now = time.monotonic()
        specs = [
            TaskSpec("on-demand", cpus=self.cpus, mem=self.mem, command=self.command,
                     task_id=new_task_id("on-demand"))
            for _ in range(count)
        ]  # fmt: skip
        self.times = {spec.task_id: TaskTimes(now) for spec in specs}
        self._all_ended.clear()
        async with self._deciding:  # not between an on_offers' "nothing to do" and its suppress
            self.pending.extend(specs)
            await self.driver.revive()
        await asyncio.wait_for(self._all_ended.wait(), timeout)
        return list(self.times.values())


@contextlib.asynccontextmanager
async def on_demand(master: str, cpus: float, mem: float) -> AsyncIterator[OnDemand]:
    """An OnDemand framework subscribed to `master` (in this process), torn down after."""
    framework = OnDemand(cpus, mem)
    info = framework_info(f"on-demand-{os.getpid()}", failover_timeout=5.0)
    driver = Driver(framework, GrpcSchedulerTransport(master), info)
    framework.driver = driver
    running = asyncio.create_task(driver.run(), name="on-demand")
    try:
        await asyncio.wait_for(framework._subscribed.wait(), READY_TIMEOUT)
        yield framework
    finally:
        if driver.connected:
            with contextlib.suppress(SchedulerError, TimeoutError):
                await asyncio.wait_for(driver.teardown(), 10)
        driver.stop()
        await asyncio.gather(running, return_exceptions=True)
