"""Restarting the batch daemon mid-job loses nothing: it re-subscribes with its saved framework
id, learns what its tasks did meanwhile, and the job completes."""

from __future__ import annotations

import asyncio

import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.common.rpc import insecure_channel
from agora.frameworks.batch.store import JobStore
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C
from agora.v1 import operator_pb2, operator_pb2_grpc


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


async def master_task_state(cluster, task_id):
    async with insecure_channel(cluster.master.address) as channel:
        reply = await operator_pb2_grpc.OperatorStub(channel).ListTasks(
            operator_pb2.ListTasksRequest()
        )
    states = [t.state for t in reply.tasks if t.task_id == task_id]
    return states[0] if states else None


async def test_restart_mid_job_loses_nothing_and_the_job_completes(cluster, tmp_path):
    # Each instance runs until its go-file appears, so we decide when each one ends.
    wait_for_go = f"while [ ! -f {tmp_path}/go-$AGORA_INSTANCE ]; do sleep 0.05; done"
    job_id = await cluster.submit(wait_for_go, instances=2, max_retries=3)
    queued = await cluster.submit("true", instances=3, cpus=1.5, gang=True)  # never fits

    async def both_running():
        job = await cluster.job(job_id)
        return (
            job
            if all(i.attempts and i.attempts[-1].state == C.TASK_RUNNING for i in job.instances)
            else None
        )

    before = await eventually_async(both_running, timeout=30, message="2 instances running")
    framework_id = cluster.batch.scheduler.framework_id
    assert framework_id

    await cluster.stop_batch()
    # Instance 0 ends while the daemon is away.
    (tmp_path / "go-0").touch()
    first = before.instances[0].attempts[0].task_id
    await eventually_async(
        lambda: _is(master_task_state(cluster, first), C.TASK_FINISHED),
        timeout=30,
        message="instance 0 finished while batch was down",
    )

    await cluster.start_batch()  # same state dir
    assert cluster.batch.scheduler.framework_id == framework_id
    job = await cluster.job(job_id)  # still known after the restart
    assert job.spec.instances == 2
    await eventually_async(
        lambda: _instance_state(cluster, job_id, 0, B.INSTANCE_SUCCEEDED),
        timeout=30,
        message="instance 0's end learnt after the restart",
    )

    (tmp_path / "go-1").touch()
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    # Neither instance was launched again: the restart cost no attempt.
    assert [len(i.attempts) for i in job.instances] == [1, 1]
    assert [i.attempts[0].task_id for i in job.instances] == [
        i.attempts[0].task_id for i in before.instances
    ]

    held = await cluster.job(queued)
    assert held.state == B.JOB_QUEUED and held.spec.gang

    # The master still has one batch framework, now pointing at the new API address.
    async with insecure_channel(cluster.master.address) as channel:
        reply = await operator_pb2_grpc.OperatorStub(channel).ListFrameworks(
            operator_pb2.ListFrameworksRequest()
        )
    batch = [f for f in reply.frameworks if f.info.name == "batch"]
    assert [f.info.framework_id for f in batch] == [framework_id]
    assert batch[0].info.service_address == cluster.batch.address


async def test_job_submitted_then_daemon_restarted_before_any_offer_still_runs(cluster):
    job_id = await cluster.submit("true", instances=2)
    await cluster.stop_batch()
    await cluster.start_batch()
    await cluster.wait_state(job_id, B.JOB_SUCCEEDED)


async def test_many_instances_restart_mid_run_every_instance_recorded_once(cluster, tmp_path):
    """A big job's updates are written a burst at a time: a restart in the middle of its run
    finds every instance as the API last showed it, and each one runs exactly once."""
    gate = tmp_path / "go"
    script = f'[ "$AGORA_INSTANCE" -lt 40 ] || while [ ! -f {gate} ]; do sleep 0.05; done'
    job_id = await cluster.submit(script, instances=60, cpus=0.05, mem=8)

    async def forty_finished():
        job = await cluster.job(job_id)
        gated = job.instances[40:]
        settled = all(i.state == B.INSTANCE_RUNNING for i in gated)  # no update to come
        return job if job.counts.succeeded == 40 and settled else None

    before = await eventually_async(forty_finished, timeout=60, message="40 finished, 20 running")
    await cluster.stop_batch()
    # On disk as shown: every instance, with the attempt it had.
    store = JobStore(tmp_path / "batch" / "batch.sqlite3")
    try:
        [stored] = [j for j in store.load_jobs() if j.job_id == job_id]
    finally:
        store.close()
    assert list(stored.instances) == list(before.instances)
    assert stored.counts == before.counts

    gate.touch()
    await cluster.start_batch()
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    assert job.counts.succeeded == 60
    assert [len(i.attempts) for i in job.instances] == [1] * 60
    assert [i.attempts[0].task_id for i in job.instances] == [
        i.attempts[0].task_id for i in before.instances
    ]
    assert all(i.attempts[0].state == C.TASK_FINISHED for i in job.instances)


async def _is(coroutine, state):
    return await coroutine == state


async def _instance_state(cluster, job_id, index, state):
    job = await cluster.job(job_id)
    return job.instances[index].state == state


async def test_instance_on_a_lost_agent_is_retried_elsewhere(cluster):
    # The first attempt hangs; any later one exits 0 at once.
    job_id = await cluster.submit('[ "$AGORA_ATTEMPT" = 1 ] && exec sleep 60; true', max_retries=1)

    async def running():
        job = await cluster.job(job_id)
        attempts = job.instances[0].attempts
        return attempts[0] if attempts and attempts[0].state == C.TASK_RUNNING else None

    first = await eventually_async(running, timeout=30, message="first attempt running")
    index = int(first.hostname.removeprefix("host-"))
    # Its agent goes away for good (its task killed with it); the master times it out.
    await cluster.agents[index].stop(kill_tasks=True)
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
    attempts = job.instances[0].attempts
    assert attempts[0].state in (C.TASK_LOST, C.TASK_KILLED)
    assert attempts[1].state == C.TASK_FINISHED
    assert attempts[1].hostname == f"host-{1 - index}"


async def test_job_submit_wait_follows_the_job_across_a_daemon_restart(cluster, tmp_path):
    gate = tmp_path / "go"
    waiting = asyncio.create_task(
        cluster.cli(
            "job",
            "submit",
            "--name",
            "gated",
            "--wait",
            "--",
            f"while [ ! -f {gate} ]; do sleep 0.05; done",
        )
    )

    async def running_job():
        jobs = (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs
        return jobs[0] if jobs and jobs[0].counts.running == 1 else None

    job = await eventually_async(running_job, timeout=30, message="gated job running")
    await cluster.stop_batch()
    await cluster.start_batch()
    gate.touch()
    result = await asyncio.wait_for(waiting, timeout=90)
    assert result.code == 0, result.err
    assert result.out.splitlines()[-1] == f"job {job.job_id} SUCCEEDED"


async def test_master_restart_mid_job_the_job_completes(cluster, tmp_path):
    from batch_harness import FAST_MASTER

    from agora.master import Master, MasterConfig

    wait_for_go = f"while [ ! -f {tmp_path}/go-$AGORA_INSTANCE ]; do sleep 0.05; done"
    job_id = await cluster.submit(wait_for_go, instances=2)

    async def both_running():
        job = await cluster.job(job_id)
        return all(i.attempts and i.attempts[-1].state == C.TASK_RUNNING for i in job.instances)

    await eventually_async(both_running, timeout=30, message="2 instances running")
    port = cluster.master.port
    await cluster.master.stop()
    (tmp_path / "go-0").touch()  # ends while there is no master
    cluster.master = Master(
        MasterConfig(host="127.0.0.1", port=port, state_dir=tmp_path / "master", **FAST_MASTER)
    )
    await cluster.master.start()
    (tmp_path / "go-1").touch()
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
    assert [len(i.attempts) for i in job.instances] == [1, 1]


async def test_daemon_back_after_its_failover_timeout_starts_afresh_and_retries(tmp_path):
    c = BatchCluster(tmp_path, batch_overrides={"failover_timeout": 0.5})
    await c.start()
    try:
        job_id = await c.submit('[ "$AGORA_ATTEMPT" = 1 ] && exec sleep 60; true', max_retries=1)

        async def running():
            job = await c.job(job_id)
            attempts = job.instances[0].attempts
            return attempts and attempts[0].state == C.TASK_RUNNING

        await eventually_async(running, timeout=30, message="first attempt running")
        old_id = c.batch.scheduler.framework_id
        await c.stop_batch()

        async def torn_down():
            async with insecure_channel(c.master.address) as channel:
                reply = await operator_pb2_grpc.OperatorStub(channel).ListFrameworks(
                    operator_pb2.ListFrameworksRequest()
                )
            return all(f.info.framework_id != old_id for f in reply.frameworks)

        await eventually_async(torn_down, timeout=30, message="framework torn down")
        await c.start_batch()  # its saved id is refused: it subscribes afresh
        job = await c.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
        attempts = job.instances[0].attempts
        assert attempts[0].state in (C.TASK_LOST, C.TASK_KILLED)
        assert attempts[1].state == C.TASK_FINISHED
        assert c.batch.scheduler.framework_id not in ("", old_id)
    finally:
        await c.stop()
