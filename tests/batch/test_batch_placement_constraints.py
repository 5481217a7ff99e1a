"""Issue 36, item 6: jobs take the same constraints as apps (`--constraint rack:LIKE:r1`,
UNIQUE, MAX_PER, ...) and `--gpus`, and say when they cannot be placed. Through the batch
cluster with real agents: three agents in two racks, one with a GPU."""

from __future__ import annotations

import grpc
import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.frameworks.batch import pending
from agora.v1 import batch_pb2 as B


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(
        tmp_path,
        agent_resources=[
            "cpus:2;mem:1024;disk:1024",
            "cpus:2;mem:1024;disk:1024",
            "cpus:2;mem:1024;disk:1024;gpus:1",
        ],
        agent_attributes=[{"rack": "r1"}, {"rack": "r2"}, {"rack": "r2"}],
    ).start()
    yield c
    await c.stop()


def hosts(job: B.Job) -> list[str]:
    return sorted(i.attempts[-1].hostname for i in job.instances if i.attempts)


async def cli_job(cluster, *args: str) -> str:
    result = await cluster.cli("job", "submit", *args)
    assert result.code == 0, result.err
    return result.out.split()[0]


async def wait_reason(cluster, job_id: str, name: str) -> B.Job:
    async def check():
        job = await cluster.job(job_id)
        return job if pending.name(job.pending_reason) == name else None

    return await eventually_async(check, timeout=20, message=f"{job_id} waits for {name}")


async def test_constraints_place_instances_and_say_why_one_waits(cluster):
    like = await cli_job(
        cluster, "--instances", "3", "--constraint", "rack:LIKE:r1", "--wait", "--", "true"
    )
    assert hosts(await cluster.job(like)) == ["host-0"] * 3

    # One instance per host; the GPU agent is kept for GPU jobs, so the third waits, and says
    # which constraint the agents with room broke.
    unique = await cli_job(
        cluster, "--instances", "3", "--constraint", "hostname:UNIQUE", "--", "sleep 60"
    )
    waiting = await wait_reason(cluster, unique, "constraint")
    assert "[hostname, UNIQUE]" in waiting.message and "already runs an instance" in waiting.message
    assert hosts(waiting) == ["host-0", "host-1"]
    await cluster.stub.KillJob(B.KillJobRequest(job_id=unique))

    nowhere = await cli_job(cluster, "--constraint", "rack:CLUSTER:r9", "--", "true")
    said = await wait_reason(cluster, nowhere, "constraint")
    assert "rack=r" in said.message
    await cluster.stub.KillJob(B.KillJobRequest(job_id=nowhere))


async def test_a_gpu_job_runs_on_the_gpu_agent_only(cluster):
    gpu = await cli_job(cluster, "--gpus", "1", "--instances", "2", "--", "sleep 60")

    async def one_running():
        job = await cluster.job(gpu)
        return job if job.counts.running == 1 and job.counts.pending == 1 else None

    job = await eventually_async(one_running, timeout=20, message="one GPU instance running")
    assert hosts(job) == ["host-2"]  # the second waits for the one GPU
    await wait_reason(cluster, gpu, "resources")  # the GPU agent is taken; none other serves
    await cluster.stub.KillJob(B.KillJobRequest(job_id=gpu))

    too_many = await cluster.cli("job", "submit", "--gpus", "2", "--", "true")
    assert too_many.code != 0 and "gpus:2" in too_many.err  # no agent has two


async def test_a_bad_constraint_is_refused_at_submission(cluster):
    for text, says in (
        ("rack:NEAR:r1", "unknown operator 'NEAR'"),
        ("rack:LIKE:(", "bad regular expression"),
        ("rack:MAX_PER:x", "MAX_PER needs a whole number"),
        ("rack", "write FIELD:OPERATOR[:VALUE]"),
    ):
        result = await cluster.cli("job", "submit", "--constraint", text, "--", "true")
        assert result.code != 0 and says in result.err, (text, result.err)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJob(
            B.SubmitJobRequest(
                spec=B.JobSpec(
                    name="x",
                    instances=1,
                    task=B.TaskTemplate(
                        command={"shell": "true"}, cpus=0.1, mem=16, gpus=float("nan")
                    ),
                )
            )
        )
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
