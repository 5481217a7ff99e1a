"""A registered agent keeps its stream to a master that says nothing (the master sends agents
no heartbeats: the channel's gRPC keepalive, answered in gRPC's core, is the evidence it is
there), and drops it for a master that no longer answers the keepalive (stopped with SIGSTOP:
as good as gone), then registers again when it is back."""

from __future__ import annotations

import asyncio
import signal
import time

from harness import Daemon, eventually_async

from agora.agent import AgentConfig, AgentDaemon
from agora.common import Resources


async def test_the_agent_stays_with_a_quiet_master_and_leaves_a_stopped_one(tmp_path):
    master = Daemon(
        ["master", "--port", "0", "--heartbeat-interval", "0.5", "--agent-timeout", "60"],
        tmp_path / "master.log",
    )
    await asyncio.to_thread(master.start)
    agent = AgentDaemon(
        AgentConfig(
            master=master.address or "",
            port=0,
            resources=Resources.parse("cpus:1;mem:256"),
            work_dir=tmp_path / "agent",
            reconnect_backoff_initial_seconds=0.05,
            reconnect_backoff_max_seconds=0.5,
        )
    )
    try:
        await agent.start()
        await eventually_async(lambda: agent.link.registrations == 1, timeout=20)
        # Quiet for longer than the old rule allowed (3 missed heartbeats, at least 3 s): the
        # stream stays, nothing is dialled again.
        await asyncio.sleep(5)
        assert agent.link.registrations == 1 and agent.link.registered
        assert master.proc is not None
        master.proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        # The keepalive (a ping every 10 s, 5 s to answer: common/rpc.py) breaks the stream.
        await eventually_async(
            lambda: not agent.link.registered, timeout=40, message="the stream dropped"
        )
        noticed = time.monotonic() - stopped
        master.proc.send_signal(signal.SIGCONT)
        await eventually_async(
            lambda: agent.link.registrations == 2, timeout=30, message="registered again"
        )
        print(f"a stopped master noticed after {noticed:.1f} s")
    finally:
        await agent.stop()
        if master.proc is not None and master.alive():
            master.proc.send_signal(signal.SIGCONT)
        await asyncio.to_thread(master.stop)
