"""Issue 36, item 10: the SDK's client of the Batch API covers what `agora job` does, found
through the master: jobs with dependencies, control, schedules, owners and the history."""

from __future__ import annotations

import grpc
import pytest
from batch_harness import BatchCluster

from agora.frameworks.batch import BatchClient
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def spec(command: str, **fields) -> B.JobSpec:
    task = B.TaskTemplate(command=C.CommandInfo(shell=command), cpus=0.1, mem=16)
    return B.JobSpec(name=fields.pop("name", "c"), instances=1, task=task, **fields)


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


async def test_the_client_does_what_the_command_line_does(cluster):
    async with await BatchClient.connect(cluster.master.address) as batch:
        assert batch.address == cluster.batch.address
        first = await batch.submit(spec("true", name="build", owner="alice"))
        second = await batch.submit(spec("true", after=[B.Dependency(job="build")]))
        held = await batch.hold(second.job_id)
        assert held.held and held.pending_reason == B.PENDING_HOLD
        await batch.update(second.job_id, priority=3)
        await batch.release(second.job_id)
        events = [e async for e in batch.watch(second.job_id)]
        assert events[-1].job.state == B.JOB_SUCCEEDED and events[-1].job.spec.priority == 3
        assert (await batch.get(first.job_id)).state == B.JOB_SUCCEEDED

        made = await batch.schedule(B.ScheduleSpec(name="hourly", cron="@hourly", job=spec("true")))
        assert made.next_run_at > 0
        assert [s.spec.name for s in await batch.schedules()] == ["hourly"]
        assert (await batch.suspend("hourly")).suspended
        shown = await batch.get_schedule("hourly")
        assert shown.suspended and shown.spec.cron == "@hourly" and shown.next_run_at == 0
        await batch.unschedule("hourly")
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await batch.get_schedule("hourly")
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no schedule 'hourly'" in e.value.details()

        await batch.set_owner_weight("alice", 2)
        assert [(o.name, o.weight) for o in await batch.owners()] == [("alice", 2.0)]
        history = await batch.jobs(states=[B.JOB_SUCCEEDED], owner="alice", include_instances=True)
        assert [j.job_id for j in history] == [first.job_id]
        assert history[0].instances[0].attempts[0].HasField("usage")


async def test_the_client_submits_a_graph_whole(cluster):
    async with await BatchClient.connect(cluster.master.address) as batch:
        last = spec("true", name="last", after=[B.Dependency(job="first")])
        jobs = await batch.submit_graph([last, spec("true", name="first")])
        assert [j.spec.name for j in jobs] == ["first", "last"]  # each after what it waits for
        assert list(jobs[1].waiting_for) == [jobs[0].job_id]
        assert jobs[1].spec.after[0].job == jobs[0].job_id
        await cluster.wait_state(jobs[1].job_id, B.JOB_SUCCEEDED)
