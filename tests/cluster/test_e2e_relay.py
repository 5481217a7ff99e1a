"""Agents behind a relay, end to end: `agora master`, `agora relay` and `agora agent` processes
on loopback, and the example framework run through them. The master sees every agent, tasks
run and finish on agents it reaches only through the relay, and when the relay dies the agents
come back through a new one on the same port without losing their tasks' records."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from harness import ROOT, Cluster, Daemon, eventually
from test_e2e_cluster import cluster_json, wait_agents

pytestmark = pytest.mark.e2e


def _relay(cluster: Cluster, port: int = 0) -> Daemon:
    assert cluster.master and cluster.master.address
    return Daemon(
        ["relay", "--master", cluster.master.address, "--port", str(port), "--log-level", "debug"],
        cluster.root / "logs" / "relay.log",
    ).start()


def _agent_via(cluster: Cluster, index: int, relay: Daemon) -> Daemon:
    args = cluster.agent_args(index)
    assert relay.address
    args[args.index("--master") + 1] = relay.address
    agent = Daemon(args, cluster.root / "logs" / f"agent-{index}.log").start()
    cluster.agents.append(agent)
    return agent


def test_tasks_run_on_agents_behind_a_relay_and_the_agents_survive_the_relays_death(tmp_path):
    # Patient with silence: the agents must come back as themselves, not be removed meanwhile.
    cluster = Cluster(tmp_path, agent_timeout=60.0)
    relay = None
    try:
        cluster.start_master()
        relay = _relay(cluster)
        for index in range(2):
            _agent_via(cluster, index, relay)
        agents = wait_agents(cluster, 2)
        assert {a["state"] for a in agents} == {"ACTIVE"}

        hello = subprocess.run(
            [sys.executable, "examples/hello_framework.py", "--master", cluster.master.address,
             "--tasks", "10"],
            capture_output=True, text=True, timeout=90, cwd=ROOT,
        )  # fmt: skip
        assert hello.returncode == 0, (
            hello.stdout + hello.stderr + cluster.logs() + relay.log_tail()
        )
        assert "all 10 tasks finished" in hello.stdout
        finished = [t for t in cluster_json("tasks", cluster.master.address)
                    if t["name"].startswith("hello-")]  # fmt: skip
        assert len(finished) == 10 and {t["state"] for t in finished} == {"TASK_FINISHED"}
        assert {t["agent_id"] for t in finished} == {a["agent_id"] for a in agents}

        port = relay.port
        relay.kill(signal.SIGKILL)
        eventually(
            lambda: (
                {a["state"] for a in cluster_json("agents", cluster.master.address)}
                == {"DISCONNECTED"}
            ),
            timeout=30,
            message="both agents disconnected when their relay died",
        )
        relay = _relay(cluster, port)
        again = eventually(
            lambda: (
                (a := cluster_json("agents", cluster.master.address))
                and {x["state"] for x in a} == {"ACTIVE"}
                and a
            ),
            timeout=30,
            message="both agents back through the new relay",
        )
        assert {a["agent_id"] for a in again} == {a["agent_id"] for a in agents}
    finally:
        if relay is not None:
            relay.stop()
        cluster.stop()
