"""agora experiment failover: kill the leading master with SIGKILL (or pause it past its
ZooKeeper session with `--fault pause`), over and over, while tasks run and a framework
launches, and measure how long until everything is back.

A real ZooKeeper (Debian's package), three `agora master --zk` processes, real agents running
real processes, and a framework on the SDK in this process that keeps launching short tasks.
Per kill (times from the SIGKILL):

- elected: ZooKeeper names another master (the election watch, in this process);
- agents back: every agent registered with the new leader (Operator.ListAgents, polled);
- framework back: the framework subscribed again, with the same id;
- first offer: the first offer after the kill;
- back: the later of agents back and framework back (the target: p50 <= 2 s, p99 <= 4 s).

The killed master is started again at once, as a supervisor would, and stands by. Each task
leaves a marker file named after its id and its process id, so a task that ran twice shows as
two markers; a task is lost if it ends LOST/GONE/UNREACHABLE or is never heard of again.
Tasks whose launch was in flight at a kill (the master died before forwarding it) come back
from explicit reconciliation as TASK_UNKNOWN and are launched again: counted, not lost.

`--fault pause` stops the leader with SIGSTOP instead, until another master is elected, then
resumes it half a second later (issue 38's zombie leader): it must step down without acting.
Times are then from the SIGSTOP, and 'resumed to refusing' is how long the resumed master took
to answer NOT_LEADER (refused by its fence at once, or by the standby it re-executes itself
into); the run also counts what the framework was answered or sent by a master after ZooKeeper
had elected its successor.

`--masters 1` kills and restarts a single master (SQLite registry) instead: how soon agents and
frameworks are back once it listens again. Logs and work dirs go to a temporary directory,
removed after a run that worked unless AGORA_KEEP_SCRATCH is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from agora.common.election import find_leader, zk_client
from agora.common.rpc import open_channel
from agora.experiments import failover_checks, failover_report
from agora.experiments.failover_checks import TERMINAL, FailoverRun, FaultTimes
from agora.experiments.processes import (
    Daemon,
    agora_argv,
    free_ports,
    scratch_dir,
    start_real_agent,
)
from agora.experiments.results import Progress, Results
from agora.frameworks.sdk import Framework, SchedulerError, TaskSpec, fit, new_task_id, run_async
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc


@dataclass
class FailoverConfig:
    kills: int = 10
    masters: int = 3
    agents: int = 3
    session_timeout: float = 1.5
    task_seconds: float = 1.0
    tasks_per_agent: int = 4
    settle_seconds: float = 1.0  # between "back" and the next kill
    fault: str = "kill"  # or "pause": SIGSTOP across an election, then SIGCONT


class Launcher(Framework):
    """Keeps up to `limit` short tasks running; records every event with its wall time."""

    def __init__(self, marker_dir: Path, task_seconds: float, limit: int) -> None:
        self.marker_dir = marker_dir
        self.task_seconds = task_seconds
        self.limit = limit
        self.launching = True
        self.driver: Any = None  # the SDK driver, once subscribed
        self.subscribed_at: list[tuple[float, str]] = []
        self.offer_times: list[float] = []
        self.states: dict[str, int] = {}  # task id -> last state
        self.agent_of: dict[str, str] = {}
        self.relaunched = 0
        # --fault pause: the paused leader's id, when its successor was elected, and how many
        # offers, launch answers and updates came from it after that (must stay 0).
        self.deposed_master = ""
        self.successor_elected_at = float("inf")
        self.from_deposed = 0

    def _heard(self, driver) -> None:
        """Counts one event or answer if it came from a leader already succeeded."""
        if (
            self.deposed_master
            and driver.master_id == self.deposed_master
            and time.time() > self.successor_elected_at
        ):
            self.from_deposed += 1

    def active(self) -> int:
        return sum(1 for s in self.states.values() if s not in TERMINAL)

    async def on_subscribed(self, driver, framework_id):
        self.driver = driver
        self.subscribed_at.append((time.time(), framework_id))

    async def on_offers(self, driver, offers):
        self._heard(driver)
        self.offer_times.append(time.time())
        room = self.limit - self.active() if self.launching else 0
        specs = []
        for _ in range(max(0, room)):
            task_id = new_task_id("fo")
            marker = self.marker_dir / task_id
            specs.append(
                TaskSpec(
                    task_id,
                    cpus=0.1,
                    mem=16,
                    task_id=task_id,
                    command=f'touch "{marker}.$$"; sleep {self.task_seconds}',
                )
            )
        result = fit(offers, specs)
        used = set()
        for placement in result.placements:
            for task in placement.tasks:
                self.states[task.task_id] = common_pb2.TASK_STAGING
                self.agent_of[task.task_id] = placement.agent_id
            used.update(o.offer_id for o in placement.offers)
            try:
                await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
                self._heard(driver)
            except SchedulerError:
                pass  # the master died under the call: reconciliation says what became of it
        unused = [o.offer_id for o in offers if o.offer_id not in used]
        if unused:
            with contextlib.suppress(SchedulerError):
                await driver.decline(unused, refuse_seconds=0.2)

    async def on_update(self, driver, status):
        self._heard(driver)
        if status.state == common_pb2.TASK_UNKNOWN:
            # Reconciliation: the master never heard of it (its launch died with a master).
            if self.states.get(status.task_id) == common_pb2.TASK_STAGING:
                self.states[status.task_id] = common_pb2.TASK_DROPPED
                self.relaunched += 1
            return
        if self.states.get(status.task_id) in TERMINAL and status.state not in TERMINAL:
            return
        self.states[status.task_id] = status.state

    async def reconcile_staging(self) -> None:
        """Asks about every task launched but not heard of since."""
        if self.driver is None:
            return
        refs = [
            (t, self.agent_of.get(t, ""))
            for t, s in self.states.items()
            if s == common_pb2.TASK_STAGING
        ]
        if refs:
            with contextlib.suppress(SchedulerError):
                await self.driver.reconcile(refs)


async def _list_agents(address: str) -> list[operator_pb2.AgentSummary] | None:
    async with open_channel(address) as channel:
        try:
            reply = await operator_pb2_grpc.OperatorStub(channel).ListAgents(
                operator_pb2.ListAgentsRequest(), timeout=1.0
            )
        except grpc.aio.AioRpcError:
            return None
    return list(reply.agents)


class Masters:
    """The masters (on a real ZooKeeper when there are several), each restarted on its own
    port and arguments as a supervisor would; `leader` asks ZooKeeper who leads."""

    def __init__(self, cfg: FailoverConfig, scratch: Path) -> None:
        self.cfg = cfg
        self.scratch = scratch
        self.logs = scratch / "logs"
        self.single = cfg.masters == 1
        self.ports = free_ports(cfg.masters)
        self.addresses = [f"127.0.0.1:{p}" for p in self.ports]
        self.url = self.addresses[0]  # what agents and frameworks dial
        self.where: list[str] = []  # the registry flags every master gets
        self.daemons: list[Daemon] = []
        self.zk: Any = None
        self.watcher: Any = None  # this process's ZooKeeper client, watching the election
        self.path = ""

    def _daemon(self, i: int) -> Daemon:
        return Daemon(
            f"master-{i}",
            agora_argv(
                "master",
                *self.where,
                "--port",
                str(self.ports[i]),
                "--heartbeat-interval",
                "1",
                "--agent-timeout",
                "30",
                "--log-level",
                "info",
            ),
            self.logs,
        )

    async def start(self) -> None:
        if self.single:
            # One master with its registry in SQLite, restarted at once after each kill: how
            # soon agents and frameworks are back once it listens again.
            self.where = ["--state-dir", str(self.scratch / "master-state")]
        else:
            from agora.common.zookeeper_server import ZooKeeperServer

            self.zk = await asyncio.to_thread(ZooKeeperServer(self.scratch / "zookeeper").start)
            self.url = f"zk://{self.zk.address}/agora-failover-{int(time.time())}"
            self.path = "/" + self.url.split("/", 3)[3]
            self.where = ["--zk", self.url, "--zk-session-timeout", str(self.cfg.session_timeout)]
        for i in range(self.cfg.masters):
            self.daemons.append(await self._daemon(i).start())
        if self.zk is not None:
            self.watcher = zk_client(self.zk.address, 10.0)
            await asyncio.to_thread(self.watcher.start, 10)

    async def leader(self, exclude: str = "") -> str:
        """The leader's address, once it is not `exclude`."""
        if self.single:
            return self.url
        return await await_leader(self.watcher, self.path, exclude=exclude)

    def process(self, address: str) -> asyncio.subprocess.Process:
        proc = self.daemons[self.addresses.index(address)].proc
        assert proc is not None  # started: start() set it
        return proc

    async def kill_and_restart(self, address: str) -> float:
        """SIGKILLs the master at `address` and starts it again; when it listens again."""
        index = self.addresses.index(address)
        proc = self.process(address)
        proc.kill()
        await proc.wait()
        await self.daemons[index].stop()
        self.daemons[index] = await self._daemon(index).start()
        return time.time()

    async def stop(self) -> None:
        for d in self.daemons:
            await d.stop()
        if self.watcher is not None:
            await asyncio.to_thread(self.watcher.stop)
        if self.zk is not None:
            await asyncio.to_thread(self.zk.stop)


@dataclass
class _Outage:
    """What one fault led to, before the framework is back."""

    leader: str  # the new leader's address
    elected: float
    listening: float
    agents_back: float
    resumed_to_refusing: float | None = None


async def _kill(masters: Masters, leader: str, agents: int, at: float) -> _Outage:
    """SIGKILL of the leader, restarted at once to stand by (or, alone, to lead again)."""
    listening = await masters.kill_and_restart(leader)
    if masters.single:
        new_leader, elected = leader, listening
    else:
        new_leader = await masters.leader(exclude=leader)
        elected = time.time()
    agents_back = await _await_agents(new_leader, agents, since=at)
    return _Outage(new_leader, elected, listening, agents_back)


async def _pause(
    masters: Masters, leader: str, agents: int, at: float, framework: Launcher
) -> _Outage:
    """SIGSTOP of the leader until a successor is elected, SIGCONT half a second later: how
    soon the resumed master refuses, and whether anything it sent reached the framework."""
    assert framework.driver is not None  # subscribed before the first fault
    framework.deposed_master = framework.driver.master_id
    framework.successor_elected_at = float("inf")
    proc = masters.process(leader)
    proc.send_signal(signal.SIGSTOP)
    new_leader = await masters.leader(exclude=leader)
    elected = time.time()
    framework.successor_elected_at = elected
    # Agents come back meanwhile: timed from now, not after the resume below.
    agents_coming = asyncio.create_task(_await_agents(new_leader, agents, since=at))
    await asyncio.sleep(0.5)
    resumed = time.time()
    proc.send_signal(signal.SIGCONT)
    refusing = await _await_standby(leader) - resumed
    return _Outage(new_leader, elected, elected, await agents_coming, refusing)


async def _framework_back(framework: Launcher, since: float) -> tuple[float, float]:
    """When the framework subscribed again after `since`, and its first offer after that
    (an offer the dying master had already sent is not one)."""
    while not any(t > since for t, _ in framework.subscribed_at):
        await asyncio.sleep(0.01)
    back = min(t for t, _ in framework.subscribed_at if t > since)
    while not any(t > back for t in framework.offer_times):
        await asyncio.sleep(0.01)
    return back, min(t for t in framework.offer_times if t > back)


async def _fault(
    cfg: FailoverConfig, masters: Masters, leader: str, framework: Launcher
) -> tuple[FaultTimes, str]:
    """One fault on the leader, timed until agents and framework are back; the new
    leader."""
    at = time.time()
    if cfg.fault == "pause":
        outage = await _pause(masters, leader, cfg.agents, at, framework)
    else:
        outage = await _kill(masters, leader, cfg.agents, at)
    framework_back, first_offer = await _framework_back(framework, at)
    times = FaultTimes(
        at=at,
        elected=outage.elected,
        listening=outage.listening,
        agents_back=outage.agents_back,
        framework_back=framework_back,
        first_offer=first_offer,
        resumed_to_refusing=outage.resumed_to_refusing,
    )
    return times, outage.leader


async def _drain(framework: Launcher, task_seconds: float) -> None:
    """Stops launching and lets every task end (or half a minute pass)."""
    framework.launching = False
    deadline = time.monotonic() + 30 + 2 * task_seconds
    while framework.active() and time.monotonic() < deadline:
        await framework.reconcile_staging()
        await asyncio.sleep(0.5)


async def measure(cfg: FailoverConfig, scratch: Path, progress: Progress) -> FailoverRun:
    """Starts the cluster in `scratch`, faults its leader cfg.kills times, stops it; the times
    of each fault and the framework's record of its tasks."""
    markers = scratch / "markers"
    markers.mkdir(parents=True)
    measured = FailoverRun(masters=cfg.masters, fault=cfg.fault)
    masters = Masters(cfg, scratch)
    agents: list[Daemon] = []
    framework = Launcher(markers, cfg.task_seconds, cfg.tasks_per_agent * cfg.agents)
    fw_task = None
    try:
        await masters.start()
        for i in range(cfg.agents):
            agents.append(
                await start_real_agent(
                    masters.url,
                    masters.logs,
                    scratch / f"agent-{i}",
                    "cpus:2;mem:1024;disk:1024",
                    f"agent-{i}",
                    log_level="info",  # the log says what each agent dialled and when
                )
            )
        fw_task = asyncio.create_task(
            run_async(framework, master=masters.url, name="failover", failover_timeout=120)
        )
        leader = await masters.leader()
        await _await_agents(leader, cfg.agents, since=0)
        while not framework.offer_times:
            await asyncio.sleep(0.05)
        await asyncio.sleep(2 * cfg.task_seconds)  # tasks running and finishing
        for kill in range(1, cfg.kills + 1):
            progress.show(f"kill {kill}/{cfg.kills}", force=True)
            times, leader = await _fault(cfg, masters, leader, framework)
            measured.faults.append(times)
            await framework.reconcile_staging()
            await asyncio.sleep(cfg.settle_seconds)
        await _drain(framework, cfg.task_seconds)
        measured.framework_ids = [i for _, i in framework.subscribed_at]
    except BaseException:
        print(f"failover: the run failed; logs are in {masters.logs}", file=sys.stderr, flush=True)
        raise
    finally:
        progress.show("stopping", force=True)
        if framework.driver is not None:
            framework.driver.stop()
        if fw_task is not None:
            await asyncio.gather(fw_task, return_exceptions=True)
        for d in agents:
            await d.stop()
        await masters.stop()
    measured.states = dict(framework.states)
    measured.relaunched = framework.relaunched
    measured.from_deposed = framework.from_deposed
    measured.markers = sorted(p.name for p in markers.iterdir())
    return measured


async def run(cfg: FailoverConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    """The run (measure), its checks (failover_checks) and its report (failover_report)."""
    progress = Progress("failover", quiet)
    results = Results("failover", out, cfg.__dict__.copy(), command)
    # Scratch (logs, agents' work dirs, ZooKeeper's data, markers) beside, not in, `out`:
    # removed after a run that worked, kept (and named) after one that did not.
    scratch = scratch_dir("agora-failover-")
    measured = await measure(cfg, scratch, progress)
    verdict = failover_checks.judge(measured)
    failover_report.write(results, cfg, measured, verdict)
    if not os.environ.get("AGORA_KEEP_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)
    back = verdict.stats["back"]
    progress.done(
        f"back after a kill: p50 {back['p50']} s, p99 {back['p99']} s; lost "
        f"{len(verdict.lost)}, run twice {len(verdict.ran_twice)}"
    )
    return results


async def await_leader(zk, path: str, exclude: str, timeout: float = 60) -> str:
    """The address ZooKeeper names as leader under `path` once it is not `exclude`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = await asyncio.to_thread(find_leader, zk, path)
        if info is not None and info.address != exclude:
            return info.address
        await asyncio.sleep(0.01)
    raise RuntimeError(f"no new leader within {timeout:g} s")


async def _await_standby(address: str, timeout: float = 60) -> float:
    """When the master at `address` first answered NOT_LEADER."""
    from agora.common.errors import Reason, reason_of

    deadline = time.monotonic() + timeout
    channel = open_channel(address)
    try:
        stub = operator_pb2_grpc.OperatorStub(channel)
        while time.monotonic() < deadline:
            try:
                await stub.ListMasters(operator_pb2.ListMastersRequest(), timeout=1.0)
            except grpc.aio.AioRpcError as e:
                if reason_of(e) == Reason.NOT_LEADER:
                    return time.time()
            await asyncio.sleep(0.01)
    finally:
        await channel.close()
    raise TimeoutError(f"the master at {address} never answered NOT_LEADER")


async def _await_agents(leader: str, n: int, since: float, timeout: float = 60) -> float:
    """When all `n` agents are registered (connected) with `leader`; polled every 20 ms."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agents = await _list_agents(leader)
        if agents is not None and sum(a.state == "ACTIVE" for a in agents) >= n:
            return time.time()
        await asyncio.sleep(0.02)
    raise RuntimeError(f"the agents did not come back to {leader} within {timeout:g} s")
