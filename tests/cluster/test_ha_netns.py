"""Masters on separate "hosts" (network namespaces): the registry follows the leadership to
another machine, and a leader cut off from ZooKeeper by the network, though its agents still
reach it, steps down.

ZooKeeper, two masters and an agent each have a namespace of their own, joined by a bridge;
nothing takes a loopback shortcut. `--insecure` keeps this test about HA (TLS across hosts has
its own test, test_e2e_netns.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually
from netns import Hosts, netns_unavailable_reason

from agora.common.zookeeper_server import ZooKeeperServer

pytestmark = [pytest.mark.e2e, pytest.mark.netns]

_reason = netns_unavailable_reason()


@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_the_registry_moves_to_another_host_and_a_cut_off_leader_steps_down(tmp_path):
    with Hosts(["zk", "m1", "m2", "a1"]) as hosts:
        ip = hosts.address
        zk = ZooKeeperServer(
            tmp_path / "zk", port=2181, host=ip["zk"], prefix=hosts.exec_prefix("zk")
        ).start()
        url = f"zk://{ip['zk']}:2181/agora"
        daemons: list[Daemon] = []

        def master(host: str) -> Daemon:
            d = Daemon(
                ["master", "--zk", url, "--zk-session-timeout", "1.5"]
                + ["--host", ip[host], "--port", "5050", "--insecure"]
                + ["--heartbeat-interval", "0.5", "--agent-timeout", "15"],
                tmp_path / f"{host}-{len(daemons)}.log",
                prefix=hosts.exec_prefix(host),
            ).start()
            daemons.append(d)
            return d

        def agora(*args: str) -> subprocess.CompletedProcess:
            """`agora ... --master zk://...` on the agent's host, as its operator would."""
            return subprocess.run(
                [*hosts.exec_prefix("a1"), sys.executable, "-m", "agora.cli.main", *args]
                + ["--master", url],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )

        def cluster(what: str) -> list | dict:
            out = agora("cluster", what, "--json", "--timeout", "5")
            return json.loads(out.stdout) if out.returncode == 0 else []

        def leader() -> str:
            rows = cluster("masters")
            return rows[0]["address"] if rows and rows[0]["leading"] else ""

        try:
            m1 = master("m1")
            eventually(lambda: leader() == f"{ip['m1']}:5050", timeout=30, message="m1 leads")
            daemons.append(
                Daemon(
                    ["agent", "--master", url, "--host", ip["a1"], "--port", "5051"]
                    + ["--advertise-ip", ip["a1"], "--insecure", "--hostname", "a1"]
                    + [
                        "--resources",
                        "cpus:2;mem:1024;disk:1024",
                        "--work-dir",
                        str(tmp_path / "a1"),
                    ],
                    tmp_path / "a1.log",
                    prefix=hosts.exec_prefix("a1"),
                ).start()
            )
            eventually(lambda: len(cluster("agents")) == 1, timeout=30, message="the agent")
            agent_id = cluster("agents")[0]["agent_id"]
            assert agora("cluster", "weight", "analytics", "2.5").returncode == 0
            assert agora("cluster", "drain", agent_id).returncode == 0

            # The leader's machine dies; a master on another machine takes over from the
            # registry in ZooKeeper: same agent, still drained, same weight.
            m1.kill()
            master("m2")
            eventually(lambda: leader() == f"{ip['m2']}:5050", timeout=30, message="m2 leads")
            eventually(
                lambda: (
                    [(a["agent_id"], a["state"]) for a in cluster("agents")]
                    == [(agent_id, "DRAINING")]
                ),
                timeout=30,
                message="the agent back with m2, still drained",
            )
            roles = {r["role"]: r["weight"] for r in cluster("roles")}
            assert roles.get("analytics") == 2.5

            # m1 comes back and stands by. Then m2 loses ZooKeeper (a route to nowhere on its
            # host) while the agent can still reach it: it steps down, m1 leads, the agent
            # follows, and m2 only stands by.
            master("m1")
            eventually(lambda: len(cluster("masters")) == 2, timeout=30, message="m1 stands")
            subprocess.run(
                [*hosts.exec_prefix("m2"), "ip", "route", "add", "blackhole", f"{ip['zk']}/32"],
                check=True,
            )
            eventually(
                lambda: "stepping down" in (tmp_path / "m2-2.log").read_text(),
                timeout=30,
                message="m2 to step down",
            )
            eventually(lambda: leader() == f"{ip['m1']}:5050", timeout=30, message="m1 leads")
            eventually(
                lambda: (
                    [(a["agent_id"], a["state"]) for a in cluster("agents")]
                    == [(agent_id, "DRAINING")]
                ),
                timeout=30,
                message="the agent with m1",
            )

            # m2, still reachable from the agent's host, cannot see ZooKeeper and so names no
            # leader; a client given both masters finds m1.
            def state_via(masters: str) -> subprocess.CompletedProcess:
                return subprocess.run(
                    [*hosts.exec_prefix("a1"), sys.executable, "-m", "agora.cli.main"]
                    + ["cluster", "state", "--json", "--timeout", "2", "--master", masters],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=60,
                )

            alone = state_via(f"{ip['m2']}:5050")
            assert alone.returncode == 1 and "standing by" in alone.stderr, alone.stderr
            both = state_via(f"{ip['m2']}:5050,{ip['m1']}:5050")
            assert both.returncode == 0, both.stderr
            assert json.loads(both.stdout)["leader"] == f"{ip['m1']}:5050"
        finally:
            for d in reversed(daemons):
                d.stop()
            zk.stop()
