"""An agent stopped while a task's wrapper is still starting lets go of the launch pipe."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import psutil
import pytest
from agent_fake_master import FakeMaster, shell_task
from harness import eventually, eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources


@pytest.fixture
async def master():
    m = FakeMaster(heartbeat=0.3)
    await m.start()
    yield m
    await m.stop()


def pipe_inodes(pid: int) -> set[str]:
    """The pipes a process holds open, as "pipe:[INODE]"."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            held.add(target)
    return held


async def test_stopping_the_agent_mid_launch_closes_the_launch_pipe(
    master, tmp_path: Path, monkeypatch
):
    # Stands in for `python -m agora.agent.executor RUN_DIR`: like it, the first process exits at
    # once and leaves a "wrapper" holding the agent's pipe; this one reports nothing until
    # the test opens the gate, so the agent is stopped while it waits for the report.
    gate, pid_file = tmp_path / "gate", tmp_path / "wrapper.pid"
    script = tmp_path / "slow-executor"
    script.write_text(
        f'#!/bin/sh\n( while [ ! -e "{gate}" ]; do sleep 0.05; done ) &\necho $! > "{pid_file}"\n'
    )
    script.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(script))

    daemon = AgentDaemon(
        AgentConfig(
            master=master.address,
            port=0,
            work_dir=tmp_path / "agent",
            resources=Resources.parse("cpus:1;mem:256;disk:256"),
            hostname="host-a",
        )
    )
    await daemon.start()
    wrapper, stopped = None, False
    try:
        await eventually_async(lambda: master.connected, timeout=20, message="registered")
        master.run_task("fw-1", shell_task("t1", "true"))
        await eventually_async(
            lambda: pid_file.exists() and pid_file.read_text().strip(),
            timeout=20,
            message="the wrapper started",
        )
        wrapper = psutil.Process(int(pid_file.read_text()))
        launch_pipe = os.readlink(f"/proc/{wrapper.pid}/fd/1")
        assert launch_pipe in pipe_inodes(os.getpid()), "the agent reads the wrapper's stdout"

        await daemon.stop(kill_tasks=False)
        stopped = True
        gc.collect()  # an unclosed transport would warn here (warnings are errors)

        assert launch_pipe not in pipe_inodes(os.getpid())
    finally:
        if not stopped:
            await daemon.stop(kill_tasks=False)
        gate.touch()
        if wrapper is not None:
            eventually(
                lambda: not wrapper.is_running() or wrapper.status() == "zombie",
                timeout=10,
                message="the stand-in wrapper ended",
            )
