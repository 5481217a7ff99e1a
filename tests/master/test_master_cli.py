"""`agora master` as a process and `agora cluster ...` against it."""

from __future__ import annotations

import json
import re

from harness import Daemon, agora, agora_async
from master_harness import FakeAgent, FakeFramework, task


async def test_cluster_commands_show_the_live_cluster(tmp_path):
    master = Daemon(
        [
            "master",
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            "--state-dir",
            str(tmp_path / "state"),
            "--heartbeat-interval",
            "0.2",
            "--agent-timeout",
            "2",
        ],
        tmp_path / "master.log",
    ).start()
    agent = FakeAgent(master.address, hostname="cli-host")
    framework = FakeFramework(master.address, name="cli-fw")
    try:
        await agent.connect()
        await framework.subscribe()
        [offer] = await framework.offers()
        await framework.accept([offer.offer_id], [task("job-1")])
        await agent.inbox.expect("run_task")

        out = await agora_async("cluster", "agents", "--json", "--master", master.address)
        assert out.returncode == 0, out.stderr
        [row] = json.loads(out.stdout)
        assert row["agent_id"] == agent.agent_id and row["task_count"] == 1
        assert row["hostname"] == "cli-host" and row["state"] == "ACTIVE"

        out = await agora_async("cluster", "agents", "--master", master.address)
        assert "cli-host" in out.stdout and "ACTIVE" in out.stdout
        out = await agora_async("cluster", "frameworks", "--master", master.address)
        assert "cli-fw" in out.stdout and framework.framework_id in out.stdout
        out = await agora_async("cluster", "tasks", "--master", master.address)
        assert re.search(r"^job-1 +STAGING ", out.stdout, re.MULTILINE), out.stdout
        out = await agora_async("cluster", "state", "--master", master.address)
        assert out.returncode == 0 and "1 agents, 1 frameworks, 1 tasks" in out.stdout
        out = await agora_async(
            "cluster", "tasks", "--json", "--master", master.address,
            "--framework", "framework-none",
        )  # fmt: skip
        assert out.returncode == 1 and "no framework with id or name 'framework-none'" in out.stderr
        for key in ("cli-fw", framework.framework_id):  # a framework by its name or its id
            out = await agora_async(
                "cluster", "tasks", "--json", "--master", master.address, "--framework", key
            )
            assert [t["task_id"] for t in json.loads(out.stdout)] == ["job-1"]
        out = await agora_async("cluster", "frameworks", "--json", "--master", master.address)
        [fw] = json.loads(out.stdout)
        assert (fw["name"], fw["connected"], fw["task_count"]) == ("cli-fw", True, 1)
    finally:
        await framework.close()
        await agent.close()
        master.stop()


def test_cluster_reports_an_unreachable_master_in_one_line():
    # A refused connection is said at once (not after --timeout), in one line.
    out = agora("cluster", "agents", "--master", "127.0.0.1:1", "--timeout", "30")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "cannot reach the master" in out.stderr
    assert "connection refused" in out.stderr


def test_master_rejects_bad_flags_with_exit_2():
    out = agora("master", "--port", "0", "--agent-timeout", "0.1", "--heartbeat-interval", "1")
    assert out.returncode == 2 and "agent-timeout" in out.stderr
    out = agora("master", "--port", "0", "--role-sorter", "nope")
    assert out.returncode == 2 and "nope" in out.stderr
    # Each flag checks its own bounds (MasterConfig's field metadata) before anything starts.
    for flag, value, says in (
        ("--optimistic-fanout", "-7", "must be at least 1, got -7"),
        ("--allocation-batch", "nan", "must be 0 or more seconds, got nan"),
        ("--max-send-queue", "5.5", "'5.5' is not a whole number"),
    ):
        out = agora("master", "--port", "0", flag, value)
        assert out.returncode == 2 and f"argument {flag}: {says}" in out.stderr, out.stderr
