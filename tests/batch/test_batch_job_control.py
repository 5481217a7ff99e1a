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

    # A job that fits the agent once it is free, behind one that takes it first. Both wait
    # before the agent frees, so one round of offers sees them both: were `first` to launch
    # before `behind` arrived, `behind` would head the queue and rightly wait for resources.
    await cluster.stub.KillJob(B.KillJobRequest(job_id=waits))
    first = await submit(cluster, "sleep 60", instances=2, cpus=1)
    behind = await submit(cluster, cpus=1)
    await wait_reason(cluster, behind, "resources")
    await cluster.stub.KillJob(B.KillJobRequest(job_id=blocker))
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
    assert held.out.startswith(f"job {queued} held"), held.out
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


async def test_releasing_a_job_that_is_not_held_is_refused_saying_what_to_do(cluster):
    later = await submit(cluster, begin_at=time.time() + 3600)  # queued, and stays so
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.HoldJob(B.HoldJobRequest(job_id=later, hold=False))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details() == (
        f"job {later} is not held, so there is nothing to release: it starts when offers "
        "allow (`agora job status` says what it waits for; `agora job hold` holds it)"
    )
    released = await cluster.cli("job", "release", later)
    assert released.code == 1 and f"job {later} is not held" in released.err, released.err
    # Held, it is released once; the second release is refused the same way.
    assert (await cluster.cli("job", "hold", later)).code == 0
    assert (await cluster.cli("job", "release", later)).code == 0
    again = await cluster.cli("job", "release", later)
    assert again.code == 1 and "nothing to release" in again.err
    job = await cluster.job(later)
    assert not job.held and job.pending_reason == B.PENDING_BEGIN_TIME


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


async def test_a_held_job_follows_its_dependencies_across_a_restart(tmp_path):
    """A held job that waits for another is still told when that one ends, after a restart
    too, and is queued when released (it was once left WAITING for ever)."""
    from agora.frameworks.batch.scheduler import BatchScheduler
    from agora.frameworks.batch.store import JobStore

    path = tmp_path / "batch.sqlite3"
    task = B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16)
    scheduler = BatchScheduler(JobStore(path))
    first = scheduler.submit(B.JobSpec(name="a", instances=1, task=task))
    after = B.Dependency(job=first.job_id, condition=B.AFTER_ANY)
    second = scheduler.submit(B.JobSpec(name="b", instances=1, task=task, after=[after]))
    scheduler.hold(second.job_id, True)
    scheduler.close()
    scheduler.store.close()

    scheduler = BatchScheduler(JobStore(path))
    await scheduler.kill(first.job_id)
    waiting = scheduler.get(second.job_id)
    assert list(waiting.waiting_for) == [] and waiting.held
    assert waiting.message.startswith("held") and waiting.state == B.JOB_QUEUED
    assert second.job_id not in scheduler._waiting.job_ids()  # held: nothing placed
    scheduler.hold(second.job_id, False)
    assert second.job_id in scheduler._waiting.job_ids()
    scheduler.close()
    scheduler.store.close()


def test_a_requeued_instances_old_task_is_to_be_killed_until_it_ends():
    from agora.frameworks.batch import state as st

    job = st.new_job("job-1", B.JobSpec(name="r", instances=2), 1, 0.0)
    for index in range(2):
        st.record_launch(job, index, agent_id="a", now=1.0)
    st.requeue(job, 2.0)
    assert [a.task_id for a in st.superseded_attempts(job)] == ["job-1.0.1", "job-1.1.1"]
    st.record_launch(job, 0, agent_id="a", now=3.0)  # relaunched before the kill went out
    assert [a.task_id for a in st.superseded_attempts(job)] == ["job-1.0.1", "job-1.1.1"]
    ended = C.TaskStatus(task_id="job-1.0.1", state=C.TASK_KILLED)
    st.apply_update(job, 0, ended, now=4.0, backoff=st.Backoff())
    assert [a.task_id for a in st.superseded_attempts(job)] == ["job-1.1.1"]


async def test_a_job_says_when_the_batch_daemon_has_no_master(cluster):
    blocker = await submit(cluster, "sleep 60", instances=2, cpus=1)
    await cluster.wait_state(blocker, B.JOB_RUNNING)
    waits = await submit(cluster, cpus=1)
    await wait_reason(cluster, waits, "resources")
    await cluster.master.stop()
    job = await wait_reason(cluster, waits, "master")
    assert job.message.startswith("the batch daemon lost the master")
