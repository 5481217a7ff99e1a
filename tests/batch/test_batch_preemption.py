"""Preemption end to end (issue 34's first acceptance case, on real agents and two batch daemons):
role a's job fills both agents; role b, guaranteed 1 cpu, submits two tasks; past the timeout
exactly two of a's tasks are stopped, b's job runs, and a's stopped instances wait to run again
without spending a retry, their attempts saying why they ended, and finish later."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request

from batch_harness import BatchCluster, run_cli
from harness import eventually_async

from agora.common import Resources
from agora.common.rpc import insecure_channel
from agora.frameworks.batch import BatchDaemon
from agora.v1 import batch_pb2 as B
from agora.v1 import batch_pb2_grpc
from agora.v1 import common_pb2 as C


async def second_daemon(cluster: BatchCluster, role: str, state_dir):
    """Another batch daemon, of `role`, on the same master; with a channel to it and a stub."""
    daemon = BatchDaemon(
        dataclasses.replace(cluster.batch_config(), role=role, state_dir=state_dir)
    )
    await daemon.start()
    channel = insecure_channel(daemon.address)
    return daemon, channel, batch_pb2_grpc.BatchStub(channel)


async def test_a_role_below_its_guarantee_preempts_two_tasks_and_no_more(tmp_path):
    # a's tasks run until the test releases them (then each exits 0 at once, a re-run too).
    release = tmp_path / "release"
    a_command = f"while [ ! -e {release} ]; do sleep 0.1; done"
    cluster = BatchCluster(
        tmp_path,
        batch_overrides={"role": "a"},
        master_overrides={"guarantee_preemption_timeout_seconds": 2.0, "http_port": 0},
    )
    await cluster.start()
    b_daemon = None
    try:
        a_job = await cluster.submit(a_command, instances=8, cpus=0.5, mem=64, max_retries=0)

        async def all_running():
            job = await cluster.job(a_job)
            return job if job.counts.running == 8 else None

        await eventually_async(all_running, timeout=30, message="a's 8 tasks running")
        cluster.master.core.allocator.set_quota("b", Resources.parse("cpus:1"), None)
        b_daemon, channel, stub = await second_daemon(cluster, "b", tmp_path / "b")
        spec = B.JobSpec(
            name="b",
            instances=2,
            task=B.TaskTemplate(command=C.CommandInfo(shell="sleep 300"), cpus=0.5, mem=64),
        )
        b_job = (await stub.SubmitJob(B.SubmitJobRequest(spec=spec))).job_id

        async def b_running():
            job = await stub.GetJob(B.GetJobRequest(job_id=b_job))
            return job if job.counts.running == 2 else None

        await eventually_async(b_running, timeout=30, message="b's two tasks run by preemption")
        await asyncio.sleep(3.0)  # more than the timeout again: nothing more is stopped
        job = await cluster.job(a_job)
        ended = [
            a for instance in job.instances for a in instance.attempts if a.state == C.TASK_KILLED
        ]
        assert len(ended) == 2, [(a.task_id, a.state, a.reason) for a in ended]
        for attempt in ended:
            assert attempt.reason == "REASON_PREEMPTED"
            assert "preempted: role b needs" in attempt.message
        # Not the tasks' fault: no retry spent (max_retries 0), and the job runs on.
        assert all(instance.failures == 0 for instance in job.instances)
        assert job.state == B.JOB_RUNNING and job.counts.running == 6
        # The operator sees them, with why, and the master counted them.
        listed = await asyncio.to_thread(
            run_cli, "cluster", "preemptions", "--json", "--master", cluster.master.address
        )
        rows = json.loads(listed.out)
        assert sorted(r["task_id"] for r in rows) == sorted(a.task_id for a in ended)
        assert {(r["role"], r["beneficiary"], r["reason"]) for r in rows} == {
            ("a", "b", "guarantee")
        }
        counted = cluster.master.metrics.preemptions.labels("guarantee")._value.get()
        assert counted == 2
        # The dashboard's offers page lists them too.
        url = cluster.master.http_url + "/api/offers"
        shown = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(url, timeout=10)))
        assert sorted(p["task_id"] for p in shown["preemptions"]) == sorted(
            a.task_id for a in ended
        )
        assert {p["beneficiary"] for p in shown["preemptions"]} == {"b"}
        # The two preempted instances were re-queued, not failed: they wait for room.
        preempted = {a.task_id for a in ended}
        waiting = [i for i in job.instances if i.attempts[-1].task_id in preempted]
        assert len(waiting) == 2 and all(i.state == B.INSTANCE_PENDING for i in waiting)
        # b's work done, room frees: a's re-queued instances run again and the job succeeds,
        # still without a retry spent (max_retries 0: one failure would have failed the job).
        await stub.KillJob(B.KillJobRequest(job_id=b_job))
        release.touch()
        job = await cluster.wait_state(a_job, B.JOB_SUCCEEDED, timeout=30)
        assert job.counts.succeeded == 8 and all(i.failures == 0 for i in job.instances)
        for instance in job.instances:
            first, last = instance.attempts[0], instance.attempts[-1]
            assert last.state == C.TASK_FINISHED and last.exit_code == 0
            if first.task_id in preempted:  # ended once for b, then ran to its end
                assert len(instance.attempts) == 2 and last.task_id not in preempted
                assert (first.state, first.reason) == (C.TASK_KILLED, "REASON_PREEMPTED")
                assert first.message.startswith("preempted: role b needs cpus:0.5;mem:64")
                assert first.message.endswith("(guarantee)")
                assert last.launched_at >= first.ended_at
            else:
                assert len(instance.attempts) == 1
        await channel.close()
    finally:
        if b_daemon is not None:
            await b_daemon.stop()
        await cluster.stop()


async def test_a_starved_gang_gets_its_shape_across_agents_through_its_hold(tmp_path):
    """Issue 34, item 1: a gang's shape on several agents. b's gang of 6 x 0.5 cpu (its
    guarantee, 3 cpus) is bigger than one agent of 2: its batch daemon asks the master to hold
    resources as they free up, preemption frees them for b task by task, the hold collects them
    on both agents, and the gang launches whole; exactly 6 of a's are stopped. b weighs 3, so
    a's fair share is a quarter (1 cpu): a task of a is a victim only while a keeps its fair
    share (allocator/preemption.py), and with equal weights a would keep 2 cpus and b's
    guarantee could not be met."""
    cluster = BatchCluster(
        tmp_path,
        batch_overrides={"role": "a"},
        master_overrides={"guarantee_preemption_timeout_seconds": 1.0},
    )
    await cluster.start()
    b_daemon = None
    try:
        a_job = await cluster.submit("sleep 300", instances=8, cpus=0.5, mem=64, max_retries=0)
        await eventually_async(
            lambda: cluster.batch.scheduler.jobs[a_job].counts.running == 8, timeout=30
        )
        cluster.master.core.allocator.set_quota("b", Resources.parse("cpus:3"), None)
        cluster.master.core.allocator.set_weight("b", 3.0)
        b_daemon, channel, stub = await second_daemon(cluster, "b", tmp_path / "b")
        spec = B.JobSpec(
            name="gang",
            instances=6,
            gang=True,
            task=B.TaskTemplate(command=C.CommandInfo(shell="sleep 300"), cpus=0.5, mem=64),
        )
        b_job = (await stub.SubmitJob(B.SubmitJobRequest(spec=spec))).job_id

        async def gang_running():
            job = await stub.GetJob(B.GetJobRequest(job_id=b_job))
            return job if job.counts.running == 6 else None

        job = await eventually_async(gang_running, timeout=60, message="b's gang runs whole")
        launched = sorted(i.attempts[0].launched_at for i in job.instances)
        assert launched[-1] - launched[0] < 1.0  # together, not one by one
        assert len({i.attempts[0].agent_id for i in job.instances}) == 2  # across both agents
        await asyncio.sleep(2.5)  # past the timeout again: nothing more is stopped
        a = cluster.batch.scheduler.jobs[a_job]
        ended = [x for i in a.instances for x in i.attempts if x.state == C.TASK_KILLED]
        assert len(ended) == 6 and all(x.reason == "REASON_PREEMPTED" for x in ended)
        await stub.KillJob(B.KillJobRequest(job_id=b_job))
        await channel.close()
    finally:
        if b_daemon is not None:
            await b_daemon.stop()
        await cluster.stop()


async def test_a_revocable_job_runs_on_lent_reservations_until_their_role_wants_them(tmp_path):
    """Issue 34, item 3, on the user's path: `agora job submit --revocable` also runs on what
    is free but kept from ordinary offers (here role ops's idle reservations). When ops's own
    batch daemon launches there, the instances it needs back are stopped at once
    (REASON_PREEMPTED, saying why) and wait to run again without spending a retry."""
    cluster = BatchCluster(
        tmp_path,
        agent_resources=["cpus:2;mem:1024;cpus(ops):2;mem(ops):512"],
        batch_overrides={"decline_refuse_seconds": 0.2},
    )
    await cluster.start()
    ops_daemon = None
    try:
        submitted = await cluster.cli(
            "job", "submit", "--revocable", "--instances", "8", "--cpus", "0.5", "--mem", "32",
            "--", "sleep 300",
        )  # fmt: skip
        assert submitted.code == 0, submitted.err
        spot = submitted.out.split()[0]
        await eventually_async(
            lambda: cluster.batch.scheduler.jobs[spot].counts.running == 8,
            timeout=30,
            message="4 instances on ordinary resources, 4 on ops's lent reservations",
        )

        # The batch daemon counts an instance running once its Accept is sent: wait for the
        # master to have taken it.
        def lent_tasks():
            tasks = cluster.master.core.reg.tasks.values()
            return len(tasks) == 8 and sorted(t.info.task_id for t in tasks if t.info.revocable)

        lent = await eventually_async(lent_tasks, timeout=10, message="the master has all 8")
        assert len(lent) == 4

        ops_daemon, channel, stub = await second_daemon(cluster, "ops", tmp_path / "ops")
        spec = B.JobSpec(
            name="ops",
            instances=2,
            task=B.TaskTemplate(
                command=C.CommandInfo(shell="sleep 300"), cpus=1, mem=64, role="ops"
            ),
        )
        ops_job = (await stub.SubmitJob(B.SubmitJobRequest(spec=spec))).job_id

        async def ops_running():
            job = await stub.GetJob(B.GetJobRequest(job_id=ops_job))
            return job if job.counts.running == 2 else None

        await eventually_async(ops_running, timeout=30, message="ops runs on its reservations")

        async def lent_stopped():
            job = await cluster.job(spot)
            ended = [a for i in job.instances for a in i.attempts if a.state == C.TASK_KILLED]
            return (job, ended) if len(ended) >= 4 else None

        job, stopped = await eventually_async(lent_stopped, timeout=30, message="lent stopped")
        assert sorted(a.task_id for a in stopped) == lent  # exactly the lent ones
        for attempt in stopped:
            assert attempt.reason == "REASON_PREEMPTED"
            assert "revoked: framework batch (role ops)" in attempt.message
        assert all(i.failures == 0 for i in job.instances)  # no retry spent
        assert job.counts.running == 4 and job.counts.pending == 4
        await stub.KillJob(B.KillJobRequest(job_id=ops_job))
        await channel.close()
    finally:
        if ops_daemon is not None:
            await ops_daemon.stop()
        await cluster.stop()


async def test_a_high_priority_job_preempts_low_priority_tasks_of_its_own_role(tmp_path):
    """Issue 34, item 2, on the user's path: `--priority` becomes TaskInfo.priority. Role a
    alone holds the cluster (at its share: fairness takes nothing from it); a job of priority
    5 waits past the fair-share timeout and exactly two of the priority-0 job's tasks are
    stopped for its two instances, which wait to run again without spending a retry. The
    daemon's queue places by priority (`agora batch --queue priority`): with FIFO it would
    put the stopped task back in the room freed for the urgent job, and the master, seeing
    that, stops nothing more for it (tests/master/test_core_preemption.py)."""
    cluster = BatchCluster(
        tmp_path,
        batch_overrides={"role": "a", "queue": "priority"},
        master_overrides={"fair_share_preemption_timeout_seconds": 2.0},
    )
    await cluster.start()
    try:
        low = await cluster.submit("sleep 300", instances=8, cpus=0.5, mem=64, max_retries=0)
        await eventually_async(
            lambda: cluster.batch.scheduler.jobs[low].counts.running == 8, timeout=30
        )
        high = await cluster.submit(
            "sleep 300", instances=2, cpus=0.5, mem=64, max_retries=0, priority=5
        )

        async def both_running():
            job = await cluster.job(high)
            return job if job.counts.running == 2 else None

        job = await eventually_async(both_running, timeout=30, message="the urgent job runs")
        # The master's tasks carry each job's priority (once its Accept, sent when the daemon
        # counts an instance running, has reached the master).
        ids = {i.attempts[-1].task_id for i in job.instances}

        def at_master():
            infos = [t.info for t in cluster.master.core.reg.tasks.values()]
            return len(ids & {i.task_id for i in infos}) == 2 and infos

        infos = await eventually_async(at_master, timeout=10, message="the master has them")
        assert {i.priority for i in infos if i.task_id in ids} == {5}
        by_task = {i.task_id: i for i in infos}
        await asyncio.sleep(2.5)  # past the timeout again: nothing more is stopped
        low_job = await cluster.job(low)
        ended = [x for i in low_job.instances for x in i.attempts if x.state == C.TASK_KILLED]
        assert len(ended) == 2, [(x.task_id, x.reason) for x in ended]
        for attempt in ended:
            assert attempt.reason == "REASON_PREEMPTED"
            assert attempt.message.startswith("preempted: role a needs cpus:0.5;mem:64")
            assert attempt.message.endswith("(priority)")
        running = [i for i in low_job.instances if i.state == B.INSTANCE_RUNNING]
        assert len(running) == 6
        assert {by_task[i.attempts[-1].task_id].priority for i in running} == {0}
        assert all(i.failures == 0 for i in low_job.instances)
        assert low_job.counts.pending == 2 and low_job.state == B.JOB_RUNNING
        assert [p.reason for p in cluster.master.core.preemptions.history] == ["priority"] * 2
    finally:
        await cluster.stop()
