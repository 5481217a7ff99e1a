"""What the batch framework says is on disk: an update is written before it is acknowledged,
and the Batch API shows or changes nothing it could not write. The test plays the master
through the SDK's in-memory transport over a real SQLite file whose writes it can refuse."""

from __future__ import annotations

import asyncio
import sqlite3

import grpc
import pytest

from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.service import BatchService
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
from agora.v1 import batch_pb2_grpc
from agora.v1 import common_pb2 as C

TIMEOUT = 10.0
# What the Batch API answers while the store refuses writes.
CANNOT_WRITE = "cannot write the job store (attempt to write a readonly database): try again"


class ReadOnlyWhenAsked(JobStore):
    """A job store whose writes fail while `refuse_writes` is on, as SQLite fails them on a
    full or read-only disk ("attempt to write a readonly database")."""

    def refuse_writes(self, refuse: bool = True) -> None:
        self._db.execute(f"PRAGMA query_only = {'ON' if refuse else 'OFF'}")


class RecordingScheduler(BatchScheduler):
    """Puts the outcome of each before_acknowledging in `durable` (None, or what it raised):
    the test waits for the driver's attempt instead of sleeping."""

    def __init__(self, store: JobStore) -> None:
        super().__init__(store)
        self.durable: asyncio.Queue[BaseException | None] = asyncio.Queue()

    async def before_acknowledging(self, driver: Driver) -> None:
        try:
            await super().before_acknowledging(driver)
        except Exception as e:
            self.durable.put_nowait(e)
            raise
        self.durable.put_nowait(None)


def job_spec(instances: int = 1) -> B.JobSpec:
    return B.JobSpec(
        name="j",
        instances=instances,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=1, mem=64),
    )


def on_disk(path) -> dict[str, B.Job]:
    """The jobs as a restarted daemon would load them (a connection of its own)."""
    store = JobStore(path)
    try:
        return {job.job_id: job for job in store.load_jobs()}
    finally:
        store.close()


@pytest.fixture
async def framework(tmp_path):
    path = tmp_path / "batch.sqlite3"
    store = ReadOnlyWhenAsked(path)
    scheduler = RecordingScheduler(store)
    transport = MemoryTransport(timeout=TIMEOUT)
    driver = Driver(scheduler, transport, framework_info("batch"))
    task = asyncio.create_task(driver.run())
    stream = await transport.next_stream()
    stream.send(subscribed("fw-1"))
    await transport.next_call("Suppress")  # nothing to run yet
    yield scheduler, transport, stream, store
    store.refuse_writes(False)
    driver.stop()
    await asyncio.wait_for(task, TIMEOUT)
    scheduler.close()
    store.close()


async def test_an_update_is_acknowledged_only_once_it_is_on_disk(framework):
    scheduler, transport, stream, store = framework
    job = scheduler.submit(job_spec())
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:1;mem:1024")))
    _, accept = await transport.next_call("Accept")
    task_id = accept.operations[0].launch.task_infos[0].task_id

    store.refuse_writes()
    stream.send(update_event(task_id, C.TASK_FINISHED, uuid=b"u-1", agent_id="a1"))
    assert isinstance(await asyncio.wait_for(scheduler.durable.get(), TIMEOUT), sqlite3.Error)
    assert job.state == B.JOB_SUCCEEDED  # applied in memory, but not written: not acknowledged
    assert transport.calls_of("Acknowledge") == []
    assert on_disk(store.path)[job.job_id].instances[0].state == B.INSTANCE_LAUNCHED

    # The disk recovers; the agent, never acknowledged, sends the update again.
    store.refuse_writes(False)
    stream.send(update_event(task_id, C.TASK_FINISHED, uuid=b"u-1", agent_id="a1"))
    assert await asyncio.wait_for(scheduler.durable.get(), TIMEOUT) is None
    _, ack = await transport.next_call("Acknowledge")
    assert (ack.task_id, ack.uuid) == (task_id, b"u-1")
    assert len(transport.calls_of("Acknowledge")) == 1
    stored = on_disk(store.path)[job.job_id]
    assert stored.state == B.JOB_SUCCEEDED
    assert stored.instances[0].state == B.INSTANCE_SUCCEEDED


@pytest.fixture
async def api(framework):
    """The framework above with its Batch API served on a local port (no master to ask for
    agent sizes: every submission is accepted)."""
    scheduler, transport, stream, store = framework
    server = grpc.aio.server()
    batch_pb2_grpc.add_BatchServicer_to_server(BatchService(scheduler, None), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield batch_pb2_grpc.BatchStub(channel), scheduler, transport, stream, store
    await channel.close()
    await server.stop(None)


async def unavailable(call) -> None:
    """Awaits the call (or reads the stream's first message) and checks it was refused as a
    store that cannot be written."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await (call.read() if hasattr(call, "read") else call)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == CANNOT_WRITE


async def test_a_submission_that_cannot_be_stored_is_refused_and_changes_nothing(api):
    stub, scheduler, transport, _, store = api
    revives = len(transport.calls_of("Revive"))
    store.refuse_writes()
    await unavailable(stub.SubmitJob(B.SubmitJobRequest(spec=job_spec())))
    assert scheduler.jobs == {} and on_disk(store.path) == {}
    assert not scheduler.has_ready_work()
    assert len(transport.calls_of("Revive")) == revives  # nothing asked offers for it

    store.refuse_writes(False)
    reply = await stub.SubmitJob(B.SubmitJobRequest(spec=job_spec()))
    assert reply.job.sequence == 1  # the refused one took no place in the queue
    assert on_disk(store.path)[reply.job_id].state == B.JOB_QUEUED
    await transport.next_call("Revive")


async def test_a_graph_that_cannot_be_stored_is_refused_whole(api):
    """SubmitJobs writes its jobs in one commit: when it fails, none of them is in memory or
    on disk, and the next graph takes the first places in the queue."""
    stub, scheduler, transport, _, store = api
    first = job_spec()
    first.name = "first"
    then = job_spec()
    then.name = "then"
    then.after.add(job="first")
    graph = B.SubmitJobsRequest(specs=[then, first])
    store.refuse_writes()
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.SubmitJobs(graph)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert info.value.details() == f"{CANNOT_WRITE}; no job of the graph was submitted"
    assert scheduler.jobs == {} and on_disk(store.path) == {}

    store.refuse_writes(False)
    jobs = (await stub.SubmitJobs(graph)).jobs
    assert [(j.spec.name, j.sequence) for j in jobs] == [("first", 1), ("then", 2)]
    stored = on_disk(store.path)
    assert stored[jobs[1].job_id].waiting_for == [jobs[0].job_id]


async def test_a_kill_that_cannot_be_stored_is_refused_and_changes_nothing(api):
    stub, scheduler, transport, stream, store = api
    job_id = (await stub.SubmitJob(B.SubmitJobRequest(spec=job_spec(2)))).job_id
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:1;mem:1024")))
    _, accept = await transport.next_call("Accept")
    running = accept.operations[0].launch.task_infos[0].task_id
    before = (await stub.GetJob(B.GetJobRequest(job_id=job_id))).SerializeToString()

    store.refuse_writes()
    await unavailable(stub.KillJob(B.KillJobRequest(job_id=job_id)))
    job = scheduler.get(job_id)
    assert job.SerializeToString() == before  # not KILLED, its pending instance not killed
    assert scheduler.has_ready_work()  # instance 1 still waits for offers
    assert transport.calls_of("Kill") == []
    assert on_disk(store.path)[job_id].state != B.JOB_KILLED

    store.refuse_writes(False)
    killed = (await stub.KillJob(B.KillJobRequest(job_id=job_id))).job
    assert killed.state == B.JOB_KILLED
    _, kill = await transport.next_call("Kill")
    assert kill.task_id == running
    assert on_disk(store.path)[job_id].state == B.JOB_KILLED
    assert not scheduler.has_ready_work()


async def test_jobs_are_not_shown_while_what_changed_cannot_be_stored(api):
    """An update applied in memory but not written (so not acknowledged) is not shown either:
    GetJob, ListJobs and WatchJob answer UNAVAILABLE until it is on disk."""
    stub, scheduler, transport, stream, store = api
    job_id = (await stub.SubmitJob(B.SubmitJobRequest(spec=job_spec()))).job_id
    await transport.next_call("Revive")
    stream.send(offers_event(make_offer("o-1", "a1", "cpus:1;mem:1024")))
    _, accept = await transport.next_call("Accept")
    task_id = accept.operations[0].launch.task_infos[0].task_id

    store.refuse_writes()
    stream.send(update_event(task_id, C.TASK_FINISHED, uuid=b"u-1", agent_id="a1"))
    assert isinstance(await asyncio.wait_for(scheduler.durable.get(), TIMEOUT), sqlite3.Error)
    await unavailable(stub.GetJob(B.GetJobRequest(job_id=job_id)))
    await unavailable(stub.ListJobs(B.ListJobsRequest()))
    await unavailable(stub.WatchJob(B.WatchJobRequest(job_id=job_id)))

    store.refuse_writes(False)
    assert (await stub.GetJob(B.GetJobRequest(job_id=job_id))).state == B.JOB_SUCCEEDED
    assert on_disk(store.path)[job_id].state == B.JOB_SUCCEEDED
    listed = await stub.ListJobs(B.ListJobsRequest())
    assert [j.state for j in listed.jobs] == [B.JOB_SUCCEEDED]
    first = await stub.WatchJob(B.WatchJobRequest(job_id=job_id)).read()
    assert first.job.state == B.JOB_SUCCEEDED
