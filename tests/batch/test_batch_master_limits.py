"""Issue 36, item 9: a job is checked at submission against the limits the master checks at
launch (names, labels, command and environment sizes), and a launch the master still refuses
gives its offers back at once and fails the job with the master's reason, rather than the job
waiting for ever while its offers sit out their timeout."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.common import Resources
from agora.frameworks.batch.refusals import blamed_jobs
from agora.frameworks.sdk import Driver, Framework, GrpcSchedulerTransport, framework_info
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def test_a_refusal_blames_the_job_whose_task_it_names_or_all_for_the_user():
    tasks = {"job-a.1.1": "job-a", "job-b.10.1": "job-b", "job-a.2.1": "job-a"}
    named = {"task_id": "job-b.10.1"}
    assert blamed_jobs("INVALID_REQUEST", named, tasks) == {"job-b"}
    assert blamed_jobs("PERMISSION_DENIED", {"user": "root"}, tasks) == {"job-a", "job-b"}
    # A task refusal that names no task blames a job only if it is the launch's only one.
    assert blamed_jobs("INVALID_REQUEST", {}, tasks) == set()
    assert blamed_jobs("INVALID_REQUEST", {}, {"job-a.1.1": "job-a"}) == {"job-a"}
    # Routine refusals are no job's fault: the instances wait for the next offers.
    assert blamed_jobs("OFFER_GONE", named, tasks) == set()
    assert blamed_jobs(None, {}, tasks) == set()


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


def spec(name="limits", instances=1, labels=None, **task) -> B.JobSpec:
    return B.JobSpec(
        name=name,
        instances=instances,
        labels=labels or {},
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16, **task),
    )


@pytest.mark.parametrize(
    "job, says",
    [
        # 250 characters pass the API's own limit, but the 100th task's name is "...-99".
        (spec(name="n" * 254, instances=100), "task job-"),
        (spec(env={"BIG": "x" * 70_000}), "command.environment: 70"),
        (spec(labels={"k": "v" * 5000}), "label 'k'"),
    ],
)
async def test_a_job_the_master_would_refuse_is_refused_at_submission(cluster, job, says):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJob(B.SubmitJobRequest(spec=job))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the master would refuse this job's tasks" in e.value.details()
    assert says in e.value.details()
    assert len(e.value.details()) < 400  # the value is shown truncated, never whole
    assert (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs == []


async def test_a_launch_the_master_refuses_fails_the_job_and_frees_its_offers(cluster):
    # The master allows a kill grace of at most 300 s (--max-kill-grace), which the batch
    # daemon cannot know: the Accept is refused.
    reply = await cluster.stub.SubmitJob(
        B.SubmitJobRequest(spec=spec(instances=3, kill_grace_period_seconds=900))
    )
    failed = await cluster.wait_state(reply.job_id, B.JOB_FAILED, timeout=30)
    assert failed.message.startswith("the master refused its tasks: task ")
    assert "the longest allowed is 300 s" in failed.message
    assert failed.counts.failed == 3 and not any(i.attempts for i in failed.instances)

    core = cluster.master.core
    framework_id = cluster.batch.scheduler.framework_id

    def holds_no_offers() -> bool:
        return not [o for o in core.reg.offers.values() if o.framework_id == framework_id]

    # Given back at once (the offer timeout is 60 s): other frameworks are offered them.
    await eventually_async(holds_no_offers, timeout=10, message="the refused offers given back")

    # The next job, a good one, runs on the same agents.
    good = await cluster.stub.SubmitJob(B.SubmitJobRequest(spec=spec()))
    await cluster.wait_state(good.job_id, B.JOB_SUCCEEDED, timeout=30)


async def test_a_job_the_master_may_not_run_as_its_user_fails_at_its_first_launch(tmp_path):
    """The users the master's ACLs allow (run_tasks) cannot be checked at submission: a batch
    job names no user (every task runs as the batch daemon's --user), and the master has no
    call that answers "may this framework run tasks as U" (its ACLs are re-read on SIGHUP
    without telling anyone). So the first launch the master refuses for the user fails the
    job, with the master's reason, and gives its offers back at once."""
    acls = tmp_path / "acls.yaml"
    acls.write_text("permissive: true\nrun_tasks: [{principals: [ANONYMOUS], users: [nobody]}]\n")
    cluster = await BatchCluster(
        tmp_path, master_overrides={"acls_path": acls}, batch_overrides={"user": "root"}
    ).start()
    try:
        reply = await cluster.stub.SubmitJob(B.SubmitJobRequest(spec=spec(instances=2)))
        failed = await cluster.wait_state(reply.job_id, B.JOB_FAILED, timeout=30)
        assert failed.message == (
            "the master refused its tasks: an anonymous caller may not run as user 'root': "
            f"no rule of {acls} allows it"
        )
        assert failed.counts.failed == 2 and not any(i.attempts for i in failed.instances)
        core = cluster.master.core
        framework_id = cluster.batch.scheduler.framework_id
        await eventually_async(
            lambda: not [o for o in core.reg.offers.values() if o.framework_id == framework_id],
            timeout=10,
            message="the refused offers given back",
        )
    finally:
        await cluster.stop()


class Other(Framework):
    """A second framework: wants nothing until told to, then keeps the offers it gets."""

    def __init__(self) -> None:
        self.wanting = False
        self.offers: list[C.Offer] = []
        self.suppressed = asyncio.Event()

    async def on_subscribed(self, driver, framework_id) -> None:
        await driver.suppress()
        self.suppressed.set()

    async def on_offers(self, driver, offers) -> None:
        if self.wanting:
            self.offers.extend(offers)
        else:  # made before the suppress took effect: given back
            await driver.decline(offers, refuse_seconds=0)


async def test_a_refused_launch_gives_its_offers_to_another_framework_promptly(tmp_path):
    """The batch framework holds the only agent's offer when the master refuses its launch.
    Another framework that wants offers then gets the agent's resources at its next
    allocation, not after the 60 s offer timeout: 10 s is the bound here."""
    cluster = await BatchCluster(
        tmp_path,
        agent_resources=["cpus:2;mem:1024;disk:1024"],
        master_overrides={"offer_timeout_seconds": 60.0},
    ).start()
    other = Other()
    driver = Driver(other, GrpcSchedulerTransport(cluster.master.address), framework_info("other"))
    running = asyncio.create_task(driver.run())
    try:
        await asyncio.wait_for(other.suppressed.wait(), 20)
        reply = await cluster.stub.SubmitJob(
            B.SubmitJobRequest(spec=spec(instances=2, kill_grace_period_seconds=900))
        )
        failed = await cluster.wait_state(reply.job_id, B.JOB_FAILED, timeout=30)
        assert "the longest allowed is 300 s" in failed.message

        other.wanting = True
        await driver.revive()

        def offered_whole_agent() -> bool:
            got = Resources()
            for offer in other.offers:
                got = got + Resources.from_proto(offer.resources)
            return got.scalar("cpus") == 2 and got.scalar("mem") == 1024

        await eventually_async(
            offered_whole_agent, timeout=10, message="the other framework offered the agent"
        )
    finally:
        driver.stop()
        await asyncio.wait_for(running, 10)
        await cluster.stop()
