"""Issue 3 through the real path: `agora cluster roles|weight|quota|frameworks --why` against a
master process, with a framework in a role taking offers, and the settings surviving a restart."""

from __future__ import annotations

import asyncio
import json

from harness import Daemon, agora_async
from master_harness import FakeAgent, FakeFramework

from agora.common import Resources


def start_master(tmp_path, port: int = 0) -> Daemon:
    return Daemon(
        [
            "master",
            "--port",
            str(port),
            "--state-dir",
            str(tmp_path / "state"),
            "--heartbeat-interval",
            "0.5",
            "--agent-timeout",
            "5",
        ],
        tmp_path / "master.log",
    ).start()


def roles_by_name(stdout: str) -> dict[str, dict]:
    return {row["role"]: row for row in json.loads(stdout)}


async def test_weight_quota_and_why_through_the_command_line(tmp_path):
    master = start_master(tmp_path)
    agent = FakeAgent(master.address, resources="cpus:4;mem:4096")
    framework = FakeFramework(master.address, name="analytics-fw", role="analytics")
    try:
        await agent.connect()
        out = await agora_async("cluster", "weight", "analytics", "2", "--master", master.address)
        assert out.returncode == 0, out.stderr
        out = await agora_async(
            "cluster",
            "quota",
            "analytics",
            "--limit",
            "cpus:1;mem:1024",
            "--master",
            master.address,
        )
        assert out.returncode == 0, out.stderr

        await framework.subscribe()
        [offer] = await framework.offers()
        # the quota limit caps what the role is offered, whatever the agent has free
        offered = Resources.from_proto(offer.resources)
        assert offered.scalar("cpus") <= 1 and offered.scalar("mem") <= 1024

        out = await agora_async("cluster", "roles", "--json", "--master", master.address)
        analytics = roles_by_name(out.stdout)["analytics"]
        assert analytics["weight"] == 2
        assert Resources.parse(analytics["limit"]) == Resources.parse("cpus:1;mem:1024")
        assert analytics["frameworks"] == [framework.framework_id]
        assert analytics["dominant_share"] > 0

        # holding the offer puts the role at its limit: --why says so, by name or id
        out = await agora_async(
            "cluster", "frameworks", "--why", "analytics-fw", "--master", master.address
        )
        assert out.returncode == 0, out.stderr
        assert "quota limit" in out.stdout
        out = await agora_async(
            "cluster",
            "frameworks",
            "--why",
            framework.framework_id,
            "--json",
            "--master",
            master.address,
        )
        reasons = json.loads(out.stdout)["reasons"]
        assert any("quota limit" in r for r in reasons)

        # bad input: one line, non-zero, nothing changed
        out = await agora_async("cluster", "weight", "analytics", "nan", "--master", master.address)
        assert out.returncode == 2 and "positive" in out.stderr
        out = await agora_async(
            "cluster", "quota", "analytics", "--limit", "cpus:-1", "--master", master.address
        )
        assert out.returncode == 1 and "negative" in out.stderr
        out = await agora_async(
            "cluster", "frameworks", "--why", "nobody", "--master", master.address
        )
        assert out.returncode == 1 and "nobody" in out.stderr
        out = await agora_async("cluster", "roles", "--json", "--master", master.address)
        assert roles_by_name(out.stdout)["analytics"]["weight"] == 2
    finally:
        await framework.close()
        await agent.close()
        master.stop()

    # weights and quota are in the state store: a restarted master still has them
    master = await asyncio.to_thread(start_master, tmp_path)
    try:
        out = await agora_async("cluster", "roles", "--json", "--master", master.address)
        analytics = roles_by_name(out.stdout)["analytics"]
        assert analytics["weight"] == 2
        assert Resources.parse(analytics["limit"]) == Resources.parse("cpus:1;mem:1024")
    finally:
        master.stop()


async def test_a_guarantee_for_a_role_without_frameworks_is_named_where_it_holds_back(tmp_path):
    # The README's quota example on a cluster of 6 cpus: 4 are held back for analytics, which
    # has no framework; a framework of role * is offered the rest and asks why.
    master = start_master(tmp_path)
    agents = [FakeAgent(master.address, resources="cpus:2;mem:2048") for _ in range(3)]
    framework = FakeFramework(master.address, name="web")
    try:
        for agent in agents:
            await agent.connect()
        out = await agora_async(
            "cluster",
            "quota",
            "analytics",
            "--guarantee",
            "cpus:4;mem:4096",
            "--master",
            master.address,
        )
        assert out.returncode == 0, out.stderr
        await framework.subscribe()
        offers = await framework.offers()
        offered = sum((Resources.from_proto(o.resources) for o in offers), Resources())
        assert offered.scalar("cpus") == 2

        out = await agora_async("cluster", "roles", "--master", master.address)
        assert "HELD BACK FOR IT" in out.stdout
        out = await agora_async("cluster", "roles", "--json", "--master", master.address)
        held = roles_by_name(out.stdout)["analytics"]["held_back"]
        assert Resources.parse(held) == Resources.parse("cpus:4;mem:4096")

        out = await agora_async("cluster", "frameworks", "--why", "web", "--master", master.address)
        assert out.returncode == 0, out.stderr
        assert "held back as headroom" in out.stdout
        assert "role analytics lacks cpus:4;mem:4096" in out.stdout
        assert "no framework of that role is subscribed" in out.stdout
    finally:
        await framework.close()
        for agent in agents:
            await agent.close()
        master.stop()
