"""A real Prometheus scrapes a local cluster; PromQL answers what the cluster really has."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from harness import ROOT, Daemon, eventually
from prometheus import Prometheus

pytestmark = pytest.mark.e2e


def agora(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_prometheus_sees_agents_tasks_and_calls(tmp_path):
    local = Daemon(
        ["local", "--port", "0", "--agents", "2", "--metrics-port", "0"]
        + ["--work-dir", str(tmp_path / "w")],
        tmp_path / "local.log",
    ).start(timeout=60)
    prometheus = None
    try:
        eventually(
            lambda: sum("agent metrics on" in line for line in local.lines) == 2,
            timeout=30,
            message="the metrics endpoints",
        )
        targets = {
            kind: [
                re.search(r"http://(\S+)/metrics", line).group(1)
                for line in local.lines
                if line.startswith(f"{kind} metrics on")
            ]
            for kind in ("master", "agent", "batch", "services")
        }
        prometheus = Prometheus(tmp_path / "prom", targets).start()

        def value(promql: str) -> float | None:
            result = prometheus.query(promql)
            return result[0][1] if result else None

        eventually(lambda: value('agora_master_agents{state="ACTIVE"}') == 2, timeout=30)
        assert value("agora_master_frameworks{connected='true'}") == 2  # batch and services
        job = agora(
            "job", "submit", "--master", local.address, "--name", "sleepers",
            "--instances", "3", "--cpus", "0.1", "--mem", "32", "--", "sleep", "60",
        )  # fmt: skip
        assert job.returncode == 0, job.stderr
        job_id = job.stdout.strip()
        eventually(lambda: value('agora_master_tasks{state="TASK_RUNNING"}') == 3, timeout=30)
        eventually(lambda: value('sum(agora_agent_tasks{state="TASK_RUNNING"})') == 3, timeout=30)
        assert value('agora_master_role_allocated{role="*",resource="cpus"}') >= 0.3
        assert (
            value('sum(agora_grpc_server_handled_total{grpc_method="Accept",grpc_code="OK"})') >= 1
        )
        assert value("sum(agora_agent_task_launch_seconds_count)") == 3
        # The offers and updates behind those three tasks, as the master counted them.
        eventually(lambda: value("agora_master_tasks_launched_total") == 3, timeout=30)
        assert value("agora_master_offers_accepted_total") >= 1
        assert value("agora_master_offers_sent_total") >= value(
            "agora_master_offers_accepted_total"
        )
        assert value("agora_master_offer_latency_seconds_count") >= 1
        # STARTING and RUNNING of each task at least, each forwarded and acknowledged.
        eventually(lambda: value("agora_master_status_updates_acknowledged_total") >= 6, timeout=30)
        assert value("agora_master_status_updates_received_total") >= 6
        assert value("agora_master_status_updates_forwarded_total") >= 6
        # The batch framework's view: one running job of three running instances, each of
        # which waited once in the queue; the services framework has nothing deploying.
        # (Each waited for: Prometheus scrapes each target on its own schedule.)
        eventually(lambda: value('agora_batch_jobs{state="JOB_RUNNING"}') == 1, timeout=30)
        eventually(
            lambda: value('agora_batch_instances{state="INSTANCE_RUNNING"}') == 3, timeout=30
        )
        eventually(lambda: value("agora_batch_queue_wait_seconds_count") == 3, timeout=30)
        eventually(
            lambda: value('sum(agora_grpc_server_handled_total{grpc_method="SubmitJob"})') == 1,
            timeout=30,
        )
        assert value("agora_services_deployments_in_progress") == 0
        # The same usage, per task, from the command line (asked of each task's agent).
        listed = agora("cluster", "tasks", "--usage", "--json", "--master", local.address)
        assert listed.returncode == 0, listed.stderr
        running = [t for t in json.loads(listed.stdout) if t["state"] == "TASK_RUNNING"]
        assert len(running) == 3
        assert all(t["mem_limit_mb"] == 32 and t["cpu_seconds"] != "" for t in running), running
        table = agora("cluster", "tasks", "--usage", "--master", local.address).stdout
        assert "CPU S" in table and "MEM MB" in table
        assert agora("job", "kill", "--master", local.address, job_id).returncode == 0
        eventually(lambda: value('agora_master_tasks{state="TASK_KILLED"}') == 3, timeout=30)
    finally:
        if prometheus is not None:
            prometheus.stop()
        local.stop()
