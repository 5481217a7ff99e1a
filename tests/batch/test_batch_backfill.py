"""Issue 36, item 3 (backfill): the first job left waiting gets a reservation where our own
tasks' declared time limits say room for it will free up; until then a later job may use that
room only with an instance that ends before. The rule alone, then through the batch cluster:
a big job is not starved by a stream of small ones."""

from __future__ import annotations

import asyncio

from batch_harness import BatchCluster
from harness import eventually_async

from agora.frameworks.batch.backfill import reserve
from agora.v1 import batch_pb2 as B


def test_the_head_gets_the_earliest_agent_where_declared_ends_make_room():
    needs = {"cpus": 2.0}
    free_now = {"a": {"cpus": 1.0}, "b": {"cpus": 0.0}}
    ends = {"a": [(150.0, {"cpus": 1.0})], "b": [(120.0, {"cpus": 1.0}), (130.0, {"cpus": 1.0})]}
    r = reserve("big", needs, free_now, ends, now=100.0)
    assert (r.agent_id, r.at) == ("b", 130.0)
    assert r.keep == {"cpus": 0.0}  # b's both cores come from ends: nothing offered is kept
    # On a, a core is free now and one frees at 150: the free one is kept for the head.
    only_a = reserve("big", needs, free_now, {"a": ends["a"]}, now=100.0)
    assert (only_a.agent_id, only_a.at, only_a.keep) == ("a", 150.0, {"cpus": 1.0})
    # A small instance may take the kept core only if its limit ends it by 150.
    assert only_a.allows({"cpus": 1.0}, {"cpus": 1.0}, limit_seconds=40, now=100.0)
    assert not only_a.allows({"cpus": 1.0}, {"cpus": 1.0}, limit_seconds=60, now=100.0)
    assert not only_a.allows({"cpus": 1.0}, {"cpus": 1.0}, limit_seconds=0, now=100.0)
    assert only_a.allows({"cpus": 3.0}, {"cpus": 1.0}, limit_seconds=0, now=100.0)  # spare room
    # No declared end: no reservation can be proved.
    assert reserve("big", needs, free_now, {}, now=100.0) is None


async def test_a_big_job_is_not_starved_by_a_stream_of_small_ones(tmp_path):
    cluster = await BatchCluster(tmp_path, agent_resources=["cpus:2;mem:1024;disk:1024"]).start()
    try:
        first = await cluster.submit("sleep 2", cpus=1, time_limit_seconds=4)
        await cluster.wait_state(first, B.JOB_RUNNING)
        big = await cluster.submit("true", cpus=2, name="big")
        said: list[str] = []

        async def watch():
            async for event in cluster.stub.WatchJob(B.WatchJobRequest(job_id=big)):
                said.append(event.job.message)

        watching = asyncio.create_task(watch())
        # Each small instance would take the core the big job waits for as soon as it frees.
        small = await cluster.submit(
            "sleep 1", instances=30, cpus=1, time_limit_seconds=5, name="small"
        )
        done = await cluster.wait_state(big, B.JOB_SUCCEEDED, timeout=60)
        started = done.instances[0].attempts[0].launched_at
        small_job = await cluster.job(small)
        later = [
            i for i in small_job.instances if not i.attempts or i.attempts[0].launched_at > started
        ]
        # The big job ran long before the small ones were through.
        assert len(later) >= 20, len(later)
        await asyncio.wait_for(watching, 10)
        assert any("room reserved on host-0 from" in message for message in said), said
        await cluster.stub.KillJob(B.KillJobRequest(job_id=small))
    finally:
        await cluster.stop()


async def test_a_small_job_runs_first_only_if_its_limit_ends_it_before_the_big_one_could(
    tmp_path,
):
    """From the small jobs' side: one core is free while a big job waits for both, which the
    running job's time limit says it will have in 5 s. A small job whose 1 s limit ends it by
    then runs at once, in that core; one without a limit, or with a limit past that time,
    waits until the big job has started."""
    cluster = await BatchCluster(tmp_path, agent_resources=["cpus:2;mem:1024;disk:1024"]).start()
    try:
        first = await cluster.submit("sleep 3", cpus=1, time_limit_seconds=5, name="first")
        await cluster.wait_state(first, B.JOB_RUNNING)
        big = await cluster.submit("true", cpus=2, name="big")

        async def waits():
            job = await cluster.job(big)
            return job.pending_reason == B.PENDING_RESOURCES

        await eventually_async(waits, timeout=20, message="the big job waiting for room")
        unlimited = await cluster.submit("true", cpus=1, name="unlimited")
        too_long = await cluster.submit("true", cpus=1, time_limit_seconds=60, name="too-long")
        fits = await cluster.submit("sleep 0.2", cpus=1, time_limit_seconds=1, name="fits")

        done = await cluster.wait_state(fits, B.JOB_SUCCEEDED, timeout=20)
        big_done = await cluster.wait_state(big, B.JOB_SUCCEEDED, timeout=30)
        big_start = big_done.instances[0].attempts[0].launched_at
        first_done = await cluster.wait_state(first, B.JOB_SUCCEEDED)
        # It ran beside the first job, in the core the big one waited for, and was gone
        # before the big one started.
        assert done.instances[0].attempts[0].launched_at < first_done.ended_at
        assert done.ended_at <= big_start
        for job_id in (unlimited, too_long):
            later = await cluster.wait_state(job_id, B.JOB_SUCCEEDED, timeout=30)
            assert later.instances[0].attempts[0].launched_at >= big_start
    finally:
        await cluster.stop()
