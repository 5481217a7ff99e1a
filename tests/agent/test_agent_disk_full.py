"""A full disk under the agent's work dir loses no task and no status update (a small tmpfs)."""

from __future__ import annotations

import contextlib
import os
import subprocess

import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources
from agora.v1 import common_pb2 as S

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

FW = "fw-1"
TERMINAL = {S.TASK_FINISHED, S.TASK_FAILED, S.TASK_KILLED, S.TASK_ERROR, S.TASK_LOST}


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount)], check=True)
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def config(master: FakeMaster, work_dir) -> AgentConfig:
    return AgentConfig(
        master=master.address,
        port=0,
        work_dir=work_dir,
        resources=Resources.parse("cpus:8;mem:4096;disk:100;ports:[31000-31009]"),
        cgroups=False,
        reconnect_backoff_initial_seconds=0.05,
        reconnect_backoff_max_seconds=0.5,
        update_backoff_initial_seconds=0.2,
        update_backoff_max_seconds=1.0,
    )


def finals(master: FakeMaster, task_id: str) -> list[S.TaskStatus]:
    return [u for u in master.updates if u.task_id == task_id and u.state in TERMINAL]


async def all_ended(master: FakeMaster, task_ids: list[str], timeout: float = 30) -> None:
    await eventually_async(
        lambda: all(finals(master, t) for t in task_ids),
        timeout=timeout,
        message=f"a final status for each of {task_ids}",
    )


async def test_full_disk_every_task_gets_one_true_final_status(small_disk):
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    agent = AgentDaemon(config(master, small_disk / "agent"))
    await agent.start()
    try:
        await eventually_async(lambda: master.connected, message="registration")
        sleeps = [f"sleep{i}" for i in range(3)]
        for t in sleeps:
            master.run_task(FW, shell_task(t, "sleep 4"))
        # Three tasks that together write more than the disk holds.
        writers = [f"big{i}" for i in range(3)]
        for t in writers:
            master.run_task(FW, shell_task(t, "head -c 3000000 /dev/zero"))
        await all_ended(master, writers)
        # Submitted while the disk is full: fail at once, saying why.
        refused = [f"full{i}" for i in range(3)]
        for t in refused:
            master.run_task(FW, shell_task(t, "echo ok"))
        await all_ended(master, refused)
        for t in refused:
            [status] = finals(master, t)
            assert status.state == S.TASK_FAILED
            assert status.reason == "REASON_CONTAINER_LAUNCH_FAILED"
            assert "the agent's disk is full" in status.message
        # Space comes back: the agent works again without a restart.
        for t in writers:
            task = agent.tasks.find(FW, t)
            if task is not None:  # None: refused at launch, the disk already full
                with contextlib.suppress(FileNotFoundError):  # or collected: the disk was full
                    os.truncate(task.sandbox / "stdout", 0)
        after = [f"after{i}" for i in range(3)]
        for t in after:
            master.run_task(FW, shell_task(t, "echo ok"))
        await all_ended(master, sleeps + after)
        # A restart changes nothing that was reported, and the agent still runs tasks.
        await agent.stop(kill_tasks=False)
        agent = AgentDaemon(config(master, small_disk / "agent"))
        await agent.start()
        await eventually_async(lambda: len(master.registrations) == 2, message="re-registration")
        master.run_task(FW, shell_task("restarted", "echo ok"))
        await all_ended(master, ["restarted"])
        await eventually_async(lambda: agent.updates.pending_count() == 0, message="all acked")
    finally:
        await agent.stop(kill_tasks=True)
        await master.stop()

    for t in sleeps + after + ["restarted"]:
        [status] = finals(master, t)
        assert status.state == S.TASK_FINISHED, (t, status.message)
    # Each writer's final status is what it did: finished if its write fit, failed with its
    # own exit code (head could not write), or, launched once the others had filled the disk,
    # refused at once saying so; never "the wrapper died".
    for t in writers:
        [status] = finals(master, t)
        if status.state == S.TASK_FINISHED:
            assert status.message == "exited with code 0"
        elif status.reason == "REASON_CONTAINER_LAUNCH_FAILED":
            assert status.state == S.TASK_FAILED
            assert "the agent's disk is full" in status.message
        else:
            assert (status.state, status.message) == (S.TASK_FAILED, "exited with code 1")
    assert any(finals(master, t)[0].state == S.TASK_FAILED for t in writers)  # the disk did fill
