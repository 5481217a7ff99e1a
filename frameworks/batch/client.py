"""Finding the Batch API through the master (clients need only the master's address)."""

from __future__ import annotations

from agora.common.credentials import INSECURE, Credentials
from agora.frameworks.sdk import FrameworkNotFound
from agora.frameworks.sdk.discovery import find_framework


class BatchNotFound(FrameworkNotFound):
    """No batch framework has published its address to the master (or it is unreachable)."""


def find_batch_address(
    master: str, name: str = "batch", timeout: float = 5.0, credentials: Credentials = INSECURE
) -> str:
    """The service_address of the framework called `name`: a connected one first, then the
    most recently registered."""
    return find_batch(master, name, timeout, credentials).info.service_address


def find_batch(
    master: str, name: str = "batch", timeout: float = 5.0, credentials: Credentials = INSECURE
):
    """What the master knows of the batch framework (FrameworkSummary): its API's address,
    and whether it is a highly available set (SET_LABEL in its labels)."""
    return find_framework(
        master,
        name,
        timeout=timeout,
        credentials=credentials,
        error=BatchNotFound,
        hint=f"start one with `agora batch --master {master}`",
    )


class BatchClient:
    """The Batch API from Python, found through the master: what `agora job` does, for
    programs. Every method is one call and returns the reply's message; a refusal raises
    grpc.aio.AioRpcError with the status and message the API documents (protos/batch.proto).

        async with await BatchClient.connect("127.0.0.1:5050") as batch:
            job = await batch.submit(spec)
            async for event in batch.watch(job.job_id): ...
    """

    def __init__(self, address: str, credentials: Credentials = INSECURE) -> None:
        from agora.common.credentials import aio_channel
        from agora.v1 import batch_pb2_grpc

        self.address = address
        self._channel = aio_channel(address, credentials)
        self.stub = batch_pb2_grpc.BatchStub(self._channel)

    @classmethod
    async def connect(
        cls, master: str, credentials: Credentials = INSECURE, name: str = "batch"
    ) -> BatchClient:
        """Finds the Batch API of the framework called `name` through the master."""
        import asyncio

        address = await asyncio.to_thread(find_batch_address, master, name, credentials=credentials)
        return cls(address, credentials)

    async def __aenter__(self) -> BatchClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    # jobs
    async def submit(self, spec):
        from agora.v1 import batch_pb2

        return (await self.stub.SubmitJob(batch_pb2.SubmitJobRequest(spec=spec))).job

    async def submit_graph(self, specs):
        """SubmitJobs: the jobs (JobSpecs naming each other by name in `after`) stored all
        together or none; the jobs as stored (each after those it waits for), without their
        instances."""
        from agora.v1 import batch_pb2

        return list((await self.stub.SubmitJobs(batch_pb2.SubmitJobsRequest(specs=specs))).jobs)

    async def get(self, job_id: str):
        from agora.v1 import batch_pb2

        return await self.stub.GetJob(batch_pb2.GetJobRequest(job_id=job_id))

    async def jobs(self, **filters):
        """ListJobs: states=[...], include_instances=, ended_after=, owner= (the history)."""
        from agora.v1 import batch_pb2

        return list((await self.stub.ListJobs(batch_pb2.ListJobsRequest(**filters))).jobs)

    async def kill(self, job_id: str):
        from agora.v1 import batch_pb2

        return (await self.stub.KillJob(batch_pb2.KillJobRequest(job_id=job_id))).job

    async def hold(self, job_id: str, hold: bool = True):
        from agora.v1 import batch_pb2

        return await self.stub.HoldJob(batch_pb2.HoldJobRequest(job_id=job_id, hold=hold))

    async def release(self, job_id: str):
        return await self.hold(job_id, False)

    async def requeue(self, job_id: str):
        from agora.v1 import batch_pb2

        return await self.stub.RequeueJob(batch_pb2.RequeueJobRequest(job_id=job_id))

    async def update(self, job_id: str, **changes):
        """UpdateJob: priority=, instances=, time_limit_seconds=."""
        from agora.v1 import batch_pb2

        return await self.stub.UpdateJob(batch_pb2.UpdateJobRequest(job_id=job_id, **changes))

    def watch(self, job_id: str):
        """The job's events (an async iterator) until it has ended."""
        from agora.v1 import batch_pb2

        return self.stub.WatchJob(batch_pb2.WatchJobRequest(job_id=job_id))

    # cron schedules
    async def schedule(self, spec, replace: bool = False):
        from agora.v1 import batch_pb2

        return await self.stub.PutSchedule(batch_pb2.PutScheduleRequest(spec=spec, replace=replace))

    async def schedules(self):
        from agora.v1 import batch_pb2

        return list((await self.stub.ListSchedules(batch_pb2.ListSchedulesRequest())).schedules)

    async def get_schedule(self, name: str):
        """GetSchedule: the schedule with its latest runs and their jobs' states (NOT_FOUND
        for an unknown name)."""
        from agora.v1 import batch_pb2

        return await self.stub.GetSchedule(batch_pb2.GetScheduleRequest(name=name))

    async def suspend(self, name: str, suspended: bool = True):
        from agora.v1 import batch_pb2

        request = batch_pb2.SuspendScheduleRequest(name=name, suspended=suspended)
        return await self.stub.SuspendSchedule(request)

    async def unschedule(self, name: str):
        from agora.v1 import batch_pb2

        request = batch_pb2.DeleteScheduleRequest(name=name)
        return (await self.stub.DeleteSchedule(request)).schedule

    # owners
    async def owners(self):
        from agora.v1 import batch_pb2

        return list((await self.stub.ListOwners(batch_pb2.ListOwnersRequest())).owners)

    async def set_owner_weight(self, owner: str, weight: float):
        from agora.v1 import batch_pb2

        request = batch_pb2.SetOwnerWeightRequest(owner=owner, weight=weight)
        return await self.stub.SetOwnerWeight(request)
