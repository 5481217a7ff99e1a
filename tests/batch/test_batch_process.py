"""`agora batch` as a real process: it prints its address, and a SIGKILL mid-job loses nothing."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from batch_harness import BatchCluster
from harness import Daemon, eventually_async

pytestmark = pytest.mark.e2e


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path, in_process_batch=False).start()
    yield c
    await c.stop()


async def test_sigkilled_batch_process_restarts_and_finishes_its_job(cluster, tmp_path):
    args = [
        "batch",
        "--master",
        cluster.master.address,
        "--port",
        "0",
        "--state-dir",
        str(tmp_path / "batch"),
        "--retry-backoff",
        "0.05",
        "--log-level",
        "debug",
    ]
    daemons = [Daemon(args, tmp_path / "logs" / "batch-1.log")]
    try:
        await asyncio.to_thread(daemons[0].start)
        assert daemons[0].lines[0].startswith(f"batch listening on {daemons[0].address}")

        script = f"while [ ! -f {tmp_path}/go-$AGORA_INSTANCE ]; do sleep 0.05; done"
        submitted = await cluster.cli(
            "job", "submit", "--name", "gated", "--instances", "2", "--json", "--", script
        )
        assert submitted.code == 0, submitted.err
        job_id = json.loads(submitted.out)["job_id"]

        async def running():
            result = await cluster.cli("job", "status", job_id, "--json")
            job = json.loads(result.out)
            return job["counts"].get("running") == 2 and all(
                i["attempts"][-1]["state"] == "TASK_RUNNING" for i in job["instances"]
            )

        await eventually_async(running, timeout=30, message="both instances running")
        await asyncio.to_thread(daemons[0].kill, signal.SIGKILL)
        (tmp_path / "go-0").touch()  # ends while no scheduler is there

        daemons.append(Daemon(args, tmp_path / "logs" / "batch-2.log"))
        await asyncio.to_thread(daemons[1].start)
        (tmp_path / "go-1").touch()

        async def succeeded():
            result = await cluster.cli("job", "status", job_id, "--json")
            return json.loads(result.out) if result.code == 0 else None

        job = await eventually_async(
            lambda: _state(succeeded(), "JOB_SUCCEEDED"), timeout=60, message="job SUCCEEDED"
        )
        assert [len(i["attempts"]) for i in job["instances"]] == [1, 1]
        assert all(i["attempts"][0]["state"] == "TASK_FINISHED" for i in job["instances"])
    finally:
        for daemon in daemons:
            await asyncio.to_thread(daemon.stop)


async def _state(coroutine, state):
    job = await coroutine
    return job if job and job["state"] == state else None


def _agora(*args: str):
    import subprocess
    import sys

    from harness import ROOT

    return subprocess.run(
        [sys.executable, "-m", "agora.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "flag, value", [("--port", "99999"), ("--queue", "lifo"), ("--retry-backoff", "-1")]
)
def test_bad_batch_flags_exit_2(tmp_path, flag, value):
    result = _agora(
        "batch", "--master", "127.0.0.1:5050", "--state-dir", str(tmp_path), flag, value
    )
    assert result.returncode == 2
    assert f"argument {flag}" in result.stderr.strip().splitlines()[-1]


def test_batch_and_job_help_name_their_flags():
    batch = _agora("batch", "--help").stdout
    for flag in ("--master", "--port", "--state-dir", "--queue", "--retry-backoff"):
        assert flag in batch
    submit = _agora("job", "submit", "--help").stdout
    for flag in (
        "--name",
        "--instances",
        "--cpus",
        "--mem",
        "--retries",
        "--priority",
        "--gang",
        "--wait",
        "--json",
    ):
        assert flag in submit
