"""Completed tasks' sandboxes are garbage-collected after --gc-delay, at once on a full disk,
and never while their task runs; the rule itself is pure (sandbox_watch.gc_delay_now)."""

from __future__ import annotations

import os
import subprocess

import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.agent.sandbox_watch import gc_delay_now
from agora.common import Resources
from agora.v1 import common_pb2 as S

FW = "fw-1"


def test_the_delay_shrinks_as_the_disk_fills_and_is_zero_past_the_headroom():
    week = 7 * 24 * 3600.0
    assert gc_delay_now(week, 0.0, 0.1) == pytest.approx(0.9 * week)
    assert gc_delay_now(week, 0.5, 0.1) == pytest.approx(0.4 * week)
    assert gc_delay_now(week, 0.9, 0.1) == 0.0
    assert gc_delay_now(week, 0.97, 0.1) == 0.0  # never negative


def config(master: FakeMaster, work_dir, gc_delay: float) -> AgentConfig:
    return AgentConfig(
        master=master.address,
        port=0,
        work_dir=work_dir,
        resources=Resources.parse("cpus:8;mem:4096;disk:100"),
        cgroups=False,
        sandbox_watch_interval_seconds=0.2,
        gc_delay_seconds=gc_delay,
        gc_disk_headroom=0.0,
    )


def acked_final(master: FakeMaster, task_id: str) -> bool:
    return any(u.task_id == task_id and u.state == S.TASK_FINISHED for u in master.updates)


async def test_finished_sandboxes_go_after_the_delay_and_running_ones_stay(tmp_path):
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    # Twice the delay a loaded machine could need to get there; the disk is far from full.
    agent = AgentDaemon(config(master, tmp_path / "agent", gc_delay=2.0))
    await agent.start()
    try:
        await eventually_async(lambda: master.connected, message="registration")
        master.run_task(FW, shell_task("done", "echo hi"))
        master.run_task(FW, shell_task("runs", "sleep 30"))
        await eventually_async(lambda: acked_final(master, "done"), message="done finished")
        done = tmp_path / "agent" / "sandboxes" / FW / "done"
        runs = tmp_path / "agent" / "sandboxes" / FW / "runs"
        assert (done / "stdout").read_text() == "hi\n"  # readable within the delay
        await eventually_async(
            lambda: agent.updates.pending_count() <= 1,  # "runs" may still await its ack
            message="the final update acknowledged",
        )
        await eventually_async(lambda: not done.exists(), timeout=30, message="done's GC")
        assert runs.is_dir(), "the sandbox of a running task was removed"
    finally:
        await agent.stop(kill_tasks=True)
        await master.stop()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
async def test_a_full_disk_collects_completed_sandboxes_at_once(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(mount)], check=True)
    master = FakeMaster(heartbeat=0.3)
    await master.start()
    # A week's delay, but the disk will be more than full enough to need the room now.
    agent = AgentDaemon(config(master, mount / "agent", gc_delay=7 * 24 * 3600.0))
    await agent.start()
    try:
        await eventually_async(lambda: master.connected, message="registration")
        master.run_task(FW, shell_task("big", "head -c 4800000 /dev/zero"))
        await eventually_async(
            lambda: any(u.task_id == "big" and u.state in (S.TASK_FINISHED, S.TASK_FAILED)
                        for u in master.updates),
            message="big ended",
        )  # fmt: skip
        big = mount / "agent" / "sandboxes" / FW / "big"
        await eventually_async(lambda: not big.exists(), timeout=30, message="big's GC")
    finally:
        await agent.stop(kill_tasks=True)
        await master.stop()
        subprocess.run(["umount", "-l", str(mount)], check=False)
