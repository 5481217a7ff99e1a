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


async def test_max_per_caps_the_instances_of_each_rack(cluster, tmp_path):
    """rack:MAX_PER:2 over racks r1 (host-0) and r2 (host-1, and the GPU agent, kept for GPU
    jobs): two instances run in each rack, the fifth waits saying why, and takes the place of
    one that ends, in its rack; never three in one rack, by the attempts' own times."""
    gate = tmp_path / "gate"
    gate.mkdir()
    script = f"while [ ! -e {gate}/$AGORA_INSTANCE ]; do sleep 0.05; done"
    job_id = await cli_job(
        cluster, "--instances", "5", "--constraint", "rack:MAX_PER:2", "--", script
    )
    waiting = await wait_reason(cluster, job_id, "constraint")
    assert (
        "[rack, MAX_PER, 2]" in waiting.message and "already runs 2 instance(s)" in waiting.message
    )
    assert hosts(waiting) == ["host-0", "host-0", "host-1", "host-1"]
    on_r1 = next(
        i.index for i in waiting.instances if i.attempts and i.attempts[0].hostname == "host-0"
    )
    (gate / str(on_r1)).touch()  # one of r1's ends: the fifth runs there

    async def fifth_running():
        job = await cluster.job(job_id)
        return job if job.counts.running == 4 and job.counts.succeeded == 1 else None

    job = await eventually_async(fifth_running, timeout=20, message="the fifth instance running")
    assert hosts(job) == ["host-0", "host-0", "host-0", "host-1", "host-1"]  # one ended on host-0
    for index in range(5):
        (gate / str(index)).touch()
    done = await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    rack = {"host-0": "r1", "host-1": "r2", "host-2": "r2"}
    spans = [
        (rack[a.hostname], a.launched_at, a.ended_at) for i in done.instances for a in i.attempts
    ]
    for name, start, _ in spans:
        at_once = [s for s in spans if s[0] == name and s[1] <= start < s[2]]
        assert len(at_once) <= 2, spans


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
