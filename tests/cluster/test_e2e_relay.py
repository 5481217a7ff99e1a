"""Agents behind a relay, end to end: `agora master`, `agora relay` and `agora agent` processes
on loopback, and the example framework run through them. The master sees every agent, tasks
run and finish on agents it reaches only through the relay, and when the relay dies the agents
come back through a new one on the same port without losing their tasks' records. A real
Prometheus scrapes the relay's metrics."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest
from harness import ROOT, Cluster, Daemon, eventually
from prometheus import Prometheus
from test_e2e_cluster import cluster_json, wait_agents

pytestmark = pytest.mark.e2e


def _relay(cluster: Cluster, port: int = 0, *extra: str) -> Daemon:
    assert cluster.master and cluster.master.address
    return Daemon(
        ["relay", "--master", cluster.master.address, "--port", str(port), "--log-level", "debug",
         *extra],
        cluster.root / "logs" / "relay.log",
    ).start()  # fmt: skip


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
    prometheus = None
    try:
        cluster.start_master()
        relay = _relay(cluster, 0, "--metrics-port", "0")
        for index in range(2):
            _agent_via(cluster, index, relay)
        agents = wait_agents(cluster, 2)
        assert {a["state"] for a in agents} == {"ACTIVE"}

        # What the relay carries, as a real Prometheus scrapes it.
        line = eventually(
            lambda: next((x for x in relay.lines if x.startswith("relay metrics on")), None),
            timeout=10,
            message="the relay's metrics endpoint",
        )
        target = re.search(r"https?://(\S+)/metrics", line).group(1)
        prometheus = Prometheus(tmp_path / "prom", {"relay": [target]}).start()

        def value(promql: str) -> float | None:
            result = prometheus.query(promql)
            return result[0][1] if result else None

        eventually(lambda: value("agora_relay_agents") == 2, timeout=30, message="2 agents")
        assert value("agora_relay_master_linked") == 1
        assert value("agora_relay_master_links_total") == 1
        assert value("agora_relay_messages_up_total") >= 2  # at least the two Registers
        assert value("agora_relay_messages_down_total") >= 2  # and their Registered

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
        if prometheus is not None:
            prometheus.stop()
        if relay is not None:
            relay.stop()
        cluster.stop()
