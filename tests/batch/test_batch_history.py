"""Issue 36, item 8 (accounting): `agora job history` lists finished jobs instance by instance
with exit code, start, end, agent, and the CPU seconds and peak memory the agent measured
(its task wrapper's getrusage); finished jobs are kept for a time and a count the operator
sets."""

from __future__ import annotations

import json

from batch_harness import BatchCluster

from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.store import JobStore
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C

BURN = (
    "import time; b = bytearray(48 << 20); b[::4096] = b'x' * len(b[::4096]); "
    "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
)


async def test_history_shows_what_each_instance_used(tmp_path):
    cluster = await BatchCluster(tmp_path).start()
    try:
        burn = await cluster.submit(["python3", "-c", BURN], mem=128, owner="alice")
        fail = await cluster.submit("exit 3", owner="bob")
        await cluster.wait_state(burn, B.JOB_SUCCEEDED)
        await cluster.wait_state(fail, B.JOB_FAILED)

        shown = await cluster.cli("job", "history")
        assert shown.code == 0, shown.err
        lines = {line.split()[0]: line.split() for line in shown.out.splitlines()[1:]}
        assert lines[burn][2:6] == ["alice", "0", "SUCCEEDED", "0"]
        assert lines[fail][2:6] == ["bob", "0", "FAILED", "3"]
        # CPU S and PEAK MB, then ATTEMPTS: what the agent measured.
        cpu, peak = float(lines[burn][-3]), float(lines[burn][-2])
        assert cpu >= 0.3 and peak >= 48, lines[burn]

        alices = await cluster.cli("job", "history", "--owner", "alice", "--json")
        [job] = json.loads(alices.out)
        usage = job["instances"][0]["attempts"][0]["usage"]
        assert int(usage["mem_peak_bytes"]) >= 48 << 20
        recent = await cluster.cli("job", "history", "--since", "1h")
        assert burn in recent.out and fail in recent.out
        running = await cluster.submit("sleep 60")
        assert running not in (await cluster.cli("job", "history")).out
        await cluster.stub.KillJob(B.KillJobRequest(job_id=running))
    finally:
        await cluster.stop()


async def test_what_instances_used_survives_a_restart_of_the_batch_daemon(tmp_path):
    cluster = await BatchCluster(tmp_path).start()
    try:
        burn = await cluster.submit(["python3", "-c", BURN], mem=128, owner="alice")
        await cluster.wait_state(burn, B.JOB_SUCCEEDED)
        before = await cluster.cli("job", "history", "--json")
        [job] = json.loads(before.out)
        usage = job["instances"][0]["attempts"][0]["usage"]
        cpu = float(usage["cpu_user_seconds"]) + float(usage.get("cpu_system_seconds", 0))
        assert cpu >= 0.3 and int(usage["mem_peak_bytes"]) >= 48 << 20

        await cluster.stop_batch()
        await cluster.start_batch()
        after = await cluster.cli("job", "history", "--json")
        assert after.code == 0, after.err
        [again] = json.loads(after.out)
        assert again["instances"][0]["attempts"][0]["usage"] == usage
        shown = await cluster.cli("job", "history")
        row = next(line.split() for line in shown.out.splitlines() if line.startswith(burn))
        assert float(row[-3]) >= 0.3 and float(row[-2]) >= 48, row  # CPU S, PEAK MB
    finally:
        await cluster.stop()


async def test_finished_jobs_are_forgotten_after_the_time_kept(tmp_path):
    now = [1000.0]
    scheduler = BatchScheduler(
        JobStore(tmp_path / "batch.sqlite3"), clock=lambda: now[0], keep_finished_seconds=60
    )
    spec = B.JobSpec(
        name="old",
        instances=1,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16),
    )
    job = scheduler.submit(spec)
    await scheduler.kill(job.job_id)  # ended, no task ever ran: finished
    now[0] += 59
    assert scheduler.forget_old_jobs(by_age=True) == []
    now[0] += 2
    assert scheduler.forget_old_jobs() == []  # a submission's sweep counts only
    assert scheduler.forget_old_jobs(by_age=True) == [job.job_id]
    scheduler.close()
    scheduler.store.close()
    # Forgotten in the store too: a restarted daemon does not bring it back.
    again = BatchScheduler(JobStore(tmp_path / "batch.sqlite3"), clock=lambda: now[0])
    assert again.jobs == {}
    again.store.close()


async def test_history_takes_a_limit_keeping_the_newest_jobs(tmp_path):
    """ListJobsRequest.limit cuts the answer to the newest jobs before they are copied (the
    dashboard's history page asks for 200), saying how many matched; `agora job history
    --limit N` asks the same."""
    cluster = await BatchCluster(tmp_path).start()
    try:
        ended = []
        for _ in range(5):  # killed before their begin time: ended, and at once
            job_id = await cluster.submit("true", begin_at=4_000_000_000)
            await cluster.stub.KillJob(B.KillJobRequest(job_id=job_id))
            ended.append(job_id)
        waiting = await cluster.submit("true", begin_at=4_000_000_000)
        states = [B.JOB_SUCCEEDED, B.JOB_FAILED, B.JOB_KILLED]
        reply = await cluster.stub.ListJobs(B.ListJobsRequest(states=states, limit=2))
        assert [j.job_id for j in reply.jobs] == ended[-2:]  # the newest, in submission order
        assert reply.total == 5
        everything = await cluster.stub.ListJobs(B.ListJobsRequest())
        assert [j.job_id for j in everything.jobs] == [*ended, waiting]
        assert everything.total == 6

        shown = await cluster.cli("job", "history", "--limit", "3", "--json")
        assert shown.code == 0, shown.err
        assert [job["job_id"] for job in json.loads(shown.out)] == ended[-3:]
        refused = await cluster.cli("job", "history", "--limit", "0")
        assert refused.code != 0 and "'0' is not a whole number from 1" in refused.err
        await cluster.stub.KillJob(B.KillJobRequest(job_id=waiting))
    finally:
        await cluster.stop()
