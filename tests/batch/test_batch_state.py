"""The job/instance state machine and the gang placement, as pure functions (no I/O)."""

from __future__ import annotations

import pytest

from agora.common import Resources
from agora.frameworks.batch import state as st
from agora.frameworks.batch.placement import Group, Want, capacity, largest_fit, plan
from agora.frameworks.sdk import TaskSpec
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C

BACKOFF = st.Backoff(initial=1.0, factor=2.0, maximum=5.0)


def spec(instances=2, retries=0, gang=False) -> B.JobSpec:
    return B.JobSpec(
        name="t",
        instances=instances,
        max_retries=retries,
        gang=gang,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=1, mem=64),
    )


def launch(job, index, now=10.0):
    return st.record_launch(job, index, agent_id="a1", hostname="h1", now=now)


def update(job, attempt, state, now=11.0, **fields):
    index = st.parse_task_id(attempt.task_id)[1]
    return st.apply_update(
        job,
        index,
        C.TaskStatus(task_id=attempt.task_id, state=state, **fields),
        now=now,
        backoff=BACKOFF,
    )


def test_new_job_is_queued_with_pending_instances():
    job = st.new_job("job-1", spec(3), sequence=1, now=5.0)
    assert job.state == B.JOB_QUEUED
    assert [i.state for i in job.instances] == [B.INSTANCE_PENDING] * 3
    assert job.counts.pending == 3
    assert st.ready_instances(job, now=5.0) == [0, 1, 2]


def test_task_ids_trace_back_to_job_instance_attempt():
    assert st.parse_task_id(st.task_id_for("job-ab.c", 3, 2)) == ("job-ab.c", 3, 2)
    assert st.parse_task_id("hello-123") is None


def test_all_instances_finish_job_succeeds():
    job = st.new_job("job-1", spec(2), 1, 0.0)
    a0, a1 = launch(job, 0), launch(job, 1)
    assert job.state == B.JOB_RUNNING and job.started_at == 10.0
    assert update(job, a0, C.TASK_RUNNING).changed
    assert job.instances[0].state == B.INSTANCE_RUNNING
    update(job, a0, C.TASK_FINISHED, exit_code=0)
    assert job.state == B.JOB_RUNNING
    change = update(job, a1, C.TASK_FINISHED, now=20.0, exit_code=0)
    assert change.job_ended and job.state == B.JOB_SUCCEEDED and job.ended_at == 20.0
    assert job.counts.succeeded == 2


def test_duplicate_and_late_updates_change_nothing():
    job = st.new_job("job-1", spec(1), 1, 0.0)
    a = launch(job, 0)
    assert update(job, a, C.TASK_RUNNING).changed
    assert not update(job, a, C.TASK_RUNNING).changed  # at-least-once delivery
    update(job, a, C.TASK_FINISHED)
    assert not update(job, a, C.TASK_FAILED).changed  # nothing after a terminal state
    assert job.state == B.JOB_SUCCEEDED


def test_failure_retries_with_backoff_then_succeeds():
    job = st.new_job("job-1", spec(1, retries=2), 1, 0.0)
    first = launch(job, 0, now=10.0)
    change = update(job, first, C.TASK_FAILED, now=11.0, exit_code=1, message="exited with code 1")
    # backoff: 1 s before retry 1, 2 s before retry 2
    assert change.retry_at == 12.0 and "retry 1 of 2" in change.description
    assert job.instances[0].state == B.INSTANCE_PENDING and job.state == B.JOB_RUNNING
    assert st.ready_instances(job, now=11.5) == [] and st.next_retry_at(job) == 12.0
    assert st.ready_instances(job, now=12.0) == [0]
    second = launch(job, 0, now=12.0)
    assert second.attempt == 2 and second.task_id.endswith(".0.2")
    assert update(job, second, C.TASK_FAILED, now=13.0).retry_at == 15.0
    third = launch(job, 0, now=15.0)
    update(job, third, C.TASK_FINISHED, now=16.0, exit_code=0)
    assert job.state == B.JOB_SUCCEEDED
    assert [a.state for a in job.instances[0].attempts] == [
        C.TASK_FAILED,
        C.TASK_FAILED,
        C.TASK_FINISHED,
    ]


def test_exhausted_retries_fail_the_job_once_every_instance_ended():
    job = st.new_job("job-1", spec(2, retries=1), 1, 0.0)
    a0, a1 = launch(job, 0), launch(job, 1)
    update(job, a0, C.TASK_FAILED, now=11.0)
    retry = launch(job, 0, now=12.0)
    change = update(job, retry, C.TASK_FAILED, now=13.0, message="exited with code 2")
    assert change.instance_ended and "no retries left" in change.description
    assert job.instances[0].state == B.INSTANCE_FAILED and job.instances[0].failures == 2
    assert job.state == B.JOB_RUNNING  # instance 1 still runs
    update(job, a1, C.TASK_FINISHED, now=14.0)
    assert job.state == B.JOB_FAILED and "instance 0 failed 2 time(s)" in job.message


def test_backoff_is_capped():
    assert [BACKOFF.delay(n) for n in (1, 2, 3, 4, 10)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_unknown_task_is_relaunched_without_using_a_retry():
    job = st.new_job("job-1", spec(1, retries=0), 1, 0.0)
    a = launch(job, 0)
    change = update(job, a, C.TASK_UNKNOWN, now=11.0)
    assert change.retry_at == 11.0 and job.instances[0].failures == 0
    assert job.instances[0].state == B.INSTANCE_PENDING


def test_kill_marks_job_killed_and_returns_running_tasks():
    job = st.new_job("job-1", spec(3), 1, 0.0)
    a0 = launch(job, 0)
    a1 = launch(job, 1)
    to_kill = st.kill_job(job, now=20.0)
    assert [a.task_id for _, a in to_kill] == [a0.task_id, a1.task_id]
    assert job.state == B.JOB_KILLED and job.instances[2].state == B.INSTANCE_KILLED
    assert st.ready_instances(job, 20.0) == [] and not st.is_finished(job)
    update(job, a0, C.TASK_KILLED, now=21.0)
    update(job, a1, C.TASK_KILLED, now=21.0)
    assert job.state == B.JOB_KILLED and st.is_finished(job)
    assert job.counts.killed == 3
    with pytest.raises(ValueError, match="already ended"):
        st.kill_job(job, now=22.0)


def test_refused_launch_is_forgotten():
    job = st.new_job("job-1", spec(1), 1, 0.0)
    a = launch(job, 0)
    st.unrecord_launch(job, 0, a.task_id, now=11.0)
    assert job.state == B.JOB_QUEUED and not job.instances[0].attempts
    assert st.ready_instances(job, 11.0) == [0]


# --- placement: gang all-or-nothing, plain jobs as many as fit ---------------------------------


def offer(agent: str, resources: str) -> C.Offer:
    return C.Offer(
        offer_id=f"o-{agent}",
        agent_id=agent,
        hostname=agent,
        resources=Resources.parse(resources).to_proto(),
    )


def wants(job_id: str, n: int, cpus: float = 1.0):
    return [
        Want(
            job_id,
            i,
            TaskSpec(f"{job_id}-{i}", cpus=cpus, mem=64, command="true", task_id=f"{job_id}.{i}.1"),
        )
        for i in range(n)
    ]


def test_gang_that_does_not_fit_places_nothing_and_others_backfill():
    offers = [offer("a1", "cpus:2;mem:1024"), offer("a2", "cpus:1;mem:1024")]  # 3 cpus in all
    groups = [Group("gang", wants("gang", 4), gang=True), Group("small", wants("small", 2))]
    result = plan(offers, groups)
    placed = [w.job_id for launch in result.launches for w in launch.wants]
    assert sorted(placed) == ["small", "small"]
    assert result.waiting == ["gang"] and result.placed == 2


def test_gang_that_fits_spans_agents():
    offers = [offer("a1", "cpus:2;mem:1024"), offer("a2", "cpus:2;mem:1024")]
    result = plan(offers, [Group("gang", wants("gang", 4), gang=True)])
    assert result.placed == 4 and not result.waiting and not result.unused
    assert sorted(len(launch.tasks) for launch in result.launches) == [2, 2]


def test_plain_job_places_what_fits_and_waits_for_the_rest():
    offers = [offer("a1", "cpus:2;mem:1024")]
    result = plan(offers, [Group("j", wants("j", 3))])
    assert result.placed == 2 and result.waiting == ["j"]
    assert [t.task_id for t in result.launches[0].tasks] == ["j.0.1", "j.1.1"]


def test_offers_nobody_uses_are_returned_unused():
    offers = [offer("a1", "cpus:2;mem:1024"), offer("a2", "cpus:2;mem:1024")]
    result = plan(offers, [Group("j", wants("j", 1))])
    assert result.placed == 1 and len(result.unused) == 1


def test_largest_fit_checks_one_agent_holds_everything():
    agents = [("h1", Resources.parse("cpus:8;mem:512")), ("h2", Resources.parse("cpus:1;mem:8192"))]
    assert largest_fit(agents, TaskSpec("x", cpus=1, mem=1024, command="true"))
    assert not largest_fit(agents, TaskSpec("x", cpus=2, mem=1024, command="true"))


def test_capacity_counts_tasks_the_idle_agents_could_hold_at_once():
    agents = [
        ("h1", Resources.parse("cpus:2;mem:1024")),
        ("h2", Resources.parse("cpus:2;mem:1024")),
    ]
    spec = TaskSpec("x", cpus=1.5, mem=64, command="true")
    assert capacity(agents, spec) == 2  # one per agent: 1.5 + 1.5 > 2
    assert capacity(agents, TaskSpec("y", cpus=0.5, mem=64, command="true")) == 8
    assert capacity(agents, TaskSpec("y", cpus=0.5, mem=64, command="true"), limit=3) == 3
