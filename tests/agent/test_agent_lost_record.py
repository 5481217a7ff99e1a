"""A task record lost in a machine crash (it is not fsync'd) while its STARTING update was kept:
the restarted agent drops that update instead of resending a task it knows nothing of."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources
from agora.v1 import common_pb2 as S

FW = "fw-1"


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3, auto_ack=False)
    await m.start()
    yield m
    await m.stop()


def config(master: FakeMaster, tmp_path: Path) -> AgentConfig:
    return AgentConfig(
        master=master.address,
        port=0,
        work_dir=tmp_path / "agent",
        resources=Resources.parse("cpus:2;mem:1024;disk:1024"),
        hostname="host-a",
        reconnect_backoff_initial_seconds=0.05,
        reconnect_backoff_max_seconds=0.5,
    )


async def test_updates_of_a_run_whose_record_was_lost_are_dropped(master, tmp_path):
    daemon = AgentDaemon(config(master, tmp_path))
    await daemon.start()
    try:
        await eventually_async(lambda: master.connected, timeout=20, message="registered")
        master.run_task(FW, shell_task("gone", "sleep 60"))
        master.run_task(FW, shell_task("bad/id", "true"))  # refused: TASK_ERROR, no record
        await eventually_async(
            lambda: (
                S.TASK_STARTING in master.states("gone") and S.TASK_ERROR in master.states("bad/id")
            ),
            timeout=20,
            message="STARTING and ERROR sent",
        )
        run = daemon.tasks.find(FW, "gone")
        await eventually_async(lambda: run.wrapper is not None, timeout=20, message="launched")
    finally:
        await daemon.stop(kill_tasks=False)
    # The machine "crashes": the task dies with it, and so does its unsynced record.
    run.wrapper.signal_group(signal.SIGKILL)
    await eventually_async(lambda: not run.wrapper.alive(), timeout=20, message="task gone")
    (daemon.work.run_dir(run.record.run_id) / "task.json").unlink()

    daemon = AgentDaemon(config(master, tmp_path))
    await daemon.start()
    try:
        assert daemon.updates.pending(FW, "gone") == []
        # A terminal update needs no record: it is still delivered.
        assert [u.state for u in daemon.updates.pending(FW, "bad/id")] == [S.TASK_ERROR]
        await eventually_async(lambda: len(master.registrations) >= 2, timeout=20)
        assert list(master.registrations[-1].tasks) == []
    finally:
        await daemon.stop()


async def test_a_logged_terminal_update_wins_over_a_record_that_lost_it(master, tmp_path):
    """The machine crashed after the task's FINISHED reached the (fsync'd) update log but
    before the record's rewrite and exit.json (neither fsync'd) did: the restarted agent
    keeps FINISHED and adds no second, contradictory terminal update."""
    daemon = AgentDaemon(config(master, tmp_path))
    await daemon.start()
    try:
        await eventually_async(lambda: master.connected, timeout=20, message="registered")
        master.run_task(FW, shell_task("done", "true"))
        run = await eventually_async(lambda: daemon.tasks.find(FW, "done"), timeout=20)
        await eventually_async(
            lambda: S.TASK_FINISHED in [u.state for u in daemon.updates.pending(FW, "done")],
            timeout=20,
            message="FINISHED logged (nothing is acknowledged)",
        )
    finally:
        await daemon.stop(kill_tasks=False)
    run_dir = daemon.work.run_dir(run.record.run_id)
    (run_dir / "exit.json").unlink()
    record = json.loads((run_dir / "task.json").read_text())
    record["state"] = S.TASK_RUNNING
    (run_dir / "task.json").write_text(json.dumps(record))

    daemon = AgentDaemon(config(master, tmp_path))
    await daemon.start()
    try:
        states = [u.state for u in daemon.updates.pending(FW, "done")]
        assert states == [S.TASK_STARTING, S.TASK_RUNNING, S.TASK_FINISHED]
        assert daemon.tasks.find(FW, "done").state == S.TASK_FINISHED
    finally:
        await daemon.stop()
