"""`agora batch` as a real process: it prints its address, and a SIGKILL mid-job loses nothing."""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
from batch_harness import BatchCluster
from harness import Daemon, eventually_async

from agora.common.rpc import insecure_channel
from agora.v1 import batch_pb2, batch_pb2_grpc, common_pb2

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


async def test_sigkill_mid_burst_loses_no_finished_instance_and_the_rest_finish(cluster, tmp_path):
    """The daemon groups the writes of a burst of updates into one commit: killed with -9 in
    the middle of 100 instances ending, every instance it had shown FINISHED is still FINISHED
    when it comes back (nothing it shows is unwritten), and all the rest finish."""
    args = [
        "batch",
        "--master",
        cluster.master.address,
        "--port",
        "0",
        "--state-dir",
        str(tmp_path / "batch"),
    ]
    gate = tmp_path / "go"
    # Instances 0-99 end at once; 100-119 wait for the gate, so the job is mid-run whenever
    # the kill lands.
    script = f'[ "$AGORA_INSTANCE" -lt 100 ] || while [ ! -f {gate} ]; do sleep 0.05; done'
    daemons = [Daemon(args, tmp_path / "logs" / "batch-1.log")]
    try:
        await asyncio.to_thread(daemons[0].start)
        submitted = await cluster.cli(
            "job", "submit", "--instances", "120", "--cpus", "0.02", "--mem", "8", "--json",
            "--", script,
        )  # fmt: skip
        assert submitted.code == 0, submitted.err
        job_id = json.loads(submitted.out)["job_id"]

        async with insecure_channel(daemons[0].address) as channel:
            stub = batch_pb2_grpc.BatchStub(channel)
            request = batch_pb2.GetJobRequest(job_id=job_id)

            async def some_finished():
                job = await stub.GetJob(request)
                return job if job.counts.succeeded >= 20 else None

            await eventually_async(some_finished, timeout=60, message="20 instances finished")
            shown = await stub.GetJob(request)  # what it shows, the kill follows at once
            await asyncio.to_thread(daemons[0].kill, signal.SIGKILL)
        finished = {
            i.index: i.attempts[-1].task_id
            for i in shown.instances
            if i.state == batch_pb2.INSTANCE_SUCCEEDED
        }
        assert len(finished) >= 20
        gate.touch()  # the gated instances end while no scheduler is there

        daemons.append(Daemon(args, tmp_path / "logs" / "batch-2.log"))
        await asyncio.to_thread(daemons[1].start)
        async with insecure_channel(daemons[1].address) as channel:
            stub = batch_pb2_grpc.BatchStub(channel)
            first = await stub.GetJob(request)
            for index, task_id in finished.items():
                instance = first.instances[index]
                assert instance.state == batch_pb2.INSTANCE_SUCCEEDED, index
                assert instance.attempts[-1].task_id == task_id
                assert instance.attempts[-1].state == common_pb2.TASK_FINISHED

            async def succeeded():
                job = await stub.GetJob(request)
                return job if job.state == batch_pb2.JOB_SUCCEEDED else None

            job = await eventually_async(succeeded, timeout=90, message="job SUCCEEDED")
        assert job.counts.succeeded == 120
        assert all(i.state == batch_pb2.INSTANCE_SUCCEEDED for i in job.instances)
        for index, task_id in finished.items():
            assert [a.task_id for a in job.instances[index].attempts] == [task_id]
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
    "flag, value",
    [
        ("--port", "99999"),
        ("--queue", "lifo"),
        ("--retry-backoff", "-1"),
        ("--decline-refuse", "-1"),
        ("--idle-refuse", "nan"),
    ],
)
def test_bad_batch_flags_exit_2(tmp_path, flag, value):
    result = _agora(
        "batch", "--master", "127.0.0.1:5050", "--state-dir", str(tmp_path), flag, value
    )
    assert result.returncode == 2
    assert f"argument {flag}" in result.stderr.strip().splitlines()[-1]


def test_batch_and_job_help_name_their_flags():
    batch = _agora("batch", "--help").stdout
    for flag in (
        "--master",
        "--port",
        "--state-dir",
        "--queue",
        "--retry-backoff",
        "--decline-refuse",
        "--idle-refuse",
    ):
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
