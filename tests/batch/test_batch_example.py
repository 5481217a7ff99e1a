"""examples/submit_job_grpc.py (plain grpcio, generated stubs only) against a real cluster."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from batch_harness import BatchCluster
from harness import ROOT

from agora.v1 import batch_pb2 as B


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


def example(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "examples" / "submit_job_grpc.py"), *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )


async def test_example_submits_and_watches_a_job_to_success(cluster):
    result = await asyncio.to_thread(
        example,
        "--master",
        cluster.master.address,
        "--instances",
        "3",
        "--",
        "echo hi from $AGORA_INSTANCE",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"batch API at {cluster.batch.address}"
    job_id = lines[1].removeprefix("submitted ")
    assert lines[-1] == f"job {job_id} SUCCEEDED"
    assert any("3/3 done" in line for line in lines)
    assert (await cluster.job(job_id)).state == B.JOB_SUCCEEDED
    # The example imports no Agora package besides the generated stubs.
    source = (ROOT / "examples" / "submit_job_grpc.py").read_text()
    assert "from frameworks" not in source and "from common" not in source


async def test_example_exits_1_when_the_job_fails(cluster):
    result = await asyncio.to_thread(example, "--master", cluster.master.address, "--", "exit 4")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1].endswith("FAILED")
