"""Pure parts of the batch framework: the job store, spec validation, the progress line, the
defaults its front doors share."""

from __future__ import annotations

import pytest

from agora.cli.job_cmd import _progress
from agora.cli.main import build_parser
from agora.frameworks.batch import (
    DECLINE_REFUSE_SECONDS,
    IDLE_REFUSE_SECONDS,
    BatchConfig,
    BatchScheduler,
    JobStore,
    SpecError,
    validate_spec,
)
from agora.frameworks.batch import state as st
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def spec(**task) -> B.JobSpec:
    values = dict(command=C.CommandInfo(shell="true"), cpus=0.5, mem=64)
    values.update(task)
    return B.JobSpec(name="t", instances=4, task=B.TaskTemplate(**values))


def test_store_keeps_jobs_and_framework_id_across_reopen(tmp_path):
    path = tmp_path / "batch.sqlite3"
    store = JobStore(path)
    assert store.framework_id() == "" and store.load_jobs() == []
    first = st.new_job("job-1", spec(), 1, 10.0)
    second = st.new_job("job-2", spec(), 2, 11.0)
    store.put_job(second)
    store.put_job(first)
    st.record_launch(first, 0, agent_id="a1", now=12.0)
    store.put_job(first, [0])  # the header and instance 0 only
    store.set_framework_id("framework-9")
    store.close()

    again = JobStore(path)
    jobs = again.load_jobs()
    assert [j.job_id for j in jobs] == ["job-1", "job-2"]  # submission order
    assert jobs[0] == first and jobs[0].state == B.JOB_RUNNING
    assert again.framework_id() == "framework-9"
    again.close()


def test_store_writes_only_the_instances_named(tmp_path):
    store = JobStore(tmp_path / "b.sqlite3")
    job = st.new_job("job-1", spec(), 1, 10.0)
    store.put_job(job)
    store.commit()
    st.record_launch(job, 2, agent_id="a1", now=12.0)
    stale = st.record_launch(job, 3, agent_id="a1", now=12.0)
    store.put_job(job, [2])  # instance 3's launch not written (yet)
    assert store.commit() == 1
    loaded = store.load_jobs()[0]
    assert loaded.state == B.JOB_RUNNING and loaded.counts.running == 2
    assert loaded.instances[2] == job.instances[2]
    assert loaded.instances[3].state == B.INSTANCE_PENDING and stale.task_id
    assert [i.index for i in loaded.instances] == [0, 1, 2, 3]


def test_validate_accepts_argv_and_shell():
    validate_spec(spec())
    validate_spec(spec(command=C.CommandInfo(argv=["echo", "hi"])))


@pytest.mark.parametrize(
    "task, says",
    [
        (dict(command=C.CommandInfo(shell="   ")), "no command"),
        (dict(cpus=0.0001), "at least 0.001"),
        (dict(cpus=float("inf")), "cpus must be a positive number"),
        (dict(env={"A=B": "x"}), "environment variable name"),
        (dict(ports=5000), "ports"),
    ],
)
def test_validate_refuses(task, says):
    with pytest.raises(SpecError) as info:
        validate_spec(spec(**task))
    assert says in str(info.value)


def test_progress_line_and_bar():
    job = st.new_job("job-1", spec(), 1, 0.0)
    a0 = st.record_launch(job, 0, agent_id="a", now=1.0)
    st.record_launch(job, 1, agent_id="a", now=1.0)
    st.apply_update(
        job,
        0,
        C.TaskStatus(task_id=a0.task_id, state=C.TASK_FINISHED),
        now=2.0,
        backoff=st.Backoff(),
    )
    assert _progress(job, bar=False) == "job-1: 1/4 done, 1 running, 0 failed, 2 pending [RUNNING]"
    bar = _progress(job, bar=True)
    # 30 cells: 1/4 done -> 7 '#', 1/4 running -> 8 '>' (rounded), the rest pending '.'
    assert bar.startswith("[#######>>>>>>>>...............] 1/4 done")


def test_the_command_line_the_config_and_the_scheduler_refuse_alike():
    argv = ["batch", "--master", "127.0.0.1:5050"]
    args = build_parser(argv).parse_args(argv)
    config = BatchConfig(master="127.0.0.1:5050")
    scheduler = BatchScheduler(JobStore(None))
    for refused in (
        (args.decline_refuse, config.decline_refuse_seconds, scheduler.decline_refuse_seconds),
        (args.idle_refuse, config.idle_refuse_seconds, scheduler.idle_refuse_seconds),
    ):
        assert len(set(refused)) == 1
    assert (args.decline_refuse, args.idle_refuse) == (DECLINE_REFUSE_SECONDS, IDLE_REFUSE_SECONDS)
