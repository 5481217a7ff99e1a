"""An emulated fleet against the real master: many agents over a few shared connections."""

from __future__ import annotations

import asyncio
import json
import sys

from harness import eventually_async

from agora.common import Resources, attributes_from_proto
from agora.common.rpc import insecure_channel
from agora.experiments.emulated import EmulatedFleet, FleetConfig, constant
from agora.experiments.load import LoadConfig, Recorder, load_trace
from agora.experiments.load.framework import LoadFramework
from agora.experiments.load.timing import TimedTransport
from agora.frameworks.sdk import Driver, framework_info
from agora.master import Master, MasterConfig
from agora.v1 import operator_pb2, operator_pb2_grpc


async def _agents(address: str):
    async with insecure_channel(address) as channel:
        reply = await operator_pb2_grpc.OperatorStub(channel).ListAgents(
            operator_pb2.ListAgentsRequest()
        )
        return list(reply.agents)


async def _run_tasks(master: str, tasks: int) -> tuple[LoadFramework, Recorder]:
    """A load framework on the real SDK runs `tasks` short tasks to their end, then leaves."""
    recorder = Recorder()
    framework = LoadFramework(
        LoadConfig(
            name="t", cpus=1, mem=512, max_tasks=tasks, duration=constant(0.05), hold_offers=True
        ),
        recorder,
    )
    driver = Driver(
        framework,
        TimedTransport(master, recorder, "t"),
        framework_info("t", failover_timeout=5),
    )
    running = asyncio.create_task(driver.run())
    await eventually_async(lambda: framework.ended == tasks, timeout=60, message=f"{tasks} tasks")
    await driver.teardown()
    await running
    return framework, recorder


async def test_fleet_registers_every_agent_and_runs_tasks_through_the_real_master(tmp_path):
    master = Master(MasterConfig(port=0))
    await master.start()
    fleet = EmulatedFleet(
        FleetConfig(
            master=master.address,
            agents=30,
            racks=3,
            agents_per_channel=8,
            register_wave=10,
            resources=Resources.parse("cpus:2;mem:2048"),
            default_duration=constant(0.05),
        )
    )
    try:
        await fleet.start(timeout=60)
        assert len(fleet._channels) == 4  # 30 agents, 8 streams per connection
        agents = await _agents(master.address)
        assert len(agents) == 30 and all(a.state == "ACTIVE" for a in agents)
        assert {attributes_from_proto(a.info.attributes)["rack"] for a in agents} == {
            "r0",
            "r1",
            "r2",
        }

        # A load framework on the real SDK runs tasks on them to the end.
        framework, recorder = await _run_tasks(master.address, 40)
        assert framework.failed == 0
        assert recorder.counts["terminal"] == 40
        assert len(recorder.values("accept_to_running")) == 40
        totals = fleet.totals()
        assert totals["tasks_finished"] == 40 and totals["registered"] == 30
    finally:
        await fleet.stop()
        await master.stop()


async def test_killed_task_reports_killed_through_the_master():
    master = Master(MasterConfig(port=0))
    await master.start()
    fleet = EmulatedFleet(
        FleetConfig(master=master.address, agents=1, default_duration=constant(100))
    )
    try:
        await fleet.start(timeout=30)
        recorder = Recorder()
        framework = LoadFramework(
            LoadConfig(name="k", max_tasks=1, duration=constant(100)), recorder
        )
        driver = Driver(
            framework,
            TimedTransport(master.address, recorder, "k"),
            framework_info("k", failover_timeout=5),
        )
        running = asyncio.create_task(driver.run())
        await eventually_async(lambda: len(recorder.values("accept_to_running")) == 1)
        (task_id,) = framework.running
        await driver.kill(task_id)
        await eventually_async(lambda: framework.ended == 1, message="the kill")
        assert framework.failed == 1  # KILLED is not FINISHED
        assert fleet.totals()["tasks_killed"] == 1
        await driver.teardown()
        await running
    finally:
        await fleet.stop()
        await master.stop()


async def test_fleet_process_prints_ready_then_stops_on_sigterm():
    master = Master(MasterConfig(port=0))
    await master.start()
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agora.experiments.emulated",
            "--master",
            master.address,
            "--agents",
            "12",
            "--stats-interval",
            "0",
            stdout=asyncio.subprocess.PIPE,
        )
        ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        assert ready["event"] == "ready" and ready["registered"] == 12
        assert len(await _agents(master.address)) == 12
        proc.terminate()
        stopped = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert stopped["event"] == "stopped"
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        await master.stop()


async def test_a_trace_framework_runs_every_row_after_its_submit_time(tmp_path):
    trace_file = tmp_path / "trace.csv"
    trace_file.write_text(
        "submit_time,duration,cpus,mem\n0,0.1,1,256\n0.3,0.1,2,512\n0.6,0.2,1,256\n"
    )
    master = Master(MasterConfig(port=0))
    await master.start()
    fleet = EmulatedFleet(FleetConfig(master=master.address, agents=2))
    try:
        await fleet.start(timeout=30)
        recorder = Recorder()
        framework = LoadFramework(
            LoadConfig(name="trace", trace=load_trace(trace_file), decision_delay=0.01),
            recorder,
        )
        driver = Driver(
            framework,
            TimedTransport(master.address, recorder, "trace"),
            framework_info("trace", failover_timeout=5),
        )
        running = asyncio.create_task(driver.run())
        await eventually_async(lambda: framework.trace_done, timeout=30, message="the trace")
        assert framework.launched == 3 and framework.ended == 3 and framework.failed == 0
        # Tasks that arrived after the framework declined everything got offers again.
        assert recorder.counts["launched"] == 3
        await driver.teardown()
        await running
    finally:
        await fleet.stop()
        await master.stop()


async def test_a_carried_fleet_is_relayed_agents_to_the_master_and_survives_its_stream(tmp_path):
    """--carry: the fleet's agents reach the master on one AgentRelay stream, no AgentLink
    stream of their own; the master keeps them (their heartbeats arrive), runs their tasks, and
    when the stream breaks every agent registers again on the carrier's next stream."""
    master = Master(MasterConfig(port=0, agent_timeout_seconds=1.5, heartbeat_interval_seconds=0.5))
    await master.start()
    fleet = EmulatedFleet(
        FleetConfig(
            master=master.address,
            agents=30,
            register_wave=10,
            resources=Resources.parse("cpus:2;mem:2048"),
            default_duration=constant(0.05),
            carry=True,
        )
    )
    try:
        await fleet.start(timeout=60)
        assert fleet._channels == []  # not one AgentLink stream
        assert fleet._carrier is not None and fleet._carrier.streams == 1
        # Three agent timeouts later, all are still there: their heartbeats were carried.
        await asyncio.sleep(4.5)
        agents = await _agents(master.address)
        assert len(agents) == 30 and all(a.state == "ACTIVE" for a in agents)
        assert fleet.totals()["heartbeats_sent"] >= 30 * 3

        framework, _ = await _run_tasks(master.address, 20)
        assert framework.failed == 0 and fleet.totals()["tasks_finished"] == 20

        # The stream breaks: every link ends, the carrier dials again, each agent registers.
        before = fleet.totals()["registrations"]
        fleet._carrier._up.call.cancel()
        await eventually_async(
            lambda: fleet.totals()["registrations"] >= before + 30 and fleet.registered == 30,
            timeout=30,
            message="30 agents registered again",
        )
        assert fleet._carrier.streams == 2
        agents = await _agents(master.address)
        assert len(agents) == 30 and all(a.state == "ACTIVE" for a in agents)
    finally:
        await fleet.stop()
        await master.stop()
