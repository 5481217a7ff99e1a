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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from agora.common.election import find_leader, zk_client
from agora.common.rpc import open_channel
from agora.experiments.processes import Daemon, agora_argv, start_real_agent
from agora.experiments.results import Progress, Results, stats_table, summarize, targets_md
from agora.frameworks.sdk import Framework, SchedulerError, TaskSpec, fit, new_task_id, run_async
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc

ENDED_BADLY = {
    common_pb2.TASK_LOST,
    common_pb2.TASK_GONE,
    common_pb2.TASK_UNREACHABLE,
    common_pb2.TASK_DROPPED,
}
TERMINAL = {
    common_pb2.TASK_FINISHED,
    common_pb2.TASK_FAILED,
    common_pb2.TASK_KILLED,
    common_pb2.TASK_ERROR,
    *ENDED_BADLY,
}
METRICS = (
    "elected",
    "agents_back",
    "framework_back",
    "first_offer",
    "back",
    "back_after_listening",
)


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


async def run(cfg: FailoverConfig, out: Path, command: list[str], quiet: bool = False) -> Results:
    from agora.common.zookeeper_server import ZooKeeperServer

    progress = Progress("failover", quiet)
    results = Results("failover", out, cfg.__dict__.copy(), command)
    # Scratch (logs, agents' work dirs, ZooKeeper's data, markers) beside, not in, `out`:
    # removed after a run that worked, kept (and named) after one that did not.
    scratch = Path(tempfile.mkdtemp(prefix="agora-failover-"))
    logs = scratch / "logs"
    markers = scratch / "markers"
    markers.mkdir(parents=True)
    single = cfg.masters == 1
    ports = free_ports(cfg.masters)
    addresses = [f"127.0.0.1:{p}" for p in ports]
    zk = None
    if single:
        # One master with its registry in SQLite, restarted at once after each kill: how soon
        # agents and frameworks are back once it listens again.
        url = addresses[0]
        where = ["--state-dir", str(scratch / "master-state")]
    else:
        zk = await asyncio.to_thread(ZooKeeperServer(scratch / "zookeeper").start)
        url = f"zk://{zk.address}/agora-failover-{int(time.time())}"
        where = ["--zk", url, "--zk-session-timeout", str(cfg.session_timeout)]

    def master(i: int) -> Daemon:
        return Daemon(
            f"master-{i}",
            agora_argv(
                "master",
                *where,
                "--port",
                str(ports[i]),
                "--heartbeat-interval",
                "1",
                "--agent-timeout",
                "30",
                "--log-level",
                "info",
            ),
            logs,
        )

    masters = [await master(i).start() for i in range(cfg.masters)]
    watcher = None
    if zk is not None:
        watcher = zk_client(zk.address, 10.0)
        await asyncio.to_thread(watcher.start, 10)
    path = "/" + url.split("/", 3)[3] if zk is not None else ""
    agents: list[Daemon] = []
    framework = Launcher(markers, cfg.task_seconds, cfg.tasks_per_agent * cfg.agents)
    fw_task = None
    samples: list[dict] = []
    try:
        for i in range(cfg.agents):
            agents.append(
                await start_real_agent(
                    url,
                    logs,
                    scratch / f"agent-{i}",
                    "cpus:2;mem:1024;disk:1024",
                    f"agent-{i}",
                    log_level="info",  # the log says what each agent dialled and when
                )
            )
        fw_task = asyncio.create_task(
            run_async(framework, master=url, name="failover", failover_timeout=120)
        )
        leader = url if single else await await_leader(watcher, path, exclude="")
        await _await_agents(leader, cfg.agents, since=0)
        while not framework.offer_times:
            await asyncio.sleep(0.05)
        framework_id = framework.subscribed_at[0][1]
        await asyncio.sleep(2 * cfg.task_seconds)  # tasks running and finishing

        for kill in range(1, cfg.kills + 1):
            progress.show(f"kill {kill}/{cfg.kills}", force=True)
            index = addresses.index(leader)
            killed_at = time.time()
            proc = masters[index].proc
            assert proc is not None  # started: start() set it
            standby = None
            agents_coming: asyncio.Task | None = None
            if cfg.fault == "pause":
                assert framework.driver is not None  # subscribed before the first fault
                framework.deposed_master = framework.driver.master_id
                framework.successor_elected_at = float("inf")
                proc.send_signal(signal.SIGSTOP)
                new_leader = await await_leader(watcher, path, exclude=leader)
                elected = listening = time.time()
                framework.successor_elected_at = elected
                # Agents come back meanwhile: timed from now, not after the resume below.
                agents_coming = asyncio.create_task(
                    _await_agents(new_leader, cfg.agents, since=killed_at)
                )
                await asyncio.sleep(0.5)
                resumed = time.time()
                proc.send_signal(signal.SIGCONT)
                standby = await _await_standby(leader) - resumed
            else:
                proc.kill()  # SIGKILL
                await proc.wait()
                await masters[index].stop()
                masters[index] = await master(index).start()  # as a supervisor would
                listening = time.time()
                if single:
                    new_leader, elected = leader, listening
                else:
                    new_leader = await await_leader(watcher, path, exclude=leader)
                    elected = time.time()
            agents_back = await (
                agents_coming or _await_agents(new_leader, cfg.agents, since=killed_at)
            )
            while not any(t > killed_at for t, _ in framework.subscribed_at):
                await asyncio.sleep(0.01)
            framework_back = min(t for t, _ in framework.subscribed_at if t > killed_at)
            # From the new subscription: an offer the dying master had already sent is not one.
            while not any(t > framework_back for t in framework.offer_times):
                await asyncio.sleep(0.01)
            first_offer = min(t for t in framework.offer_times if t > framework_back)
            sample = {
                "kill": kill,
                "elected": elected - killed_at,
                "agents_back": agents_back - killed_at,
                "framework_back": framework_back - killed_at,
                "first_offer": first_offer - killed_at,
                "back": max(agents_back, framework_back) - killed_at,
                "back_after_listening": max(agents_back, framework_back) - listening,
            }
            if standby is not None:
                sample["resumed_to_refusing"] = standby
            samples.append(sample)
            await framework.reconcile_staging()
            leader = new_leader
            await asyncio.sleep(cfg.settle_seconds)

        # Let every task end, then count.
        framework.launching = False
        deadline = time.monotonic() + 30 + 2 * cfg.task_seconds
        while framework.active() and time.monotonic() < deadline:
            await framework.reconcile_staging()
            await asyncio.sleep(0.5)
        ids = [sid for _, sid in framework.subscribed_at]
        same_id = all(i == framework_id for i in ids)
    except BaseException:
        print(f"failover: the run failed; logs are in {logs}", file=sys.stderr, flush=True)
        raise
    finally:
        progress.show("stopping", force=True)
        if framework.driver is not None:
            framework.driver.stop()
        if fw_task is not None:
            await asyncio.gather(fw_task, return_exceptions=True)
        for d in agents:
            await d.stop()
        for d in masters:
            await d.stop()
        if watcher is not None:
            await asyncio.to_thread(watcher.stop)
        if zk is not None:
            await asyncio.to_thread(zk.stop)

    runs_by_task: dict[str, int] = {}
    for marker in markers.iterdir():
        task_id = marker.name.rsplit(".", 1)[0]
        runs_by_task[task_id] = runs_by_task.get(task_id, 0) + 1
    ran_twice = sorted(t for t, n in runs_by_task.items() if n > 1)
    # Lost: ended LOST/GONE/UNREACHABLE, or never heard of again. DROPPED is ours: a launch
    # the new leader never knew of (TASK_UNKNOWN on reconciliation), relaunched.
    lost = sorted(
        t
        for t, s in framework.states.items()
        if (s in ENDED_BADLY and s != common_pb2.TASK_DROPPED) or s not in TERMINAL
    )
    # "back after listening" means something only when the killed master is the one to return.
    metrics = METRICS if single else METRICS[:5]
    if cfg.fault == "pause":
        metrics = (*METRICS[:5], "resumed_to_refusing")
    for sample in samples:
        if not single:
            sample.pop("back_after_listening", None)
    stats = {m: summarize(s[m] for s in samples) for m in metrics}
    run_entry = {
        "kills": len(samples),
        "session_timeout_seconds": cfg.session_timeout,
        "seconds": {m: stats[m] for m in metrics},
        "tasks_launched": len(framework.states),
        "tasks_finished": sum(s == common_pb2.TASK_FINISHED for s in framework.states.values()),
        "tasks_lost": len(lost),
        "lost_task_ids": lost[:20],
        "tasks_run_twice": len(ran_twice),
        "run_twice_ids": ran_twice[:20],
        "launches_dropped_by_a_dying_master": framework.relaunched,
        "framework_kept_its_id": same_id,
        "fault": cfg.fault,
    }
    if cfg.fault == "pause":
        # What reached the framework from a master whose successor was already elected: the
        # SDK drops such a stream's events itself, so these are counted as they arrive.
        run_entry["events_from_a_deposed_leader"] = framework.from_deposed
    results.add_run(run_entry)
    results.add_samples(samples)
    back = stats["back"]
    if single:
        relisten = stats["back_after_listening"]
        results.target(
            "listening again -> all back (max)",
            relisten["max"],
            1.0,
            "s",
            measured_in="back_after_listening",
        )
    else:
        results.target("kill -> all back p50", back["p50"], 2.0, "s", measured_in="back")
        results.target("kill -> all back p99", back["p99"], 4.0, "s", measured_in="back")
    if cfg.fault == "pause":
        results.target(
            "events from a deposed leader",
            float(framework.from_deposed),
            0,
            "events",
            measured_in="events_from_a_deposed_leader",
        )
    results.target("tasks lost", float(len(lost)), 0, "tasks")
    results.target("tasks run twice", float(len(ran_twice)), 0, "tasks")
    plots = _plot(out, samples)
    summary = "\n".join(
        [
            "# failover: "
            + (
                "SIGSTOP of the leading master across an election"
                if cfg.fault == "pause"
                else "SIGKILL of the leading master"
            ),
            "",
            (
                f"One master (SQLite registry), {cfg.agents} real agents, one framework "
                f"launching {cfg.task_seconds:g} s tasks; the master killed {len(samples)} "
                "times and restarted at once. 'elected' is when it listens again."
                if single
                else f"{cfg.masters} masters on a real ZooKeeper (session timeout "
                f"{cfg.session_timeout:g} s), {cfg.agents} real agents, one framework launching "
                f"{cfg.task_seconds:g} s tasks; "
                + (
                    f"the leader paused {len(samples)} times until a successor was elected, "
                    "then resumed 0.5 s later."
                    if cfg.fault == "pause"
                    else f"the leader killed {len(samples)} times, each time restarted at once "
                    "to stand by."
                )
            ),
            "",
            stats_table([(m.replace("_", " "), stats[m]) for m in metrics], unit="s"),
            "",
            f"Tasks launched {run_entry['tasks_launched']}, finished "
            f"{run_entry['tasks_finished']}, lost {len(lost)}, run twice {len(ran_twice)}; "
            f"launches dropped by a dying master and relaunched: {framework.relaunched}; "
            f"framework kept its id: {same_id}.",
            "",
            targets_md(results.data["targets"]),
            "",
        ]
    )
    results.write(summary, plots)
    if not os.environ.get("AGORA_KEEP_SCRATCH"):
        shutil.rmtree(scratch, ignore_errors=True)
    progress.done(
        f"back after a kill: p50 {back['p50']} s, p99 {back['p99']} s; lost {len(lost)}, "
        f"run twice {len(ran_twice)}"
    )
    return results


def free_ports(n: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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


def _plot(out: Path, samples: list[dict]) -> list[str]:
    try:
        from agora.experiments import plots
    except ImportError:  # matplotlib is the [experiments] extra
        return []
    kills = [s["kill"] for s in samples]
    series = [(m.replace("_", " "), kills, [s[m] for s in samples]) for m in METRICS[:5]]
    return [
        plots.lines(
            out / "failover.png",
            "SIGKILL of the leader -> back (seconds)",
            "kill",
            "seconds after the kill",
            series,
            hline=(2.0, "target p50 2 s"),
        )
    ]
