"""What a job's state refuses, by the name of what is wrong: a change the job's state does not
allow is WrongJobState (FAILED_PRECONDITION through the API), and only a job that has ended is
JobEnded, which a cron replace may ignore when it kills an earlier run."""

from __future__ import annotations

import time

import pytest

from agora.frameworks.batch.scheduler import BatchScheduler, JobEnded, WrongJobState
from agora.frameworks.batch.store import JobStore
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def later_job() -> B.JobSpec:
    return B.JobSpec(
        name="later",
        instances=1,
        begin_at=time.time() + 3600,  # queued, and stays so
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16),
    )


async def test_releasing_a_job_that_is_not_held_is_a_wrong_state_not_an_end():
    scheduler = BatchScheduler(JobStore(None))
    try:
        job = scheduler.submit(later_job())
        with pytest.raises(WrongJobState, match="is not held") as refused:
            scheduler.hold(job.job_id, False)
        assert not isinstance(refused.value, JobEnded)
        with pytest.raises(WrongJobState, match="only a RUNNING job can be requeued") as refused:
            await scheduler.requeue(job.job_id)
        assert not isinstance(refused.value, JobEnded)
        # A kill of a job that ended is the one refusal that says so.
        await scheduler.kill(job.job_id)
        with pytest.raises(JobEnded):
            await scheduler.kill(job.job_id)
    finally:
        scheduler.close()
