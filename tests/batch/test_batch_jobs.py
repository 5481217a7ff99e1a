"""The batch framework end to end: a real master, real agents running real processes, the batch
daemon, and `agora job` as a user runs it."""

from __future__ import annotations

import asyncio
import json

import pytest
from batch_harness import BatchCluster, run_cli
from harness import eventually_async

from agora.common.rpc import insecure_channel
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C
from agora.v1 import operator_pb2, operator_pb2_grpc


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


async def master_tasks(cluster: BatchCluster) -> list:
    async with insecure_channel(cluster.master.address) as channel:
        reply = await operator_pb2_grpc.OperatorStub(channel).ListTasks(
            operator_pb2.ListTasksRequest()
        )
    return list(reply.tasks)


async def test_ten_instances_succeed_and_their_logs_are_readable(cluster):
    result = await cluster.cli(
        "job",
        "submit",
        "--name",
        "ten",
        "--instances",
        "10",
        "--cpus",
        "0.1",
        "--mem",
        "16",
        "--wait",
        "--",
        "echo hello from instance $AGORA_INSTANCE; echo to stderr >&2",
    )
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    job_id = lines[0]
    assert job_id.startswith("job-")
    assert f"job {job_id} SUCCEEDED" in lines[-1]
    assert any("10/10 done" in line for line in lines)  # plain progress lines off a TTY

    job = await cluster.job(job_id)
    assert job.state == B.JOB_SUCCEEDED and job.counts.succeeded == 10
    hosts = {i.attempts[0].hostname for i in job.instances}
    # Offers sized by demand: 10 x 0.1 cpu fit in one agent, so one agent was offered.
    assert len(hosts) == 1 and hosts < {"host-0", "host-1"}
    for instance in job.instances:
        assert [a.state for a in instance.attempts] == [C.TASK_FINISHED]
        assert instance.attempts[0].exit_code == 0

    logs = await cluster.cli("job", "logs", job_id, "--instance", "7")
    assert logs.code == 0, logs.err
    assert logs.out == "hello from instance 7\n"
    err = await cluster.cli("job", "logs", job_id, "--instance", "7", "--stderr")
    assert err.out == "to stderr\n"
    follow = await cluster.cli("job", "logs", job_id, "--instance", "2", "--follow")
    assert follow.code == 0 and follow.out == "hello from instance 2\n"

    status = await cluster.cli("job", "status", job_id, "--json")
    assert json.loads(status.out)["state"] == "JOB_SUCCEEDED"
    text = (await cluster.cli("job", "status", job_id)).out
    assert "SUCCEEDED" in text and "10 succeeded" in text
    listing = await cluster.cli("job", "list")
    assert job_id in listing.out and "10/10" in listing.out
    listed = json.loads((await cluster.cli("job", "list", "--json")).out)
    assert [j["job_id"] for j in listed] == [job_id]


async def test_instance_fails_twice_then_succeeds_within_retries(cluster, tmp_path):
    counter = tmp_path / "attempts"
    script = (
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}; "
        "echo run $n; [ $n -ge 3 ] || exit 1"
    )
    job_id = await cluster.submit(script, instances=1, max_retries=2)
    job = await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    attempts = job.instances[0].attempts
    assert [a.state for a in attempts] == [C.TASK_FAILED, C.TASK_FAILED, C.TASK_FINISHED]
    assert [a.exit_code for a in attempts] == [1, 1, 0]
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert job.instances[0].failures == 2
    assert counter.read_text().strip() == "3"
    # Each attempt keeps its own sandbox and logs.
    assert (await cluster.cli("job", "logs", job_id)).out == "run 3\n"
    assert (await cluster.cli("job", "logs", job_id, "--attempt", "1")).out == "run 1\n"


async def test_job_that_exhausts_its_retries_fails(cluster):
    as_json = await cluster.cli(
        "job", "submit", "--retries", "0", "--wait", "--json", "--", "exit 5"
    )
    assert as_json.code == 1
    failed = json.loads(as_json.out)
    assert failed["state"] == "JOB_FAILED" and failed["spec"]["name"] == "exit"
    assert failed["instances"][0]["attempts"][0]["exit_code"] == 5

    result = await cluster.cli(
        "job",
        "submit",
        "--name",
        "doomed",
        "--instances",
        "2",
        "--retries",
        "1",
        "--wait",
        "--",
        "echo trying; exit 3",
    )
    assert result.code == 1
    job_id = result.out.splitlines()[0]
    assert f"job {job_id} FAILED" in result.err
    job = await cluster.job(job_id)
    assert job.state == B.JOB_FAILED and job.counts.failed == 2
    for instance in job.instances:
        assert instance.state == B.INSTANCE_FAILED
        assert [a.exit_code for a in instance.attempts] == [3, 3]  # first try + 1 retry
    assert "exited with code 3" in job.message


async def test_gang_that_cannot_fit_launches_nothing_and_stays_queued(cluster):
    # Two agents of 2 cpus: at most two instances of 1.5 cpus fit, never three at once.
    gang = await cluster.submit("true", instances=3, cpus=1.5, gang=True)
    # Its message is set when it is passed over in a round of offers.
    job = await eventually_async(
        lambda: _with_message(cluster, gang, "gang of 3"),
        timeout=30,
        message="the gang job considered and held",
    )
    assert job.state == B.JOB_QUEUED
    assert "could hold at most 2 of its 3 instances at once" in job.message
    # A small plain job behind it still runs (backfill), while the gang holds nothing.
    small = await cluster.submit("true", instances=2)
    await cluster.wait_state(small, B.JOB_SUCCEEDED)
    job = await cluster.job(gang)
    assert job.state == B.JOB_QUEUED and job.counts.pending == 3
    assert all(not i.attempts for i in job.instances)
    assert not [t for t in await master_tasks(cluster) if t.task_id.startswith(gang)]


async def _with_message(cluster, job_id, text):
    job = await cluster.job(job_id)
    return job if text in job.message else None


async def test_gang_that_fits_launches_all_at_once(cluster):
    gang = await cluster.submit("true", instances=4, cpus=1.0, gang=True)
    job = await cluster.wait_state(gang, B.JOB_SUCCEEDED)
    launched = {i.attempts[0].launched_at for i in job.instances}
    assert len(launched) <= 2  # one launch per agent, in the same round of offers
    assert {i.attempts[0].hostname for i in job.instances} == {"host-0", "host-1"}


async def test_kill_a_job_its_tasks_end_killed(cluster):
    job_id = await cluster.submit("sleep 60", instances=3)

    async def all_running():
        job = await cluster.job(job_id)
        return (
            job
            if job.counts.running == 3
            and all(i.attempts[-1].state == C.TASK_RUNNING for i in job.instances)
            else None
        )

    await eventually_async(all_running, timeout=30, message="3 instances running")
    result = await cluster.cli("job", "kill", job_id)
    assert result.code == 0, result.err
    # The count is what the kill found running, not what is left once some kills landed.
    assert "KILLED (3 running task(s) being killed)" in result.out

    async def all_killed():
        job = await cluster.job(job_id)
        return job if all(i.attempts[-1].state == C.TASK_KILLED for i in job.instances) else None

    job = await eventually_async(all_killed, timeout=30, message="tasks KILLED")
    assert job.state == B.JOB_KILLED and job.counts.killed == 3
    for task in await master_tasks(cluster):
        assert task.state in (C.TASK_KILLED,) or not task.task_id.startswith(job_id)
    again = await cluster.cli("job", "kill", job_id)
    assert again.code == 1 and "already ended" in again.err


async def test_watch_streams_every_change_until_the_end(cluster):
    job_id = await cluster.submit("true", instances=2)
    events = [e async for e in cluster.stub.WatchJob(B.WatchJobRequest(job_id=job_id))]
    assert events[-1].job.state == B.JOB_SUCCEEDED
    finished = [e for e in events if e.attempt.state == C.TASK_FINISHED]
    assert sorted(e.instance for e in finished) == [0, 1]
    assert all(e.description for e in events)


async def test_queue_is_suppressed_when_idle(cluster):
    job_id = await cluster.submit("true")
    await cluster.wait_state(job_id, B.JOB_SUCCEEDED)

    async def suppressed():
        async with insecure_channel(cluster.master.address) as channel:
            reply = await operator_pb2_grpc.OperatorStub(channel).ListFrameworks(
                operator_pb2.ListFrameworksRequest()
            )
        batch = [f for f in reply.frameworks if f.info.name == "batch"]
        return (
            batch and batch[0].suppressed and batch[0].info.service_address == cluster.batch.address
        )

    await eventually_async(suppressed, timeout=30, message="batch suppressed when idle")
    # New work revives it.
    again = await cluster.submit("true")
    await cluster.wait_state(again, B.JOB_SUCCEEDED)


@pytest.mark.parametrize("policy, first", [("priority", "urgent"), ("fifo", "early")])
async def test_queue_policy_decides_who_runs_first(tmp_path, policy, first):
    # One agent with room for one task at a time: the queue order is the run order.
    c = BatchCluster(
        tmp_path, agent_resources=["cpus:1;mem:256"], batch_overrides={"queue": policy}
    )
    await c.start()
    try:
        gate = tmp_path / "go"
        blocker = await c.submit(f"while [ ! -f {gate} ]; do sleep 0.05; done", cpus=1)
        await eventually_async(lambda: _running(c, blocker), timeout=30, message="blocker runs")
        early = await c.submit("true", cpus=1, name="early", priority=0)
        urgent = await c.submit("true", cpus=1, name="urgent", priority=10)
        gate.touch()
        jobs = {
            "early": await c.wait_state(early, B.JOB_SUCCEEDED),
            "urgent": await c.wait_state(urgent, B.JOB_SUCCEEDED),
        }
        second = "early" if first == "urgent" else "urgent"
        assert (
            jobs[first].instances[0].attempts[0].launched_at
            < jobs[second].instances[0].attempts[0].launched_at
        )
    finally:
        await c.stop()


async def _running(cluster, job_id):
    job = await cluster.job(job_id)
    return job.counts.running == 1 and job.instances[0].attempts[-1].state == C.TASK_RUNNING


async def test_logs_follow_streams_until_the_task_ends(cluster, tmp_path):
    gate = tmp_path / "go"
    job_id = await cluster.submit(
        f"echo first; while [ ! -f {gate} ]; do sleep 0.05; done; echo second"
    )
    await eventually_async(lambda: _running(cluster, job_id), timeout=30, message="running")
    follow = asyncio.create_task(cluster.cli("job", "logs", job_id, "--follow"))

    async def first_line():
        return (await cluster.cli("job", "logs", job_id)).out == "first\n"

    await eventually_async(first_line, timeout=30, message="first line written")
    gate.touch()
    result = await asyncio.wait_for(follow, timeout=60)
    assert result.code == 0, result.err
    assert result.out == "first\nsecond\n"


async def _block_both_agents(c: BatchCluster, tmp_path) -> tuple[list, list[str]]:
    """A 1-cpu job running on each agent until its gate file appears: (gates, job ids)."""
    gates = [tmp_path / "a", tmp_path / "b"]
    blockers = [
        await c.submit(f"while [ ! -f {gate} ]; do sleep 0.05; done", cpus=1) for gate in gates
    ]
    for blocker in blockers:
        await eventually_async(
            lambda b=blocker: _running(c, b), timeout=30, message="blocker running"
        )
    return gates, blockers


async def test_gang_launches_once_agents_freed_at_different_times_are_all_free(tmp_path):
    # Two agents of 1 cpu, each busy with a blocker; the gang needs both at once.
    c = BatchCluster(tmp_path, agent_resources=["cpus:1;mem:256", "cpus:1;mem:256"])
    await c.start()
    try:
        gates, blockers = await _block_both_agents(c, tmp_path)
        gang = await c.submit("true", instances=2, cpus=1, gang=True)
        # One agent frees up and is declined (the gang needs two) before the other does.
        gates[0].touch()
        await c.wait_state(blockers[0], B.JOB_SUCCEEDED)
        await eventually_async(
            lambda: _with_message(c, gang, "gang of 2"), timeout=30, message="gang passed over"
        )
        gates[1].touch()
        job = await c.wait_state(gang, B.JOB_SUCCEEDED, timeout=30)
        assert {i.attempts[0].hostname for i in job.instances} == {"host-0", "host-1"}
    finally:
        await c.stop()


async def test_a_gang_holds_what_frees_up_so_later_small_jobs_cannot_starve_it(tmp_path):
    # Two agents of 1 cpu, each busy; the gang needs both. When one frees up, the master keeps
    # it for the gang (Scheduler.Hold) instead of offering it to a small job submitted later.
    c = BatchCluster(tmp_path, agent_resources=["cpus:1;mem:256", "cpus:1;mem:256"])
    await c.start()
    try:
        gates, blockers = await _block_both_agents(c, tmp_path)
        gang = await c.submit("true", instances=2, cpus=1, gang=True)
        await eventually_async(
            lambda: _with_message(c, gang, "the master holds resources for it"),
            timeout=30,
            message="the gang's hold asked for",
        )
        gates[0].touch()
        await c.wait_state(blockers[0], B.JOB_SUCCEEDED)
        small = await c.submit("true", cpus=1)  # would take the free agent without the hold
        await asyncio.sleep(1.0)
        assert (await c.job(small)).state == B.JOB_QUEUED
        gates[1].touch()
        job = await c.wait_state(gang, B.JOB_SUCCEEDED, timeout=30)
        assert {i.attempts[0].hostname for i in job.instances} == {"host-0", "host-1"}
        small_job = await c.wait_state(small, B.JOB_SUCCEEDED, timeout=30)
        gang_start = max(i.attempts[0].launched_at for i in job.instances)
        assert small_job.instances[0].attempts[0].launched_at >= gang_start
    finally:
        await c.stop()


async def test_job_commands_reach_the_batch_daemon_while_the_master_is_down(cluster):
    job_id = await cluster.submit("true", instances=2)
    await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    master_address = cluster.master.address
    await cluster.master.stop(0)
    cluster.master = None  # stopped: the fixture's teardown skips it
    through_master = await asyncio.to_thread(
        run_cli, "job", "status", job_id, "--master", master_address
    )
    assert through_master.code == 1  # the master cannot point at the batch daemon
    direct = await asyncio.to_thread(
        run_cli, "job", "status", job_id, "--master", master_address, "--batch",
        cluster.batch.address, "--json",
    )  # fmt: skip
    assert direct.code == 0, direct.err
    assert json.loads(direct.out)["state"] == "JOB_SUCCEEDED"


async def test_wait_says_why_a_job_waits_and_ctrl_c_says_it_keeps_running(cluster):
    import signal
    import subprocess
    import sys

    from harness import ROOT

    # A gang of 6 instances of 1 cpu on two 2-cpu agents can never start.
    proc = subprocess.Popen(
        [sys.executable, "-m", "agora.cli.main", "job", "submit", "--master",
         cluster.master.address, "--gang", "--instances", "6", "--cpus", "1", "--mem", "16",
         "--wait", "--", "true"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []

    def read_until_reason() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "could hold at most" in line:
                return

    await asyncio.wait_for(asyncio.to_thread(read_until_reason), 60)
    assert "[QUEUED]: " in lines[-1] and "4 of its 6 instances" in lines[-1], lines
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 130
    assert "keeps running" in err and "agora job kill" in err and "Traceback" not in err


async def test_only_the_newest_finished_jobs_are_remembered(tmp_path):
    c = await BatchCluster(tmp_path, batch_overrides={"max_finished_jobs": 2}).start()
    try:
        ids = []
        for _ in range(4):
            job_id = await c.submit("true")
            await c.wait_state(job_id, B.JOB_SUCCEEDED)
            ids.append(job_id)
        await c.submit("sleep 30")  # a submission forgets what is past the bound
        listed = [j.job_id for j in (await c.stub.ListJobs(B.ListJobsRequest())).jobs]
        assert ids[:2] == [i for i in ids if i not in listed]  # the two oldest forgotten
        assert ids[2:] == [i for i in listed if i in ids]
        # In the store too: a restarted daemon remembers the same.
        await c.stop_batch()
        await c.start_batch()
        again = [j.job_id for j in (await c.stub.ListJobs(B.ListJobsRequest())).jobs]
        assert [i for i in again if i in ids] == ids[2:]
    finally:
        await c.stop()


async def test_list_jobs_gives_instances_only_when_asked(cluster):
    job_id = await cluster.submit("true", instances=3)
    await cluster.wait_state(job_id, B.JOB_SUCCEEDED)
    [short] = (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs
    assert short.job_id == job_id and not short.instances
    assert short.counts.succeeded == 3 and short.spec.instances == 3
    [whole] = (await cluster.stub.ListJobs(B.ListJobsRequest(include_instances=True))).jobs
    assert [i.state for i in whole.instances] == [B.INSTANCE_SUCCEEDED] * 3
    assert whole.counts == short.counts


async def test_an_instance_on_a_drained_agent_runs_again_elsewhere_without_using_a_retry(cluster):
    # No retries: were the drain's kill counted as a failure, the job would fail.
    job_id = await cluster.submit("sleep 300", instances=1, max_retries=0)

    async def running_attempt():
        job = await cluster.job(job_id)
        attempts = job.instances[0].attempts
        return attempts[-1] if attempts and attempts[-1].state == C.TASK_RUNNING else None

    first = await eventually_async(running_attempt, message="the instance running")
    drained = await asyncio.to_thread(
        run_cli,
        *("cluster", "drain", first.agent_id, "--master", cluster.master.address),
        *("--deadline", "1s", "--wait"),
    )
    assert drained.code == 0, drained.err
    assert f"agent {first.agent_id}: draining, no new offers; 1 task(s) there" in drained.out
    assert f"agent {first.agent_id}: drained, no task runs there" in drained.out
    second = await eventually_async(running_attempt, message="the instance running again")
    job = await cluster.job(job_id)
    killed = job.instances[0].attempts[0]
    assert (killed.state, killed.reason) == (C.TASK_KILLED, "REASON_AGENT_DRAINED")
    assert second.attempt == 2 and second.agent_id != first.agent_id
    assert job.instances[0].failures == 0 and job.state == B.JOB_RUNNING
    await cluster.stub.KillJob(B.KillJobRequest(job_id=job_id))


async def test_a_waiting_job_says_when_the_batch_daemon_has_lost_the_master(cluster):
    # Both agents full (2 cpus each): the next job's instance waits, then the master goes away.
    await cluster.submit("sleep 60", instances=2, cpus=2)
    job_id = await cluster.submit("true", instances=1, cpus=1)
    await eventually_async(
        lambda: _message_has(cluster, job_id, "waiting for offers"), message="the job waiting"
    )
    await cluster.master.stop(0)
    cluster.master = None  # stopped: the fixture's teardown skips it
    job = await eventually_async(
        lambda: _message_has(cluster, job_id, "the batch daemon lost the master at"),
        message="the job saying why it waits",
    )
    assert job.message.endswith("instances wait until it is back")
    assert job.state == B.JOB_QUEUED


async def _message_has(cluster: BatchCluster, job_id: str, text: str):
    job = await cluster.job(job_id)
    return job if text in job.message else None
