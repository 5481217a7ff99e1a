"""Issue 36, item 2: cron schedules (`agora job schedule NAME --cron ...`). The rules alone
(fire times in a time zone, what a restart missed, what a collision does); the timer on an
injected clock, across a restart over the same SQLite file; then through the batch cluster with
real agents and `agora job`: runs fire, a daemon restart catches up once and never bursts,
suspend, resume and delete."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from zoneinfo import ZoneInfo

import grpc
import pytest
from batch_harness import BatchCluster
from harness import eventually_async

from agora.frameworks.batch import schedules as sch
from agora.frameworks.batch import state as st
from agora.frameworks.batch.cron import SCHEDULE_LABEL, Cron
from agora.frameworks.batch.scheduler import BatchScheduler
from agora.frameworks.batch.store import JobStore
from agora.v1 import batch_pb2 as B
from agora.v1 import common_pb2 as C

PARIS = ZoneInfo("Europe/Paris")


def spec(cron: str = "*/5 * * * *", **fields) -> B.ScheduleSpec:
    job = B.JobSpec(
        instances=1,
        task=B.TaskTemplate(command=C.CommandInfo(shell="true"), cpus=0.1, mem=16),
    )
    return B.ScheduleSpec(name=fields.pop("name", "nightly"), cron=cron, job=job, **fields)


def at(*parts: int, tz=PARIS) -> float:
    return datetime(*parts, tzinfo=tz).timestamp()


# --- the rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(cron="*/5 * * *"), "give five fields"),
        (dict(cron="61 * * * *"), "cron expression '61 \\* \\* \\* \\*'"),
        (dict(timezone="Mars/Olympus"), "unknown time zone 'Mars/Olympus'"),
        (dict(timezone="America"), "unknown time zone 'America'"),  # a directory
        (dict(timezone="x" * 300), "unknown time zone"),
        (dict(name="no spaces"), "schedule name"),
        (dict(starting_deadline_seconds=-1), "starting_deadline_seconds"),
    ],
)
def test_a_bad_schedule_is_refused_saying_what_to_change(change, message):
    bad = spec(**{"cron": change.pop("cron", "*/5 * * * *"), **change})
    with pytest.raises(sch.ScheduleError, match=message):
        sch.validate(bad)


def test_a_schedules_job_may_not_wait_for_other_jobs():
    bad = spec()
    bad.job.after.add(job="build")
    with pytest.raises(sch.ScheduleError, match="cannot wait for other jobs"):
        sch.validate(bad)


def test_fire_times_follow_the_time_zone_and_daylight_saving():
    daily = spec("30 2 * * *", timezone="Europe/Paris")
    # 02:30 does not exist on the spring-forward day: that day's run is at 03:00 local.
    first = sch.next_fire(daily, at(2026, 3, 28, 12, 0))
    assert datetime.fromtimestamp(first, PARIS).strftime("%d %H:%M") == "29 03:00"
    second = sch.next_fire(daily, first)
    assert datetime.fromtimestamp(second, PARIS).strftime("%d %H:%M %z") == "30 02:30 +0200"
    # In UTC (no time zone given) the same expression is 02:30 UTC.
    utc = sch.next_fire(spec("30 2 * * *"), at(2026, 3, 28, 12, 0))
    assert datetime.fromtimestamp(utc, ZoneInfo("UTC")).strftime("%d %H:%M") == "29 02:30"
    # A sixth field is seconds.
    assert sch.next_fire(spec("* * * * * */10"), 1000.0) == 1010.0


def test_a_restart_catches_up_once_for_the_latest_missed_time():
    every5 = spec("*/5 * * * *")
    schedule = B.Schedule(spec=every5, last_fire_time=at(2026, 1, 1, 10, 0))
    assert sch.due(schedule, at(2026, 1, 1, 10, 4, 59)).fire_time is None
    on_time = sch.due(schedule, at(2026, 1, 1, 10, 5, 1))
    assert on_time == sch.Due(at(2026, 1, 1, 10, 5), catch_up=False, missed=0)
    # Down from 10:00 to 10:23: 10:05, 10:10 and 10:15 are missed, 10:20 runs once, late.
    late = sch.due(schedule, at(2026, 1, 1, 10, 23))
    assert late == sch.Due(at(2026, 1, 1, 10, 20), catch_up=True, missed=3)
    # Past a starting deadline, even that one is skipped (and said why).
    schedule.spec.starting_deadline_seconds = 60
    skipped = sch.due(schedule, at(2026, 1, 1, 10, 23))
    assert skipped.fire_time == at(2026, 1, 1, 10, 20) and "past its starting deadline" in (
        skipped.skipped
    )
    assert sch.due(B.Schedule(spec=every5, suspended=True), at(2027, 1, 1)).fire_time is None


def test_a_collision_allows_forbids_or_replaces():
    assert sch.collide(B.CONCURRENCY_FORBID, []).run
    forbid = sch.collide(B.CONCURRENCY_FORBID, ["job-1"])
    assert not forbid.run and "job-1 has not ended" in forbid.skipped
    assert sch.collide(B.CONCURRENCY_REPLACE, ["job-1", "job-2"]).kill == ["job-1", "job-2"]
    allow = sch.collide(B.CONCURRENCY_ALLOW, ["job-1"])
    assert allow.run and not allow.kill


# --- the timer, on an injected clock ---------------------------------------------------------


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def book(path, clock: Clock) -> tuple[BatchScheduler, Cron]:
    store = JobStore(path)
    scheduler = BatchScheduler(store, clock=clock)
    return scheduler, Cron(scheduler, store)


def runs_of(scheduler: BatchScheduler, name: str) -> list[B.Job]:
    jobs = scheduler.list_jobs()
    return [j for j in jobs if j.spec.labels.get(SCHEDULE_LABEL) == name]


async def test_runs_fire_on_time_and_a_restart_catches_up_once(tmp_path):
    clock = Clock(at(2026, 1, 1, 9, 58))
    scheduler, cron = book(tmp_path / "batch.sqlite3", clock)
    created = cron.put(spec("*/5 * * * *"))
    assert created.next_run_at == at(2026, 1, 1, 10, 0)
    assert await cron.tick() == 0
    clock.now = at(2026, 1, 1, 10, 0, 1)
    assert await cron.tick() == 1
    assert await cron.tick() == 0  # a fire time runs once
    [first] = runs_of(scheduler, "nightly")
    assert first.spec.name == "nightly" and first.state == B.JOB_QUEUED
    scheduler.close()
    scheduler.store.close()

    # The daemon is down from 10:00 to 10:31: one run, for 10:30, and five missed.
    clock.now = at(2026, 1, 1, 10, 31)
    scheduler, cron = book(tmp_path / "batch.sqlite3", clock)
    assert await cron.tick() == 1
    assert await cron.tick() == 0
    runs = runs_of(scheduler, "nightly")
    assert len(runs) == 2  # the one before, and a single catch-up
    shown = cron.shown(cron.get("nightly"))
    assert [r.scheduled_for for r in shown.runs] == [at(2026, 1, 1, 10, 0), at(2026, 1, 1, 10, 30)]
    assert shown.runs[-1].catch_up and shown.runs[-1].job_id == runs[-1].job_id
    assert shown.runs[-1].state == B.JOB_QUEUED
    assert shown.missed == 5 and shown.next_run_at == at(2026, 1, 1, 10, 35)
    scheduler.close()
    scheduler.store.close()


async def test_forbid_skips_a_run_while_the_last_one_runs_and_replace_kills_it(tmp_path):
    clock = Clock(at(2026, 1, 1, 9, 59))
    scheduler, cron = book(None, clock)
    cron.put(spec("*/5 * * * *", concurrency=B.CONCURRENCY_FORBID))
    clock.now = at(2026, 1, 1, 10, 0)
    await cron.tick()
    clock.now = at(2026, 1, 1, 10, 5)
    await cron.tick()  # the first run never got offers: still queued
    schedule = cron.shown(cron.get("nightly"))
    assert len(runs_of(scheduler, "nightly")) == 1
    assert schedule.runs[-1].skipped.startswith("the previous run job-")
    assert schedule.missed == 1

    replace = spec("*/5 * * * *", concurrency=B.CONCURRENCY_REPLACE)
    cron.put(replace, replace=True)
    clock.now = at(2026, 1, 1, 10, 10)
    await cron.tick()
    first, second = runs_of(scheduler, "nightly")
    assert first.state == B.JOB_KILLED and second.state == B.JOB_QUEUED
    scheduler.close()


async def test_a_suspended_schedule_does_not_fire_nor_catch_up_when_resumed(tmp_path):
    clock = Clock(at(2026, 1, 1, 9, 59))
    scheduler, cron = book(None, clock)
    cron.put(spec("*/5 * * * *"))
    suspended = cron.suspend("nightly", True)
    assert suspended.suspended and suspended.next_run_at == 0
    clock.now = at(2026, 1, 1, 10, 17)
    assert await cron.tick() == 0
    resumed = cron.suspend("nightly", False)
    assert resumed.next_run_at == at(2026, 1, 1, 10, 20)
    assert await cron.tick() == 0
    clock.now = at(2026, 1, 1, 10, 20)
    assert await cron.tick() == 1
    scheduler.close()


# --- end to end --------------------------------------------------------------------------------


@pytest.fixture
async def cluster(tmp_path):
    c = await BatchCluster(tmp_path).start()
    yield c
    await c.stop()


async def schedule_of(cluster, name: str) -> B.Schedule:
    return await cluster.stub.GetSchedule(B.GetScheduleRequest(name=name))


async def test_a_schedule_runs_jobs_and_a_restart_catches_up_once(cluster):
    made = await cluster.cli(
        "job", "schedule", "ticker", "--cron", "* * * * * *", "--", "echo tick"
    )
    assert made.code == 0, made.err
    assert made.out.startswith("schedule ticker: next run ")

    async def succeeded_runs(n: int):
        schedule = await schedule_of(cluster, "ticker")
        done = [r for r in schedule.runs if r.state == B.JOB_SUCCEEDED]
        return schedule if len(done) >= n else None

    await eventually_async(lambda: succeeded_runs(2), timeout=30, message="two runs succeeded")
    jobs = (await cluster.stub.ListJobs(B.ListJobsRequest())).jobs
    assert {j.spec.name for j in jobs} == {"ticker"}

    await cluster.stop_batch()
    down = time.time()
    await asyncio.sleep(3.5)  # three or four fire times pass while the daemon is down
    back = time.time()
    await cluster.start_batch()

    async def fired_since_restart():
        schedule = await schedule_of(cluster, "ticker")
        after = [r for r in schedule.runs if r.fired_at >= back]
        return (schedule, after) if len(after) >= 3 else None

    schedule, after = await eventually_async(
        fired_since_restart, timeout=30, message="runs after the restart"
    )
    # One run for the fire times that passed while it was down, not a burst of them.
    assert [r.catch_up for r in after[:2]] == [True, False]
    assert len([r for r in after if r.scheduled_for <= back]) <= 1
    assert schedule.missed >= 2
    assert not [r for r in schedule.runs if down + 1 < r.scheduled_for < back - 1]
    times = [r.scheduled_for for r in schedule.runs]
    assert times == sorted(set(times))  # no fire time ran twice

    shown = await cluster.cli("job", "schedules", "ticker")
    assert shown.code == 0, shown.err
    assert "catch-up: the daemon was down at its time" in shown.out
    assert "SUCCEEDED" in shown.out

    listed = await cluster.cli("job", "schedules", "--json")
    [entry] = json.loads(listed.out)
    assert entry["spec"]["cron"] == "* * * * * *" and entry["spec"]["job"]["name"] == "ticker"


async def test_suspend_resume_and_delete_from_the_command_line(cluster):
    made = await cluster.cli(
        "job", "schedule", "ticker", "--cron", "* * * * * */2", "--concurrency", "forbid",
        "--", "true",
    )  # fmt: skip
    assert made.code == 0, made.err
    again = await cluster.cli("job", "schedule", "ticker", "--cron", "@daily", "--", "true")
    assert again.code != 0 and "a schedule named 'ticker' exists" in again.err
    bad = await cluster.cli("job", "schedule", "x", "--cron", "every minute", "--", "true")
    assert bad.code != 0 and "give five fields" in bad.err

    suspended = await cluster.cli("job", "suspend", "ticker")
    assert suspended.code == 0 and "suspended" in suspended.out
    count = len((await schedule_of(cluster, "ticker")).runs)
    await asyncio.sleep(2.5)
    assert len((await schedule_of(cluster, "ticker")).runs) == count
    resumed = await cluster.cli("job", "resume", "ticker")
    assert resumed.code == 0 and "resumed: next run" in resumed.out
    await eventually_async(
        lambda: _more_runs(cluster, count), timeout=20, message="a run after resuming"
    )
    deleted = await cluster.cli("job", "unschedule", "ticker")
    assert deleted.code == 0 and "deleted" in deleted.out
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await schedule_of(cluster, "ticker")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    missing = await cluster.cli("job", "suspend", "ticker")
    assert missing.code != 0 and "no schedule 'ticker'" in missing.err


async def jobs_of(cluster, schedule: B.Schedule) -> list[B.Job]:
    return [await cluster.job(r.job_id) for r in schedule.runs if r.job_id]


async def test_forbid_skips_runs_while_the_last_one_runs_on_real_agents(cluster):
    made = await cluster.cli(
        "job", "schedule", "slow", "--cron", "* * * * * *", "--concurrency", "forbid",
        "--", "sleep 2.5",
    )  # fmt: skip
    assert made.code == 0, made.err

    async def two_runs_done():
        schedule = await schedule_of(cluster, "slow")
        done = [r for r in schedule.runs if r.state == B.JOB_SUCCEEDED]
        return schedule if len(done) >= 2 else None

    schedule = await eventually_async(two_runs_done, timeout=40, message="two runs succeeded")
    await cluster.cli("job", "unschedule", "slow")
    jobs = await jobs_of(cluster, schedule)
    first, second = jobs[0], jobs[1]
    # Never two at once: each run started after the one before had ended.
    assert first.ended_at <= second.submitted_at
    skipped = [r for r in schedule.runs if r.skipped]
    assert skipped and schedule.missed >= len(skipped)
    while_first = [r for r in skipped if r.scheduled_for < second.submitted_at]
    assert len(while_first) >= 1  # the fire times while the first one ran
    for run in while_first:
        assert run.skipped.startswith(f"the previous run {first.job_id} has not ended"), run
    for job in jobs:
        if not st.is_ended(job):
            await cluster.stub.KillJob(B.KillJobRequest(job_id=job.job_id))


async def test_replace_kills_the_last_run_for_the_next_on_real_agents(cluster):
    made = await cluster.cli(
        "job", "schedule", "endless", "--cron", "* * * * * */2", "--concurrency", "replace",
        "--", "sleep 60",
    )  # fmt: skip
    assert made.code == 0, made.err

    async def three_runs():
        schedule = await schedule_of(cluster, "endless")
        runs = [r for r in schedule.runs if r.job_id]
        return schedule if len(runs) >= 3 and runs[-1].state == B.JOB_RUNNING else None

    schedule = await eventually_async(three_runs, timeout=40, message="three runs, one running")
    await cluster.cli("job", "unschedule", "endless")
    jobs = await jobs_of(cluster, schedule)
    latest = jobs[-1]
    for earlier, later in zip(jobs, jobs[1:], strict=False):
        assert earlier.state == B.JOB_KILLED, earlier
        assert earlier.ended_at <= later.submitted_at  # killed before the next run started

    async def tasks_killed():
        for job in jobs[:-1]:
            again = await cluster.job(job.job_id)
            attempt = again.instances[0].attempts[-1]
            if attempt.state != C.TASK_KILLED:
                return False
        return True

    # The agents killed the replaced runs' tasks.
    await eventually_async(tasks_killed, timeout=20, message="the replaced runs' tasks killed")
    await cluster.stub.KillJob(B.KillJobRequest(job_id=latest.job_id))


async def _more_runs(cluster, count: int) -> bool:
    return len((await schedule_of(cluster, "ticker")).runs) > count
