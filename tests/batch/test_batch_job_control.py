"""Issue 36, items 7 and 8: job control (hold, release, requeue, update) and pending reasons.
The reasons' rule alone; then through the batch cluster with real agents and `agora job`:
every reason a user can meet is shown, and each control works, or is refused saying why when
it makes no sense."""

from __future__ import annotations

import time

import grpc
import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.frameworks.batch import pending
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def job(**fields) -> B.Job:
    spec = B.JobSpec(instances=2, gang=fields.pop("gang", False))
    spec.begin_at = fields.pop("begin_at", 0.0)
    return B.Job(
        job_id="job-1",
        state=fields.pop("state", B.JOB_QUEUED),
        spec=spec,
        counts=B.InstanceCounts(pending=fields.pop("pending", 2)),
        **fields,
    )


def reason(j: B.Job, **seen) -> str:
    args = dict(connected=True, room=None, ready=True, last_round=None)
    args.update(seen)
    return pending.name(pending.reason(j, 100.0, **args))


def test_the_first_reason_that_applies_is_given():
    assert reason(job(held=True, waiting_for=["job-0"])) == "hold"
    assert reason(job(waiting_for=["job-0"]), connected=False) == "dependency"
    assert reason(job(begin_at=200.0), connected=False) == "master"
    assert reason(job(begin_at=200.0), room=0) == "begin-time"
    assert reason(job(), room=0, ready=False) == "running-limit"
    assert reason(job(), ready=False) == "retry-backoff"
    assert reason(job(), last_round=B.PENDING_PRIORITY) == "priority"
    assert reason(job(gang=True)) == "gang"
    assert reason(job()) == "resources"
    assert reason(job(pending=0, state=B.JOB_RUNNING)) == ""
    assert reason(job(state=B.JOB_KILLED, held=True)) == ""


@pytest.fixture
async def cluster(tmp_path):
    # One agent of 2 cpus: a job of 2 x 1 cpu fills it.
    c = await BatchCluster(tmp_path, agent_resources=["cpus:2;mem:1024;disk:1024"]).start()
    yield c
    await c.stop()


async def submit(cluster, command="true", **spec) -> str:
    return await cluster.submit(command, **spec)


async def reason_of(cluster, job_id: str) -> str:
    return pending.name((await cluster.job(job_id)).pending_reason)


async def wait_reason(cluster, job_id: str, name: str) -> B.Job:
    async def check():
        got = await cluster.job(job_id)
        return got if pending.name(got.pending_reason) == name else None

    return await eventually_async(check, timeout=20, message=f"{job_id} pending for {name}")


async def test_every_pending_reason_is_shown(cluster):
    blocker = await submit(cluster, "sleep 60", instances=2, cpus=1)
    await cluster.wait_state(blocker, B.JOB_RUNNING)
    waits = await submit(cluster, instances=1, cpus=1)
    await wait_reason(cluster, waits, "resources")

    async def said_why():
        message = (await cluster.job(waits)).message
        return message.startswith("waiting for offers with room for cpus:1")

    await eventually_async(said_why, timeout=20, message="the waiting job says why")
    after = await submit(cluster, after=[B.Dependency(job=waits)])
    assert await reason_of(cluster, after) == "dependency"
    later = await submit(cluster, begin_at=time.time() + 3600)
    assert await reason_of(cluster, later) == "begin-time"
    assert (await cluster.job(later)).message.startswith("waiting for its begin time")
    gang = await submit(cluster, instances=3, cpus=1, gang=True)
    await wait_reason(cluster, gang, "gang")
    await cluster.stub.HoldJob(B.HoldJobRequest(job_id=gang, hold=True))
    assert await reason_of(cluster, gang) == "hold"

    listed = await cluster.cli("job", "list")
    assert listed.code == 0, listed.err
    for name in ("resources", "dependency", "begin-time", "hold"):
        assert name in listed.out
    status = await cluster.cli("job", "status", waits)
    assert "waiting    resources" in status.out

    # A job that fits the agent while it is free, behind one that takes it first.
    await cluster.stub.KillJob(B.KillJobRequest(job_id=blocker))
    await cluster.stub.KillJob(B.KillJobRequest(job_id=waits))
    first = await submit(cluster, "sleep 60", instances=2, cpus=1)
    behind = await submit(cluster, cpus=1)
    await cluster.wait_state(first, B.JOB_RUNNING)
    await wait_reason(cluster, behind, "priority")

    # An array at its running limit, and a retry in its backoff.
    await cluster.stub.KillJob(B.KillJobRequest(job_id=first))
    await cluster.stub.KillJob(B.KillJobRequest(job_id=behind))
    array = await submit(cluster, "sleep 60", instances=3, max_running=1)
    await wait_reason(cluster, array, "running-limit")
    await cluster.stub.KillJob(B.KillJobRequest(job_id=array))
    cluster.batch.scheduler.backoff = type(cluster.batch.scheduler.backoff)(30.0, 2.0, 60.0)
    failing = await submit(cluster, "exit 1", max_retries=3)
    await wait_reason(cluster, failing, "retry-backoff")


async def test_hold_update_and_release_a_queued_job(cluster):
    blocker = await submit(cluster, "sleep 60", instances=2, cpus=1)
    await cluster.wait_state(blocker, B.JOB_RUNNING)
    queued = await submit(cluster, "echo $AGORA_INSTANCE", cpus=0.5)
    await wait_reason(cluster, queued, "resources")

    held = await cluster.cli("job", "hold", queued)
    assert held.code == 0, held.err
    assert (await cluster.job(queued)).held
    updated = await cluster.cli(
        "job", "update", queued, "--instances", "3", "--priority", "7", "--time-limit", "5m"
    )
    assert updated.code == 0, updated.err
    assert "priority 7, 3 instance(s), time limit 300 s" in updated.out
    job = await cluster.job(queued)
    assert len(job.instances) == 3 and job.counts.pending == 3

    # Still held when the room frees up: nothing of it starts until it is released.
    await cluster.stub.KillJob(B.KillJobRequest(job_id=blocker))
    await cluster.wait_state(blocker, B.JOB_KILLED)
    await eventually_async(
        lambda: not cluster.batch.scheduler.jobs[blocker].counts.running, timeout=20
    )
    assert (await cluster.job(queued)).state == B.JOB_QUEUED
    released = await cluster.cli("job", "release", queued)
    assert released.code == 0, released.err
    done = await cluster.wait_state(queued, B.JOB_SUCCEEDED)
    assert len(done.instances) == 3

    # Once started or ended, none of these makes sense: refused, saying why.
    for request, method in (
        (B.HoldJobRequest(job_id=queued, hold=True), "HoldJob"),
        (B.UpdateJobRequest(job_id=queued, priority=1), "UpdateJob"),
        (B.RequeueJobRequest(job_id=queued), "RequeueJob"),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await getattr(cluster.stub, method)(request)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "is SUCCEEDED" in e.value.details()
    bad = await cluster.cli("job", "update", queued)
    assert bad.code != 0 and "nothing to change" in bad.err


async def test_an_update_is_checked_as_a_submission(cluster):
    later = await submit(cluster, begin_at=time.time() + 3600)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.UpdateJob(B.UpdateJobRequest(job_id=later, instances=0))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "instances must be between 1 and" in e.value.details()
    await cluster.stub.UpdateJob(B.UpdateJobRequest(job_id=later, instances=5))
    # Shrunk again, and the dropped instances stay dropped across a daemon restart.
    await cluster.stub.UpdateJob(B.UpdateJobRequest(job_id=later, instances=2))
    await cluster.stop_batch()
    await cluster.start_batch()
    job = await cluster.job(later)
    assert len(job.instances) == 2 and job.spec.instances == 2 and job.counts.pending == 2


async def test_requeue_runs_a_running_jobs_instances_again(cluster):
    running = await submit(cluster, "sleep 60", instances=2, cpus=0.5, max_retries=1)
    await eventually_async(
        lambda: (
            cluster.batch.scheduler.jobs[running].counts.running == 2
            and all(
                i.state == B.INSTANCE_RUNNING
                for i in cluster.batch.scheduler.jobs[running].instances
            )
        ),
        timeout=20,
        message="both instances running",
    )
    first_tasks = {i.attempts[0].task_id for i in (await cluster.job(running)).instances}
    requeued = await cluster.cli("job", "requeue", running)
    assert requeued.code == 0, requeued.err

    async def relaunched():
        job = await cluster.job(running)
        ok = all(
            len(i.attempts) == 2
            and i.state == B.INSTANCE_RUNNING
            and i.failures == 0
            and i.attempts[0].state == C.TASK_KILLED  # the first run, killed for the requeue
            for i in job.instances
        )
        return job if ok else None

    job = await eventually_async(relaunched, timeout=30, message="instances running again")
    assert {i.attempts[0].task_id for i in job.instances} == first_tasks
    assert job.state == B.JOB_RUNNING and job.counts.failed == 0
