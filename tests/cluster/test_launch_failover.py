"""Issue 11, part 1: the master killed (SIGKILL) just as a framework's launches go out.

Every task whose fate is unknown after the restart must get an answer once the agents are back
(running, or TASK_UNKNOWN and launched again by the framework), and nothing may run twice. The
SDK asks the master again with backoff until each has an answer, since the master does not
answer for a task of an agent that has not re-registered yet.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections import Counter

import pytest
from ha import free_port
from harness import ROOT, Cluster, Daemon, eventually

pytestmark = pytest.mark.e2e

INSTANCES = 150


def agora(*args: str, master: str) -> subprocess.CompletedProcess:
    # --master before a `--` (what follows it is the job's command).
    cut = args.index("--") if "--" in args else len(args)
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args[:cut], "--master", master, *args[cut:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_master_killed_mid_launch_leaves_no_task_without_an_answer(tmp_path):
    cluster = Cluster(tmp_path, heartbeat=0.5, agent_timeout=15)
    port = free_port()
    cluster.start_master(port=port)
    master = f"127.0.0.1:{port}"
    for i in range(2):
        cluster.start_agent(
            i, resources=f"cpus:2;mem:4096;disk:4096;ports:[{31000 + i * 1000}-{31999 + i * 1000}]"
        )
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = Daemon(
        ["batch", "--master", master, "--port", "0", "--state-dir", str(tmp_path / "batch")]
        + ["--log-level", "debug"],
        tmp_path / "logs" / "batch.log",
    )
    try:
        await asyncio.to_thread(batch.start)
        submitted = agora(
            "job",
            "submit",
            "--name",
            "many",
            "--instances",
            str(INSTANCES),
            "--cpus",
            "0.01",
            "--mem",
            "4",
            "--json",
            "--",
            f'touch "{markers}/$AGORA_INSTANCE.$$"; sleep 0.5',
            master=master,
        )
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["job_id"]
        # SIGKILL the moment the first launch reaches the master.
        master_log = cluster.master.log_path
        await asyncio.to_thread(
            eventually,
            lambda: "offers accepted" in master_log.read_text(),
            timeout=30,
            interval=0.002,
            message="the first launch",
        )
        cluster.master.kill()
        # The agents come back after the framework has re-subscribed and reconciled (common:
        # they reconnect with backoff); frozen meanwhile, as a slow machine would be.
        for agent in cluster.agents:
            agent.proc.send_signal(signal.SIGSTOP)
        await asyncio.sleep(1)
        cluster.start_master(port=port)
        restarted_log = cluster.master.log_path
        await asyncio.to_thread(
            eventually,
            lambda: restarted_log.read_text().count("failed_over=True") >= 1,
            timeout=30,
            message="the framework to re-subscribe",
        )
        await asyncio.sleep(1.5)
        for agent in cluster.agents:
            agent.proc.send_signal(signal.SIGCONT)

        def status():
            out = agora("job", "status", job_id, "--json", master=master)
            return json.loads(out.stdout) if out.returncode == 0 else None

        job = await asyncio.to_thread(
            eventually,
            lambda: (j := status()) and j["state"] == "JOB_SUCCEEDED" and j,
            timeout=90,
            message="every instance to finish",
        )
    finally:
        await asyncio.to_thread(batch.stop)
        cluster.stop()
    ran = Counter(m.name.split(".")[0] for m in markers.iterdir())
    assert sorted(ran) == sorted(str(i) for i in range(INSTANCES))
    assert max(ran.values()) == 1, [k for k, v in ran.items() if v > 1]
    for instance in job["instances"]:
        *earlier, last = instance["attempts"]
        assert last["state"] == "TASK_FINISHED"
        # An earlier attempt can only be one that never ran: its launch died with the master.
        assert all(a["state"] in ("TASK_UNKNOWN", "TASK_DROPPED", "TASK_LOST") for a in earlier)
