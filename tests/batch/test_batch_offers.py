"""What the batch framework refuses, and for how long, now that a refusal hides only an offer
contained in what was refused (Mesos' decline filters): the test plays the master through the
SDK's in-memory transport, then a real cluster checks that long refusals cost no launches."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.store import JobStore
from agora.frameworks.sdk import Driver, framework_info
from agora.frameworks.sdk.testing import (
    MemoryTransport,
    make_offer,
    offers_event,
    subscribed,
    update_event,
)
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C

TIMEOUT = 10.0


def job_spec(instances: int, cpus: float = 1.0) -> B.JobSpec:
    return B.JobSpec(
        name="j",
        instances=instances,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=cpus, mem=64),
    )


@pytest.fixture
async def framework():
    scheduler = BatchScheduler(
        JobStore(None),
        decline_refuse_seconds=7.0,
        unfit_refuse_seconds=40.0,
        idle_refuse_seconds=30,
    )
    transport = MemoryTransport(timeout=TIMEOUT)
    driver = Driver(scheduler, transport, framework_info("batch"))
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"))
    await transport.next_call("Suppress")  # nothing to run yet
    yield scheduler, transport, stream
    driver.stop()
    await asyncio.wait_for(task, TIMEOUT)
    scheduler.close()


async def test_what_a_launch_leaves_is_refused_while_work_waits(framework):
    scheduler, transport, stream = framework
    scheduler.submit(job_spec(3))
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    assert len(accept.operations[0].launch.task_infos) == 2
    # The third instance waits: the memory left on a1 is refused, for --decline-refuse.
    assert accept.filters.refuse_seconds == 7.0
    # An offer too small for the waiting instance is refused for --unfit-refuse: only new
    # work (a revive) or more room there (offered at once) could make it of use.
    stream.send(offers_event(make_offer("o-2", "a2", "cpus:0.5;mem:1024")))
    _, decline = await transport.next_call("Decline")
    assert list(decline.offer_ids) == ["o-2"] and decline.filters.refuse_seconds == 40.0


async def test_the_last_launch_refuses_for_the_masters_default_and_suppresses(framework):
    scheduler, transport, stream = framework
    scheduler.submit(job_spec(1))
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    assert not accept.HasField("filters")  # nothing waits: the master's default
    await transport.next_call("Suppress")


async def test_new_work_revives_though_work_already_waits(framework):
    """Not suppressed (a job waits), the framework still revives for a new job: at the master
    a Revive clears its decline filters (tests/master/test_core_scenarios.py), so a1, refused
    for 40 s (too small for the waiting job), is offered again at once and the new job runs
    there."""
    scheduler, transport, stream = framework
    scheduler.submit(job_spec(1, cpus=4))  # fits no offer below
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    _, decline = await transport.next_call("Decline")
    assert decline.filters.refuse_seconds == 40.0
    revives = len(transport.calls_of("Revive"))
    job = scheduler.submit(job_spec(1))  # a job that a1 could hold: asked for again at once
    await transport.next_call("Revive")
    assert len(transport.calls_of("Revive")) == revives + 1
    stream.send(offers_event(make_offer("o-2", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    assert [t.task_id for t in accept.operations[0].launch.task_infos] == [f"{job.job_id}.0.1"]


@pytest.mark.parametrize("state", [C.TASK_DROPPED, C.TASK_UNKNOWN], ids=["dropped", "unknown"])
async def test_a_retry_due_at_once_revives_though_work_already_waits(framework, state):
    """An attempt dropped (or unknown to the master) uses no retry: its instance is due again at
    once, with no backoff timer to revive for it. What the launch left of a1 was refused for
    7 s while the third instance waited; without a Revive (which clears that filter at the
    master) the retry would wait those 7 s for the agent its attempt never ran on."""
    scheduler, transport, stream = framework
    job = scheduler.submit(job_spec(3))
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    assert accept.filters.refuse_seconds == 7.0  # instance 2 waits: not suppressed
    dropped = accept.operations[0].launch.task_infos[0].task_id
    assert dropped == f"{job.job_id}.0.1"
    stream.send(update_event(dropped, state, uuid=b"u-1", agent_id="a1"))
    await transport.next_call("Revive")
    assert job.instances[0].failures == 0 and job.instances[0].state == B.INSTANCE_PENDING
    # The master offers a1's free cpu again: the retry (lowest index first) takes it.
    stream.send(offers_event(make_offer("o-2", "a1", "cpus:1;mem:1024")))
    _, accept = await transport.next_call("Accept")
    assert [t.task_id for t in accept.operations[0].launch.task_infos] == [f"{job.job_id}.0.2"]


async def test_retries_due_at_once_in_one_burst_send_one_revive(framework):
    """Each retry due at once asks for a revive; those asked before it goes out share it (an
    agent dropping many launches costs the master one Revive, not one per task)."""
    scheduler, transport, stream = framework
    job = scheduler.submit(job_spec(3))
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    revives = len(transport.calls_of("Revive"))
    for task in accept.operations[0].launch.task_infos:  # one turn of the loop
        status = C.TaskStatus(task_id=task.task_id, state=C.TASK_DROPPED, agent_id="a1")
        await scheduler.on_update(scheduler.driver, status)
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-2", "a1", "cpus:2;mem:1024")))
    _, accept = await transport.next_call("Accept")
    launched = [t.task_id for t in accept.operations[0].launch.task_infos]
    assert launched == [f"{job.job_id}.0.2", f"{job.job_id}.1.2"]
    assert len(transport.calls_of("Revive")) == revives + 1


async def test_long_refusals_do_not_slow_a_job_whose_tasks_free_what_the_next_needs(tmp_path):
    """Two agents whose memory outlasts their CPUs (as `agora job submit` against agents of
    cpus:1;mem:1024): every launch leaves memory that is refused for an hour, yet each task
    that ends frees CPUs that come back at once, and the job runs through."""
    cluster = BatchCluster(
        tmp_path,
        agent_resources=["cpus:1;mem:1024", "cpus:1;mem:1024"],
        batch_overrides={"decline_refuse_seconds": 3600.0, "idle_refuse_seconds": 3600.0},
    )
    await cluster.start()
    try:
        job_id = await cluster.submit("true", instances=30, cpus=0.5, mem=32)
        job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=60)
        assert job.counts.succeeded == 30
        # Idle now (suppressed, its last offers refused for an hour): new work still runs.
        again = await cluster.submit("true", instances=2, cpus=0.5, mem=32)
        await cluster.wait_state(again, B.JOB_SUCCEEDED, timeout=60)
    finally:
        await cluster.stop()


async def test_a_launch_the_master_refuses_is_said_in_the_jobs_message(framework):
    """A job the master will not run (an ACL, say) must not sit QUEUED with nothing said
    where its owner looks (`agora job status`, `--wait`): the refusal stays in the job's
    message until a launch of it works."""
    scheduler, transport, stream = framework
    job = scheduler.submit(job_spec(1))
    await transport.next_call("Revive")
    why = "batch may not run tasks as user 'root'"
    transport.fail_next("Accept", grpc.StatusCode.PERMISSION_DENIED, why)
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    await transport.next_call("Accept")

    def refused():
        shown = scheduler.get(job.job_id)
        return shown if "refused" in shown.message else None

    shown = await eventually_async(refused, message="the refusal in the job's message")
    assert f"the master refused its last launch: {why}" in shown.message
    assert shown.counts.pending == 1
    stream.send(offers_event(make_offer("o-2", "a1", "cpus:2;mem:1024")))
    await transport.next_call("Accept")  # allowed this time: the refusal is no longer said

    def launched_now():
        shown = scheduler.get(job.job_id)
        return shown if shown.counts.pending == 0 else None

    launched = await eventually_async(launched_now, message="the instance launched")
    assert "refused" not in launched.message


async def _accept_fails(framework, code: grpc.StatusCode, message: str) -> None:
    """One instance submitted, offered o-1, and its Accept answered with `code`."""
    scheduler, transport, stream = framework
    scheduler.submit(job_spec(1))
    await transport.next_call("Revive")
    transport.fail_next("Accept", code, message)
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:2;mem:1024")))
    await transport.next_call("Accept")


async def test_a_refused_launch_revives_for_its_instances(framework):
    """Instances whose launch the master refused (an offer taken meanwhile) wait again: the
    framework revives, so scraps it refused for --unfit-refuse come back for them too."""
    await _accept_fails(framework, grpc.StatusCode.FAILED_PRECONDITION, "offer o-1 is gone")
    _, transport, _ = framework
    _, revive = await transport.next_call("Revive")
    assert revive.wants.resources  # with what waits again


async def test_a_launch_of_unknown_outcome_gives_its_offers_back(framework):
    """The Accept may never have reached the master: its offers would stay out, covering what
    the framework said it wants, until they time out. Declined at once (a decline of offers
    the Accept used is skipped by the master)."""
    await _accept_fails(framework, grpc.StatusCode.UNAVAILABLE, "connection reset")
    _, transport, _ = framework
    _, decline = await transport.next_call("Decline")
    assert list(decline.offer_ids) == ["o-1"]
    assert decline.filters.HasField("refuse_seconds") and decline.filters.refuse_seconds == 0
