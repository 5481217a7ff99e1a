"""Issue 36, item 1: job dependencies (`agora job submit --after JOB[:ok|any|notok]`, Slurm's
afterok/afterany/afternotok). The rules alone, then through the batch cluster: a job waits
(JOB_WAITING, saying for whom), runs when its dependencies end as asked, is cancelled with a
reason when one ends otherwise (and its own dependents with it), and unknown or already-failed
dependencies are refused at submission."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from batch_harness import BatchCluster

from agora.frameworks.batch import dependencies as deps
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C


def job(job_id: str, state: int, name: str = "j", sequence: int = 1) -> B.Job:
    return B.Job(job_id=job_id, state=state, sequence=sequence, spec=B.JobSpec(name=name))


def test_conditions_say_whether_an_ended_job_meets_them():
    assert deps.met(B.AFTER_OK, B.JOB_RUNNING) is None
    assert deps.met(B.AFTER_OK, B.JOB_SUCCEEDED) and not deps.met(B.AFTER_OK, B.JOB_FAILED)
    assert deps.met(B.AFTER_ANY, B.JOB_KILLED) and deps.met(B.AFTER_ANY, B.JOB_SUCCEEDED)
    assert deps.met(B.AFTER_NOT_OK, B.JOB_FAILED) and not deps.met(B.AFTER_NOT_OK, B.JOB_SUCCEEDED)
    assert deps.parse_after("build") == B.Dependency(job="build", condition=B.AFTER_OK)
    assert deps.parse_after("job-1:notok").condition == B.AFTER_NOT_OK
    with pytest.raises(ValueError, match="JOB:ok, JOB:any or JOB:notok"):
        deps.parse_after("job-1:maybe")


def test_names_resolve_to_their_latest_job_and_impossible_ones_are_refused():
    jobs = {
        "job-a": job("job-a", B.JOB_SUCCEEDED, "build", 1),
        "job-b": job("job-b", B.JOB_RUNNING, "build", 2),
        "job-c": job("job-c", B.JOB_FAILED, "test", 3),
    }
    after, pending = deps.resolve([B.Dependency(job="build")], jobs)
    assert [d.job for d in after] == ["job-b"] and pending == [("job-b", B.AFTER_OK)]
    after, pending = deps.resolve([B.Dependency(job="job-a")], jobs)
    assert pending == []  # already met
    with pytest.raises(deps.UnknownDependency, match="no job has that id or name"):
        deps.resolve([B.Dependency(job="deploy")], jobs)
    with pytest.raises(deps.DependencyUnmet, match="already ended FAILED"):
        deps.resolve([B.Dependency(job="test")], jobs)
    _, pending = deps.resolve([B.Dependency(job="test", condition=B.AFTER_NOT_OK)], jobs)
    assert pending == []


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


async def test_a_job_waits_for_its_dependency_then_runs(cluster):
    first = await cluster.submit("sleep 1", name="build")
    second = await cluster.submit("true", name="test", after=[B.Dependency(job="build")])
    waiting = await cluster.job(second)
    assert waiting.state == B.JOB_WAITING
    assert waiting.message == f"waiting for {first} to succeed"
    assert list(waiting.waiting_for) == [first]
    await cluster.wait_state(first, B.JOB_SUCCEEDED)
    done = await cluster.wait_state(second, B.JOB_SUCCEEDED)
    assert done.started_at >= (await cluster.job(first)).ended_at


async def test_a_failed_dependency_cancels_its_dependents_in_turn(cluster):
    first = await cluster.submit("exit 3", name="build")
    second = await cluster.submit("true", after=[B.Dependency(job=first)])
    third = await cluster.submit("true", after=[B.Dependency(job=second, condition=B.AFTER_ANY)])
    cleanup = await cluster.submit(
        "true", after=[B.Dependency(job=first, condition=B.AFTER_NOT_OK)]
    )
    await cluster.wait_state(first, B.JOB_FAILED)
    cancelled = await cluster.wait_state(second, B.JOB_KILLED)
    assert cancelled.message == (
        f"cancelled: job {first} ended FAILED, and this job waited for it to succeed"
    )
    assert not [a for i in cancelled.instances for a in i.attempts]  # nothing ever ran
    # `any`: the cancelled job ended, so the third runs; the cleanup runs on failure.
    await cluster.wait_state(third, B.JOB_SUCCEEDED)
    await cluster.wait_state(cleanup, B.JOB_SUCCEEDED)


async def test_unknown_or_already_failed_dependencies_are_refused_at_submission(cluster):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.submit("true", after=[B.Dependency(job="nope")])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--after nope: no job has that id or name" in e.value.details()
    failed = await cluster.submit("exit 1", name="doomed")
    await cluster.wait_state(failed, B.JOB_FAILED)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.submit("true", after=[B.Dependency(job="doomed")])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "so it could never run" in e.value.details()


async def test_the_command_line_submits_with_after_and_shows_why_it_waits(cluster):
    first = await cluster.submit("sleep 2", name="build")
    result = await cluster.cli("job", "submit", "--after", "build:any", "--json", "--", "true")
    assert result.code == 0, result.err
    import json

    submitted = json.loads(result.out)
    assert submitted["state"] == "JOB_WAITING" and submitted["waiting_for"] == [first]
    bad = await cluster.cli("job", "submit", "--after", "build:maybe", "--", "true")
    assert bad.code != 0 and "JOB:ok, JOB:any or JOB:notok" in bad.err
    await cluster.wait_state(submitted["job_id"], B.JOB_SUCCEEDED)


async def test_a_waiting_job_waits_on_across_a_daemon_restart(cluster):
    first = await cluster.submit("sleep 2", name="build")
    second = await cluster.submit("true", after=[B.Dependency(job="build")])
    await cluster.stop_batch()
    await cluster.start_batch()
    again = await cluster.job(second)
    assert again.state == B.JOB_WAITING and list(again.waiting_for) == [first]
    await cluster.wait_state(first, B.JOB_SUCCEEDED)
    await cluster.wait_state(second, B.JOB_SUCCEEDED)


def test_a_graph_is_ordered_so_each_job_follows_what_it_waits_for_and_cycles_are_named():
    order = deps.submission_order({"report": ["test"], "test": ["build"], "build": []})
    assert order == ["build", "test", "report"]
    assert deps.submission_order({"a": ["outside"], "b": ["a"]}) == ["a", "b"]
    with pytest.raises(ValueError, match="in a cycle: a -> b -> c -> a"):
        deps.submission_order({"a": ["b"], "b": ["c"], "c": ["a"]})


GRAPH = """
jobs:
  - name: report
    command: echo report
    after: ["test:any"]
  - name: test
    command: echo test
    after: [build]
    constraints: ["hostname:LIKE:host-.*"]
    revocable: true
  - name: build
    args: [sh, -c, "sleep 1; echo built"]
    cpus: 0.2
"""


async def test_a_graph_file_is_submitted_whole_in_order_and_runs_in_order(cluster, tmp_path):
    import json

    graph = tmp_path / "graph.yaml"
    graph.write_text(GRAPH)
    result = await cluster.cli("job", "submit", "-f", str(graph), "--json")
    assert result.code == 0, result.err
    submitted = {row["name"]: row["job_id"] for row in json.loads(result.out)}
    assert list(submitted) == ["build", "test", "report"]
    report = await cluster.wait_state(submitted["report"], B.JOB_SUCCEEDED)
    test = await cluster.job(submitted["test"])
    build = await cluster.job(submitted["build"])
    assert build.ended_at <= test.started_at and test.ended_at <= report.started_at
    assert [d.job for d in test.spec.after] == [submitted["build"]]
    assert test.spec.revocable and test.spec.constraints[0].operator == "LIKE"


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "jobs: [{name: a, command: 'true', after: [b]},\n"
            "       {name: b, command: 'true', after: [a]}]",
            "in a cycle: a -> b -> a",
        ),
        (
            "jobs: [{name: a, command: 'true', after: [nowhere]}]",
            "job 'a': --after nowhere: no job has that id or name; no job of the graph was "
            "submitted",
        ),
        ("jobs: [{name: a, command: 'true', colour: red}]", "unknown field(s) colour"),
        ("jobs: [{name: a, command: 'true', constraints: [rack]}]", "write FIELD:OPERATOR"),
    ],
)
async def test_a_bad_graph_submits_nothing(cluster, tmp_path, text, says):
    graph = tmp_path / "graph.yaml"
    graph.write_text(text)
    result = await cluster.cli("job", "submit", "-f", str(graph))
    assert result.code == 1 and says in result.err, result.err
    assert not (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs


async def test_a_graph_with_one_job_the_daemon_refuses_submits_none_of_it(cluster, tmp_path):
    """The graph is one call (SubmitJobs), checked whole and stored in one commit: its first
    job is good, its second one the daemon refuses (only the daemon checks resources), and
    neither is submitted, whether through the API or `agora job submit -f`."""
    good = B.JobSpec(
        name="a",
        instances=1,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16),
    )
    bad = B.JobSpec(name="b", instances=1, after=[B.Dependency(job="a")])
    bad.task.CopyFrom(good.task)
    bad.task.cpus = 0
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJobs(B.SubmitJobsRequest(specs=[good, bad]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.details() == (
        "jobs[1] (b): cpus must be a positive number, got 0; no job of the graph was submitted"
    )
    # Bigger than any agent (2 cpus): FAILED_PRECONDITION, saying which job, nothing stored.
    bad.task.cpus = 64
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJobs(B.SubmitJobsRequest(specs=[good, bad]))
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert e.value.details().startswith("jobs[1] (b): each instance needs cpus:64")
    assert (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs == []

    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "jobs:\n"
        "  - {name: a, command: 'true'}\n"
        "  - {name: b, command: 'true', mem: -5, after: [a]}\n"
    )
    result = await cluster.cli("job", "submit", "-f", str(graph))
    assert result.code == 1
    assert f"--file {graph}: jobs[1] (b): mem must be a positive number, got -5" in result.err
    assert "no job of the graph was submitted" in result.err
    assert (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs == []


@pytest.mark.parametrize(
    "specs, says",
    [
        ([], "no jobs: give at least one"),
        ([B.JobSpec(name="x"), B.JobSpec(name="x")], "jobs[1] (x): another job of the graph"),
        ([B.JobSpec(name="")], "jobs[0]: each job of a graph needs a name"),
        (
            [
                B.JobSpec(name="x", after=[B.Dependency(job="y")]),
                B.JobSpec(name="y", after=[B.Dependency(job="x")]),
            ],
            "the jobs wait for each other in a cycle: x -> y -> x",
        ),
        ([B.JobSpec(name="x", instances=10_000)] * 11, "110000 instances in all"),
    ],
)
async def test_a_graph_that_is_not_one_is_refused_saying_why(cluster, specs, says):
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJobs(B.SubmitJobsRequest(specs=specs))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in e.value.details() and "no job of the graph was submitted" in e.value.details()


async def test_a_chain_as_long_as_a_graph_may_be_is_submitted_in_order(cluster):
    """A chain of MAX_GRAPH_JOBS jobs, each waiting for the one before, given last first:
    accepted in chain order (a recursive sort ran out of stack here, and the caller heard
    UNKNOWN). Its head waits for a begin time far off, so none of it runs meanwhile."""
    from agora.frameworks.batch.service import MAX_GRAPH_JOBS

    task = B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16)
    chain = [B.JobSpec(name="link-0", instances=1, task=task, begin_at=4_000_000_000)]
    for i in range(1, MAX_GRAPH_JOBS):
        after = [B.Dependency(job=f"link-{i - 1}")]
        chain.append(B.JobSpec(name=f"link-{i}", instances=1, task=task, after=after))
    reply = await cluster.stub.SubmitJobs(B.SubmitJobsRequest(specs=chain[::-1]))
    names = [job.spec.name for job in reply.jobs]
    assert names == [f"link-{i}" for i in range(MAX_GRAPH_JOBS)]
    ids = [job.job_id for job in reply.jobs]
    for previous, job in zip(ids, reply.jobs[1:], strict=False):
        assert [d.job for d in job.spec.after] == [previous]
        assert job.state == B.JOB_WAITING and list(job.waiting_for) == [previous]


async def test_a_dependency_name_past_the_name_limit_is_refused_saying_the_limit(cluster):
    from agora.common.request_limits import MAX_NAME_LENGTH

    long = "x" * (MAX_NAME_LENGTH + 1)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.submit("true", after=[B.Dependency(job=long)])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"after: {MAX_NAME_LENGTH + 1} characters" in e.value.details()
    assert f"the limit is {MAX_NAME_LENGTH}" in e.value.details()
    assert long not in e.value.details()  # shown truncated, not echoed whole
    spec = B.JobSpec(name="a", instances=1, after=[B.Dependency(job=long)])
    spec.task.command.shell = "true"
    spec.task.cpus, spec.task.mem = 0.1, 16
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await cluster.stub.SubmitJobs(B.SubmitJobsRequest(specs=[spec]))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the limit is {MAX_NAME_LENGTH}" in e.value.details()


async def test_a_graph_file_takes_what_a_single_submission_takes(cluster, tmp_path):
    """Per-instance arguments (a file beside the graph, or a list), a begin time, an image
    and a kill grace: the fields of `agora job submit`'s flags of the same names."""
    (tmp_path / "inputs.txt").write_text("alpha\n\nbeta\n")
    graph = tmp_path / "graph.yaml"
    graph.write_text(
        "jobs:\n"
        "  - {name: each, args: [sh, -c, 'echo \"$AGORA_INSTANCE:$1\"', x],\n"
        "     args_file: inputs.txt, kill_grace: 20s}\n"
        "  - {name: listed, command: 'echo \"$AGORA_ARGS\"', instance_args: [one, two, three],\n"
        "     after: [each]}\n"
        "  - {name: later, command: 'true', begin: 1h, image: 'busybox:latest', network: none}\n"
    )
    result = await cluster.cli("job", "submit", "-f", str(graph), "--json")
    assert result.code == 0, result.err
    import json

    ids = {row["name"]: row["job_id"] for row in json.loads(result.out)}
    listed = await cluster.wait_state(ids["listed"], B.JOB_SUCCEEDED)
    assert listed.spec.instances == 3 and list(listed.spec.instance_args) == ["one", "two", "three"]
    each = await cluster.job(ids["each"])
    assert each.spec.instances == 2 and each.spec.task.kill_grace_period_seconds == 20
    logs = await cluster.cli("job", "logs", ids["each"], "--instance", "1")
    assert logs.out.strip() == "1:beta", logs.err
    logs = await cluster.cli("job", "logs", ids["listed"], "--instance", "2")
    assert logs.out.strip() == "three", logs.err
    later = await cluster.job(ids["later"])
    assert later.pending_reason == B.PENDING_BEGIN_TIME
    assert later.spec.begin_at > each.submitted_at + 3000
    assert later.spec.task.container.image == "busybox:latest"
    assert later.spec.task.container.network == "none"
    await cluster.stub.KillJob(B.KillJobRequest(job_id=ids["later"]))


async def test_an_instance_past_its_time_limit_is_killed_fails_and_is_retried(cluster):
    """Issue 36, item 3 (without backfill): --time-limit is the task's max_completion_seconds,
    enforced by the agent that runs it; the instance fails with the reason, and is retried
    while retries remain."""
    job_id = await cluster.submit("sleep 60", time_limit_seconds=1, max_retries=1)
    job = await cluster.wait_state(job_id, B.JOB_FAILED)
    attempts = list(job.instances[0].attempts)
    assert len(attempts) == 2
    for attempt in attempts:
        assert attempt.state == C.TASK_FAILED, attempt
        assert attempt.reason == "TIMEOUT"
        assert "ran past its time limit of 1 s" in attempt.message


async def test_an_array_never_runs_more_instances_at_once_than_its_limit(cluster):
    """Issue 36, item 4: --instances 8 --max-running 2 (Slurm's --array=1-8%2): never more
    than two at once, all eight in the end, each with its own index."""
    job_id = await cluster.submit('echo "$AGORA_INSTANCE"; sleep 0.3', instances=8, max_running=2)
    most = 0
    async with asyncio.timeout(60):
        while True:
            job = await cluster.job(job_id)
            most = max(most, job.counts.running)
            if job.state == B.JOB_SUCCEEDED:
                break
            await asyncio.sleep(0.05)
    assert 1 <= most <= 2
    starts = sorted((a.started_at, a.ended_at) for i in job.instances for a in i.attempts)
    # Never three at once, by the attempts' own times too.
    for t, _ in starts:
        assert sum(1 for s, e in starts if s <= t < e) <= 2
    logs = await cluster.cli("job", "logs", job_id, "--instance", "5")
    assert logs.out.strip() == "5", logs.err


def test_a_gang_larger_than_its_running_limit_is_refused():
    from agora.frameworks.batch.validation import SpecError, validate_spec
    from agora.v1 import common_pb2

    task = B.TaskTemplate(command=common_pb2.CommandInfo(shell="true"), cpus=0.1, mem=16)
    with pytest.raises(SpecError, match="--max-running 2 would never let it start"):
        validate_spec(B.JobSpec(name="g", instances=4, gang=True, max_running=2, task=task))
    validate_spec(B.JobSpec(name="g", instances=4, gang=True, max_running=4, task=task))


async def test_each_instance_takes_its_line_of_an_args_file(cluster, tmp_path):
    """Issue 36, item 4: per-index arguments. `--args-file` has one line per instance (and
    sets the count); an argv command gets the line's words appended, and every instance sees
    its line in $AGORA_ARGS."""
    lines = tmp_path / "inputs.txt"
    lines.write_text("alpha 1\n\nbeta 2\n'gamma delta' 3\n")
    script = 'echo "$AGORA_INSTANCE|$AGORA_ARGS|$1|$2"'
    submitted = await cluster.cli(
        "job", "submit", "--args-file", str(lines), "--wait", "--", "sh", "-c", script, "x"
    )
    assert submitted.code == 0, submitted.err
    job_id = submitted.out.split()[0]
    job = await cluster.job(job_id)
    assert job.spec.instances == 3 and job.state == B.JOB_SUCCEEDED
    expected = ["0|alpha 1|alpha|1", "1|beta 2|beta|2", "2|'gamma delta' 3|gamma delta|3"]
    for index, line in enumerate(expected):
        logs = await cluster.cli("job", "logs", job_id, "--instance", str(index))
        assert logs.out.strip() == line, logs.err
    mismatch = await cluster.cli(
        "job", "submit", "--args-file", str(lines), "--instances", "5", "--", "true"
    )
    assert mismatch.code != 0 and "3 per-instance arguments for 5 instances" in mismatch.err
