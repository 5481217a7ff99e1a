"""What the batch daemon keeps so that a task costs it the same in a big book as in a small one:
counts kept as instances change, the waiting instances kept as they change, lazy placement and
grouped writes. Each is checked against the plain way of finding the same thing (a scan)."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as hs

from agora.common import Resources
from agora.frameworks.batch import state as st
from agora.frameworks.batch.placement import Group, Want, plan
from agora.frameworks.batch.store import JobStore
from agora.frameworks.batch.waiting import WaitingInstances
from agora.frameworks.sdk import TaskSpec
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C

BACKOFF = st.Backoff(initial=1.0, factor=2.0, maximum=4.0)
STATES = [
    C.TASK_STARTING,
    C.TASK_RUNNING,
    C.TASK_FINISHED,
    C.TASK_FAILED,
    C.TASK_LOST,
    C.TASK_KILLED,
    C.TASK_UNKNOWN,
]


def spec(instances: int, retries: int = 2) -> B.JobSpec:
    return B.JobSpec(
        name="t",
        instances=instances,
        max_retries=retries,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=1, mem=64),
    )


def recounted(job: B.Job, now: float) -> B.Job:
    """The job with its counts and state found again from its instances."""
    copy = B.Job()
    copy.CopyFrom(job)
    st.refresh(copy, now)
    return copy


def scanned_retry(job: B.Job, now: float) -> float | None:
    times = [
        i.not_before
        for i in job.instances
        if i.state == B.INSTANCE_PENDING and i.not_before > now and not st.is_ended(job)
    ]
    return min(times) if times else None


# Steps: ("launch", instance), ("update", instance, state), ("undo", instance), ("kill",),
# ("wait", seconds).
steps = hs.lists(
    hs.one_of(
        hs.tuples(hs.just("launch"), hs.integers(0, 5)),
        hs.tuples(hs.just("update"), hs.integers(0, 5), hs.sampled_from(STATES)),
        hs.tuples(hs.just("undo"), hs.integers(0, 5)),
        hs.tuples(hs.just("kill")),
        hs.tuples(hs.just("wait"), hs.floats(0.1, 5.0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_counts_and_waiting_instances_follow_every_change_as_a_scan_finds_them(steps):
    now = 100.0
    job = st.new_job("job-1", spec(6), 1, now)
    waiting = WaitingInstances()
    waiting.add_job(job)
    for step in steps:
        kind = step[0]
        if kind == "wait":
            now += step[1]
        elif kind == "launch" and st.is_ready(job, step[1], now):
            st.record_launch(job, step[1], agent_id="a1", now=now)
        elif kind == "update":
            attempts = job.instances[step[1]].attempts
            if attempts:
                status = C.TaskStatus(task_id=attempts[-1].task_id, state=step[2])
                change = st.apply_update(job, step[1], status, now=now, backoff=BACKOFF)
                if change.retry_at is not None:  # as the scheduler tells the book
                    waiting.add(job.job_id, step[1], job.instances[step[1]].not_before)
                if change.job_ended:
                    waiting.forget(job.job_id)
        elif kind == "undo":
            attempts = job.instances[step[1]].attempts
            if attempts and job.instances[step[1]].state == B.INSTANCE_LAUNCHED:
                st.unrecord_launch(job, step[1], attempts[-1].task_id, now)
                if st.is_ready(job, step[1], now):
                    waiting.add(job.job_id, step[1])
        elif kind == "kill" and not st.is_ended(job):
            st.kill_job(job, now)
            waiting.forget(job.job_id)
        fresh = recounted(job, now)
        assert job.counts == fresh.counts
        assert job.state == fresh.state
        assert st.never_launched(job) == all(not i.attempts for i in job.instances)
        assert list(waiting.ready(job, now)) == st.ready_instances(job, now)
        assert waiting.has_ready(job, now) == bool(st.ready_instances(job, now))
        assert waiting.next_retry_at(job, now) == scanned_retry(job, now)


def test_reading_the_ready_instances_keeps_what_was_not_launched():
    job = st.new_job("job-1", spec(5), 1, 0.0)
    waiting = WaitingInstances()
    waiting.add_job(job)
    reader = waiting.ready(job, 1.0)
    assert [next(reader), next(reader)] == [0, 1]
    reader.close()  # a round that placed two, then stopped reading
    st.record_launch(job, 0, agent_id="a1", now=1.0)  # only the first was launched
    assert list(waiting.ready(job, 1.0)) == [1, 2, 3, 4]
    assert waiting.job_ids() == ["job-1"]
    waiting.forget("job-1")
    assert waiting.job_ids() == [] and list(waiting.ready(job, 1.0)) == []


def test_a_retry_waits_for_its_backoff_then_comes_first():
    job = st.new_job("job-1", spec(3), 1, 0.0)
    waiting = WaitingInstances()
    waiting.add_job(job)
    attempts = [st.record_launch(job, i, agent_id="a1", now=1.0) for i in range(3)]
    status = C.TaskStatus(task_id=attempts[2].task_id, state=C.TASK_FAILED)
    change = st.apply_update(job, 2, status, now=2.0, backoff=BACKOFF)
    waiting.add(job.job_id, 2, job.instances[2].not_before)
    assert change.retry_at == 3.0
    assert not waiting.has_ready(job, 2.5) and waiting.next_retry_at(job, 2.5) == 3.0
    assert list(waiting.ready(job, 3.0)) == [2] and waiting.next_retry_at(job, 3.0) is None


def offer(agent: str, resources: str) -> C.Offer:
    return C.Offer(
        offer_id=f"o-{agent}", agent_id=agent, resources=Resources.parse(resources).to_proto()
    )


def test_a_round_of_offers_reads_a_big_job_no_further_than_what_fits():
    made = []

    def wants(n):
        for i in range(n):
            made.append(i)
            yield Want("j", i, TaskSpec(f"j-{i}", cpus=1, mem=64, command="true"))

    offers = [offer("a1", "cpus:2;mem:1024"), offer("a2", "cpus:1;mem:1024")]
    result = plan(offers, [Group("j", wants(10_000))])
    assert result.placed == 3 and result.waiting == ["j"]
    assert made == [0, 1, 2, 3]  # the three placed, and the first that fitted nowhere


def test_a_burst_of_changes_is_written_in_one_commit_as_the_jobs_are_then(tmp_path):
    store = JobStore(tmp_path / "b.sqlite3")
    job = st.new_job("job-1", spec(3), 1, 0.0)
    store.put_job(job)
    assert store.commit() == 1 and not store.uncommitted
    attempt = st.record_launch(job, 1, agent_id="a1", now=1.0)
    store.put_job(job, [1])
    for state in (C.TASK_STARTING, C.TASK_RUNNING, C.TASK_FINISHED):
        st.apply_update(
            job, 1, C.TaskStatus(task_id=attempt.task_id, state=state), now=2.0, backoff=BACKOFF
        )
        store.put_job(job, [1])
    # Nothing written yet: a reader of the file still sees the instance pending.
    assert JobStore(tmp_path / "b.sqlite3").load_jobs()[0].instances[1].state == B.INSTANCE_PENDING
    assert store.uncommitted and store.commit() == 1
    loaded = JobStore(tmp_path / "b.sqlite3").load_jobs()[0]
    assert loaded.instances[1] == job.instances[1]
    assert loaded.instances[1].state == B.INSTANCE_SUCCEEDED and loaded.counts.succeeded == 1
    assert loaded.counts == job.counts


def test_a_commit_that_fails_keeps_its_changes_for_the_next(tmp_path):
    store = JobStore(tmp_path / "b.sqlite3")
    job = st.new_job("job-1", spec(2), 1, 0.0)
    store.put_job(job)
    store._db.execute("PRAGMA query_only = ON")  # writes fail, as on a full or broken disk
    try:
        store.commit()
    except sqlite3.Error:
        pass
    else:
        raise AssertionError("the commit should have failed")
    assert store.uncommitted
    store._db.execute("PRAGMA query_only = OFF")
    st.record_launch(job, 0, agent_id="a1", now=1.0)
    store.put_job(job, [0])  # noted on top of what is still unwritten: the whole job
    store.close()  # closing writes what is noted
    loaded = JobStore(tmp_path / "b.sqlite3").load_jobs()[0]
    assert loaded == job
