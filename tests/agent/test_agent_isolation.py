"""Tasks in cgroups: their memory limit is set, escapees from the process group still die.

Skipped where the agent may not create cgroups (it then runs tasks with process groups only).
"""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.agent.isolation import Isolator
from agora.v1 import common_pb2 as S

FW = "fw-1"

pytestmark = pytest.mark.skipif(
    not Isolator().enabled, reason="this host does not let the agent create cgroups"
)


@pytest.fixture
async def cluster(tmp_path):
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    daemon = AgentDaemon(AgentConfig(master=master.address, port=0, work_dir=tmp_path / "a"))
    await daemon.start()
    await eventually_async(lambda: master.connected, message="registration")
    yield master, daemon
    await daemon.stop(kill_tasks=True)
    await master.stop()


async def test_task_runs_in_a_cgroup_with_its_memory_limit(cluster):
    master, daemon = cluster
    master.run_task(
        FW, shell_task("mem", "cat /proc/self/cgroup; while [ ! -e go ]; do sleep 0.05; done")
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("mem"))
    run = daemon.tasks.find(FW, "mem")
    assert run.record.cgroups and all(run.record.run_id in c for c in run.record.cgroups)
    limits = {}
    for cgroup in map(Path, run.record.cgroups):
        for name in ("memory.limit_in_bytes", "memory.max"):
            if (cgroup / name).exists():
                limits[name] = int((cgroup / name).read_text())
    assert list(limits.values()) == [32 * 1024 * 1024]  # shell_task asks for mem:32
    # The task is inside; its wrapper (which waits for it and writes its exit status) is not,
    # so killing whatever is left in the cgroup never takes the wrapper with it.
    inside = set()
    for cgroup in map(Path, run.record.cgroups):
        inside |= {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
    assert run.wrapper.task_pid in inside
    assert run.wrapper.wrapper_pid not in inside
    (run.sandbox / "go").touch()
    assert (await eventually_async(lambda: master.terminal("mem"))).state == S.TASK_FINISHED
    assert run.record.run_id in (run.sandbox / "stdout").read_text()
    await eventually_async(
        lambda: not any(Path(c).exists() for c in run.record.cgroups), message="cgroups removed"
    )


async def test_kill_reaches_processes_that_left_the_process_group(cluster):
    master, daemon = cluster
    master.run_task(
        FW, shell_task("escape", "setsid sleep 300 & echo $! > escapee; sleep 300", grace=0.3)
    )
    await eventually_async(lambda: S.TASK_RUNNING in master.states("escape"))
    run = daemon.tasks.find(FW, "escape")
    pid_file = run.sandbox / "escapee"
    escapee = int(await eventually_async(lambda: pid_file.read_text().strip()))
    assert psutil.pid_exists(escapee)
    master.kill_task(FW, "escape")
    assert (await eventually_async(lambda: master.terminal("escape"))).state == S.TASK_KILLED

    def gone() -> bool:
        try:
            return psutil.Process(escapee).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    await eventually_async(gone, message="the escaped process killed")


async def test_a_task_over_its_memory_limit_fails_saying_so(cluster):
    master, daemon = cluster
    # Asks for mem:32 (shell_task) and takes 300 MB: the kernel's OOM killer ends it.
    hog = "python3 -c 'b = bytearray(300 * 1024 * 1024); b[::4096] = b\"1\" * len(b[::4096])'"
    master.run_task(FW, shell_task("hog", hog))
    status = await eventually_async(lambda: master.terminal("hog"), timeout=30)
    assert status.state == S.TASK_FAILED
    assert status.reason == "REASON_CONTAINER_LIMITATION_MEMORY"
    assert "memory limit of 32 MB exceeded" in status.message
