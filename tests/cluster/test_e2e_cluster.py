"""Issue 2 end to end: real master and agent processes on loopback, a real SDK framework.

Each test starts its own cluster (`Cluster`: `agora master` and `agora agent` subprocesses with
short heartbeats) and drives it the way a user would: through the example, the `agora` command
and a framework on the SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import psutil
import pytest
from e2e_framework import Recorder, running
from harness import ROOT, Cluster, eventually, eventually_async, host_pid

from agora.frameworks.sdk import TaskSpec, new_task_id
from agora.v1 import agent_pb2, agent_pb2_grpc, operator_pb2, operator_pb2_grpc

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    c.start_master()
    yield c
    c.stop()


def agora(*args: str, master: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args, "--master", master],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def cluster_json(what: str, master: str):
    result = agora("cluster", what, "--json", master=master)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def operator_agents(master: str) -> list[operator_pb2.AgentSummary]:
    async with grpc.aio.insecure_channel(master) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        return list((await stub.ListAgents(operator_pb2.ListAgentsRequest())).agents)


async def find_agent_task(agent_address: str, task_id: str) -> agent_pb2.AgentTask | None:
    async with grpc.aio.insecure_channel(agent_address) as channel:
        stub = agent_pb2_grpc.AgentStub(channel)
        tasks = (await stub.ListTasks(agent_pb2.ListAgentTasksRequest())).tasks
    return next((t for t in tasks if t.task.task_id == task_id), None)


async def agent_task(agent_address: str, task_id: str) -> agent_pb2.AgentTask:
    task = await find_agent_task(agent_address, task_id)
    assert task is not None, f"{task_id} is not on the agent at {agent_address}"
    return task


def wait_agents(c: Cluster, n: int) -> list[dict]:
    return eventually(
        lambda: (a := cluster_json("agents", c.master.address)) and len(a) == n and a,
        timeout=30,
        message=f"{n} agents registered",
    )


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_hello_framework_runs_20_tasks_over_3_agents(cluster):
    for _ in range(3):
        cluster.start_agent()
    wait_agents(cluster, 3)
    result = subprocess.run(
        [
            sys.executable,
            "examples/hello_framework.py",
            "--master",
            cluster.master.address,
            "--tasks",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr + cluster.logs()
    finished = [line for line in result.stdout.splitlines() if " FINISHED on " in line]
    assert len({line.split()[0] for line in finished}) == 20
    agents_used = {line.split(" on ")[1].split(":")[0] for line in finished}
    assert len(agents_used) == 3, "tasks should spread over every agent"
    assert "all 20 tasks finished" in result.stdout

    tasks = cluster_json("tasks", cluster.master.address)
    hello = [t for t in tasks if t["name"].startswith("hello-")]
    assert len(hello) == 20
    assert {t["state"] for t in hello} == {"TASK_FINISHED"}
    agents = {a["agent_id"] for a in cluster_json("agents", cluster.master.address)}
    assert {t["agent_id"] for t in hello} == agents


async def test_kill_ends_the_task_and_its_children(cluster):
    agent = cluster.start_agent()
    await eventually_async(lambda: operator_agents(cluster.master.address), message="agent")
    async with running(Recorder(), cluster.master.address) as fw:
        spec = TaskSpec(
            "sleeper",
            cpus=0.1,
            mem=32,
            task_id=new_task_id("sleeper"),
            command='sleep 1000 & echo $! > "$AGORA_SANDBOX/child.pid"; sleep 1000',
        )
        await fw.launch(spec)
        await fw.wait_state(spec.task_id, "TASK_RUNNING")
        task = await agent_task(agent.address, spec.task_id)
        child_pid_file = Path(task.sandbox) / "child.pid"
        await eventually_async(child_pid_file.exists, message="child pid written")
        pids = [task.pid, host_pid(task.pid, int(child_pid_file.read_text()))]
        assert not any(gone(p) for p in pids)
        # the live cluster shows the framework and its running task (the command runs in a
        # thread: blocking this loop would starve the framework's driver of its heartbeats)
        frameworks = await asyncio.to_thread(cluster_json, "frameworks", cluster.master.address)
        assert [(f["name"], f["connected"], f["task_count"]) for f in frameworks] == [
            ("e2e", True, 1)
        ]
        tasks = await asyncio.to_thread(cluster_json, "tasks", cluster.master.address)
        assert [(t["task_id"], t["state"]) for t in tasks] == [(spec.task_id, "TASK_RUNNING")]

        await fw.driver.kill(spec.task_id)
        status = await fw.wait_state(spec.task_id, "TASK_KILLED")
        assert status.agent_id == fw.launched[spec.task_id]
        await eventually_async(
            lambda: all(gone(p) for p in pids), timeout=15, message="task and child processes gone"
        )


async def test_task_exiting_3_is_failed_with_its_code(cluster):
    cluster.start_agent()
    await eventually_async(lambda: operator_agents(cluster.master.address), message="agent")
    async with running(Recorder(), cluster.master.address) as fw:
        spec = TaskSpec(
            "three",
            cpus=0.1,
            mem=32,
            task_id=new_task_id("three"),
            command="echo about to fail; exit 3",
        )
        await fw.launch(spec)
        status = await fw.wait_state(spec.task_id, "TASK_FAILED")
        assert status.exit_code == 3
        assert "3" in status.message
        assert "TASK_FINISHED" not in fw.states(spec.task_id)


async def test_sigkilled_agent_loses_its_tasks_and_offers(cluster):
    doomed = cluster.start_agent()
    survivor = cluster.start_agent()
    await eventually_async(
        lambda: _count(operator_agents(cluster.master.address), 2), message="2 agents"
    )
    agents = await operator_agents(cluster.master.address)
    by_address = {a.info.address: a.info.agent_id for a in agents}
    doomed_id = by_address[doomed.address]
    survivor_id = by_address[survivor.address]
    async with running(Recorder(), cluster.master.address) as fw:
        spec = TaskSpec(
            "victim", cpus=0.5, mem=64, task_id=new_task_id("victim"), command="sleep 1000"
        )
        await fw.launch(spec, agent_id=doomed_id)
        await fw.wait_state(spec.task_id, "TASK_RUNNING")
        task_pid = (await agent_task(doomed.address, spec.task_id)).pid
        # the framework holds an offer with the rest of the doomed agent's resources
        held = await fw.wait_offer_from(doomed_id)
        try:
            doomed.kill(signal.SIGKILL)
            lost = await fw.wait_state(spec.task_id, "TASK_LOST", timeout=30)
            assert lost.agent_id == doomed_id
            await eventually_async(lambda: doomed_id in fw.lost_agents, message="FAILURE event")
            await eventually_async(lambda: held.offer_id in fw.rescinded, message="rescind")
            remaining = [
                a.info.agent_id
                for a in await operator_agents(cluster.master.address)
                if a.state == "ACTIVE"
            ]
            assert remaining == [survivor_id]
        finally:
            # The task's process outlived its SIGKILLed agent (as in Mesos); clean it up.
            with _suppress_no_process():
                os.killpg(task_pid, signal.SIGKILL)


async def test_master_restart_keeps_running_task_and_framework(cluster):
    cluster.start_agent()
    await eventually_async(lambda: operator_agents(cluster.master.address), message="agent")
    port = cluster.master.port
    async with running(Recorder(), cluster.master.address, failover_timeout=120) as fw:
        gate = cluster.root / "go"
        spec = TaskSpec(
            "survivor",
            cpus=0.1,
            mem=32,
            task_id=new_task_id("survivor"),
            command=f'while [ ! -e "{gate}" ]; do sleep 0.05; done; echo done',
        )
        await fw.launch(spec)
        await fw.wait_state(spec.task_id, "TASK_RUNNING")
        first_id = fw.framework_ids[0]

        cluster.master.kill(signal.SIGKILL)
        await asyncio.to_thread(cluster.start_master, port)

        # the framework re-subscribes with its id, the agent re-registers with the task
        await eventually_async(
            lambda: len(fw.framework_ids) >= 2, timeout=60, message="re-subscription"
        )
        assert set(fw.framework_ids) == {first_id}
        await eventually_async(
            lambda: _task_state(cluster.master.address, spec.task_id),
            timeout=60,
            message="task known to the new master",
        )
        assert await _task_state(cluster.master.address, spec.task_id) == "TASK_RUNNING"

        gate.touch()
        status = await fw.wait_state(spec.task_id, "TASK_FINISHED", timeout=60)
        assert status.framework_id == first_id


async def test_agent_restart_recovers_task_and_reports_final_status_once(cluster):
    agent = cluster.start_agent()
    await eventually_async(lambda: operator_agents(cluster.master.address), message="agent")
    agent_id = (await operator_agents(cluster.master.address))[0].info.agent_id
    async with running(Recorder(), cluster.master.address) as fw:
        gate = cluster.root / "go"
        spec = TaskSpec(
            "patient",
            cpus=0.1,
            mem=32,
            task_id=new_task_id("patient"),
            command=f'while [ ! -e "{gate}" ]; do sleep 0.05; done; echo done',
        )
        await fw.launch(spec)
        await fw.wait_state(spec.task_id, "TASK_RUNNING")

        agent.kill(signal.SIGKILL)
        restarted = await asyncio.to_thread(cluster.restart_agent, 0)
        # same agent id, task recovered and still running
        await eventually_async(
            lambda: _agent_has_task(restarted.address, spec.task_id), message="recovered task"
        )
        agents = await operator_agents(cluster.master.address)
        assert [a.info.agent_id for a in agents] == [agent_id]

        gate.touch()
        await fw.wait_state(spec.task_id, "TASK_FINISHED", timeout=30)
        # once acknowledged the agent stops resending: no second FINISHED ever comes
        await eventually_async(
            lambda: _acknowledged(restarted.address, spec.task_id),
            message="final update acknowledged",
        )
        assert fw.states(spec.task_id).count("TASK_FINISHED") == 1
        assert "TASK_LOST" not in fw.states(spec.task_id)


# --- helpers --------------------------------------------------------------------------------


async def _count(agents_coro, n):
    return len(await agents_coro) == n


async def _task_state(master: str, task_id: str) -> str | None:
    async with grpc.aio.insecure_channel(master) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        tasks = (await stub.ListTasks(operator_pb2.ListTasksRequest())).tasks
    for t in tasks:
        if t.task_id == task_id:
            from agora.v1 import common_pb2

            return common_pb2.TaskState.Name(t.state)
    return None


async def _agent_has_task(address: str, task_id: str) -> bool:
    return await find_agent_task(address, task_id) is not None


async def _acknowledged(address: str, task_id: str) -> bool:
    """Every update of the task is acknowledged: the agent has nothing left to resend."""
    task = await find_agent_task(address, task_id)
    return task is not None and task.unacknowledged_updates == 0


class _suppress_no_process:
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        return exc_type in (ProcessLookupError, PermissionError)


async def test_a_torn_down_frameworks_resources_wait_for_its_processes_to_end(cluster):
    """A task that ignores SIGTERM keeps its resources through its kill grace period: while
    its process lives, nobody is offered them (the probe found them re-offered at once)."""
    agent = cluster.start_agent(resources="cpus:1;mem:256;disk:256")
    await eventually_async(lambda: operator_agents(cluster.master.address), message="agent")
    stubborn = Recorder()
    async with running(stubborn, cluster.master.address, name="stubborn") as fw:
        spec = TaskSpec(
            "stubborn",
            cpus=1,
            mem=64,
            task_id=new_task_id("stubborn"),
            command="trap '' TERM; while true; do sleep 0.1; done",
            kill_grace_period_seconds=6,
        )
        await fw.launch(spec)
        await fw.wait_state(spec.task_id, "TASK_RUNNING")
        pid = (await agent_task(agent.address, spec.task_id)).pid
        await fw.driver.teardown()
    async with running(Recorder(), cluster.master.address, name="waiting") as waiting:
        # Its process is still there (SIGTERM ignored, grace 6 s): its cpu is not offered.
        tasks = await asyncio.to_thread(cluster_json, "tasks", cluster.master.address)
        [row] = [t for t in tasks if t["task_id"] == spec.task_id]
        assert row["state"] == "TASK_KILLING" and "waiting for the task to end" in row["message"]
        [summary] = await operator_agents(cluster.master.address)
        agent_id = summary.info.agent_id
        first = await waiting.wait_offer_from(agent_id)  # what is free: its memory, not its cpu
        assert "cpus" not in {r.name for r in first.resources}, first
        assert not gone(pid)  # and the process was still there when that was offered

        def cpus_offered() -> bool:
            return any(r.name == "cpus" for o in waiting.offers.values() for r in o.resources)

        # Once SIGKILL ends it, the agent says so and the cpu is offered again.
        await eventually_async(lambda: gone(pid), timeout=30, message="the task killed")
        await eventually_async(cpus_offered, timeout=30, message="the cpu offered again")
        tasks = await asyncio.to_thread(cluster_json, "tasks", cluster.master.address)
        [row] = [t for t in tasks if t["task_id"] == spec.task_id]
        assert row["state"] == "TASK_KILLED"
