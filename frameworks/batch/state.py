"""The job and instance state machine: pure functions over `batch_pb2.Job` messages.

An instance is PENDING until launched, LAUNCHED (staging/starting), RUNNING, then SUCCEEDED,
FAILED (out of retries) or KILLED. A failed attempt sends it back to PENDING with a backoff
while it has retries left. The job is QUEUED until its first launch, RUNNING until every
instance has ended, then SUCCEEDED (all exited 0) or FAILED; KILLED is set at once by a kill.
Nothing here does I/O or reads a clock: callers pass `now`.

Every change of an instance's state goes through `_move`, which keeps the job's counts as it
goes, so an update costs the same in a 10,000-instance job as in a single one; `refresh`
recounts from the instances (after loading a job, and in tests).
"""

from __future__ import annotations

from dataclasses import dataclass

from agora.common.backoff import exponential
from agora.common.task_states import OVER_STATES, REASON_AGENT_DRAINED, REASON_PREEMPTED
from agora.v1 import batch_pb2, common_pb2

Job = batch_pb2.Job
Instance = batch_pb2.Instance
Attempt = batch_pb2.Attempt

TERMINAL_JOB_STATES = frozenset(
    {batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED}
)
TERMINAL_INSTANCE_STATES = frozenset(
    {batch_pb2.INSTANCE_SUCCEEDED, batch_pb2.INSTANCE_FAILED, batch_pb2.INSTANCE_KILLED}
)
ACTIVE_INSTANCE_STATES = frozenset({batch_pb2.INSTANCE_LAUNCHED, batch_pb2.INSTANCE_RUNNING})
# For a batch attempt, a task the master does not know or cannot reach is over too: the
# instance is retried rather than waited for.
# The reason an attempt killed past its job's time limit shows (Slurm's word for it).
TIMEOUT = "TIMEOUT"
REASON_MAX_COMPLETION_TIME_REACHED = "REASON_MAX_COMPLETION_TIME_REACHED"
# The master never saw the task (we stopped between recording and launching it): launching it
# again is not the task's fault, so it does not use up a retry.
_NOT_COUNTED = frozenset({common_pb2.TASK_UNKNOWN, common_pb2.TASK_DROPPED})
# Ends that are the cluster's doing, not the task's: run again at once, no retry spent.
_NOT_THE_TASKS_FAULT = frozenset({REASON_AGENT_DRAINED, REASON_PREEMPTED})


@dataclass(frozen=True)
class Backoff:
    """Delay before retry n (1-based): initial * factor**(n-1), at most `maximum` seconds."""

    initial: float = 1.0
    factor: float = 2.0
    maximum: float = 60.0

    def delay(self, failures: int) -> float:
        return exponential(max(1, failures), self.initial, self.factor, self.maximum)


@dataclass(frozen=True)
class Change:
    """What an update did: `changed` is False for a duplicate or stale update."""

    changed: bool
    description: str = ""
    retry_at: float | None = None  # the instance waits for a retry until then
    instance_ended: bool = False
    job_ended: bool = False


def task_id_for(job_id: str, index: int, attempt: int) -> str:
    """Task ids name their job, instance and attempt, so any update can be traced back."""
    return f"{job_id}.{index}.{attempt}"


def parse_task_id(task_id: str) -> tuple[str, int, int] | None:
    """(job_id, index, attempt) of a task id made by `task_id_for`, or None."""
    parts = task_id.rsplit(".", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2])
    except ValueError:
        return None


def new_job(job_id: str, spec: batch_pb2.JobSpec, sequence: int, now: float) -> Job:
    job = Job(
        job_id=job_id,
        state=batch_pb2.JOB_QUEUED,
        submitted_at=now,
        sequence=sequence,
        message="waiting for offers",
    )
    job.spec.CopyFrom(spec)
    for index in range(spec.instances):
        job.instances.add(index=index, state=batch_pb2.INSTANCE_PENDING)
    refresh(job, now)
    return job


def is_ended(job: Job) -> bool:
    return job.state in TERMINAL_JOB_STATES


def is_finished(job: Job) -> bool:
    """Ended, and no task of it is still running (a killed job's tasks take a moment to die)."""
    return is_ended(job) and not active_attempts(job)


def active_attempts(job: Job) -> list[tuple[int, Attempt]]:
    """(instance index, attempt) of every task that has not reported a terminal state."""
    out = []
    for instance in job.instances:
        for attempt in instance.attempts:
            if attempt.state not in OVER_STATES:
                out.append((instance.index, attempt))
    return out


def superseded_attempts(job: Job) -> list[Attempt]:
    """Tasks still running that their instance no longer counts on (a requeue sent it back to
    the queue, or launched it again): to be killed."""
    out = []
    for instance in job.instances:
        last = len(instance.attempts) - 1
        for n, attempt in enumerate(instance.attempts):
            if attempt.state in OVER_STATES:
                continue
            if n < last or instance.state == batch_pb2.INSTANCE_PENDING:
                out.append(attempt)
    return out


def ready_instances(job: Job, now: float) -> list[int]:
    """Indices of instances to launch now (pending and past their retry backoff)."""
    if is_ended(job):
        return []
    return [
        i.index
        for i in job.instances
        if i.state == batch_pb2.INSTANCE_PENDING and i.not_before <= now
    ]


def next_retry_at(job: Job) -> float | None:
    """The earliest time a pending instance in backoff becomes ready, if any."""
    if is_ended(job):
        return None
    times = [
        i.not_before
        for i in job.instances
        if i.state == batch_pb2.INSTANCE_PENDING and i.not_before > 0
    ]
    return min(times) if times else None


def room(job: Job) -> int | None:
    """How many more of the job's instances may be launched now under its max_running (its
    launched and running ones count); None: no limit."""
    if not job.spec.max_running:
        return None
    return max(0, job.spec.max_running - job.counts.running)


def never_launched(job: Job) -> bool:
    # started_at is set by the first launch and cleared only when its last attempt is undone.
    return not job.started_at and all(not i.attempts for i in job.instances)


def is_ready(job: Job, index: int, now: float) -> bool:
    """Whether instance `index` is to be launched now (pending, past its retry backoff)."""
    instance = job.instances[index]
    return (
        instance.state == batch_pb2.INSTANCE_PENDING
        and instance.not_before <= now
        and not is_ended(job)
    )


def record_launch(
    job: Job,
    index: int,
    *,
    agent_id: str,
    hostname: str = "",
    agent_address: str = "",
    framework_id: str = "",
    now: float,
) -> Attempt:
    """A new attempt of instance `index`, about to be launched; its task id is set."""
    instance = job.instances[index]
    if instance.state != batch_pb2.INSTANCE_PENDING or is_ended(job):
        raise ValueError(f"instance {index} of {job.job_id} is not pending")
    number = len(instance.attempts) + 1
    attempt = instance.attempts.add(
        attempt=number,
        task_id=task_id_for(job.job_id, index, number),
        agent_id=agent_id,
        hostname=hostname,
        agent_address=agent_address,
        state=common_pb2.TASK_STAGING,
        launched_at=now,
        framework_id=framework_id,
    )
    _move(job, instance, batch_pb2.INSTANCE_LAUNCHED)
    instance.not_before = 0
    if not job.started_at:
        job.started_at = now
    _settle(job, now)
    return attempt


def unrecord_launch(job: Job, index: int, task_id: str, now: float) -> None:
    """The master refused the launch: the attempt never happened; the instance waits again."""
    instance = job.instances[index]
    if instance.attempts and instance.attempts[-1].task_id == task_id:
        del instance.attempts[-1]
        if instance.state in ACTIVE_INSTANCE_STATES:
            _move(job, instance, batch_pb2.INSTANCE_PENDING)
    if not instance.attempts and all(not i.attempts for i in job.instances):
        job.started_at = 0
    _settle(job, now)


def apply_update(
    job: Job, index: int, status: common_pb2.TaskStatus, *, now: float, backoff: Backoff
) -> Change:
    """Applies a task status to the attempt it names. Updates arrive at least once and a
    reconciliation may repeat a state, so a state already recorded, or any state after a
    terminal one, changes nothing."""
    instance = job.instances[index]
    attempt = next((a for a in instance.attempts if a.task_id == status.task_id), None)
    if attempt is None or attempt.state in OVER_STATES or attempt.state == status.state:
        return Change(False)
    was_ended = is_ended(job)
    state = status.state
    attempt.state = state
    attempt.message = status.message
    attempt.reason = status.reason
    if status.agent_id and not attempt.agent_id:
        attempt.agent_id = status.agent_id
    if status.HasField("exit_code"):
        attempt.exit_code = status.exit_code
    if status.HasField("end_usage"):
        attempt.usage.CopyFrom(status.end_usage)
    if status.reason == REASON_MAX_COMPLETION_TIME_REACHED:
        attempt.reason = TIMEOUT
    if state == common_pb2.TASK_RUNNING and not attempt.started_at:
        attempt.started_at = now
    what = (
        f"instance {index} attempt {attempt.attempt} "
        f"{common_pb2.TaskState.Name(state).removeprefix('TASK_')}"
    )
    if attempt.hostname:
        what += f" on {attempt.hostname}"
    if status.message:
        what += f": {status.message}"
    latest = instance.attempts[-1].task_id == attempt.task_id
    retry_at = None
    if state not in OVER_STATES:
        if latest and instance.state in ACTIVE_INSTANCE_STATES:
            _move(
                job,
                instance,
                batch_pb2.INSTANCE_RUNNING
                if state == common_pb2.TASK_RUNNING
                else batch_pb2.INSTANCE_LAUNCHED,
            )
        _settle(job, now)
        return Change(True, what)
    attempt.ended_at = now
    instance_ended = False
    if latest and instance.state in ACTIVE_INSTANCE_STATES:
        if state == common_pb2.TASK_FINISHED:
            _move(job, instance, batch_pb2.INSTANCE_SUCCEEDED)
            instance_ended = True
        elif job.state == batch_pb2.JOB_KILLED:
            _move(job, instance, batch_pb2.INSTANCE_KILLED)
            instance_ended = True
        else:
            # Gone without failing (dropped, unknown, drained, preempted): run again at once,
            # without counting a retry.
            counted = state not in _NOT_COUNTED and status.reason not in _NOT_THE_TASKS_FAULT
            if counted:
                instance.failures += 1
            if instance.failures <= job.spec.max_retries:
                _move(job, instance, batch_pb2.INSTANCE_PENDING)
                delay = backoff.delay(instance.failures) if counted else 0.0
                instance.not_before = retry_at = now + delay
                if counted:
                    what += f" (retry {instance.failures} of {job.spec.max_retries} in {delay:g} s)"
                else:
                    what += " (run again; not counted as a retry)"
            else:
                _move(job, instance, batch_pb2.INSTANCE_FAILED)
                instance_ended = True
                what += f" (no retries left of {job.spec.max_retries})"
                job.message = (
                    f"instance {index} failed {instance.failures} time(s): "
                    f"{status.message or common_pb2.TaskState.Name(state)}"
                )
    _settle(job, now)
    return Change(
        True,
        what,
        retry_at=retry_at,
        instance_ended=instance_ended,
        job_ended=is_ended(job) and not was_ended,
    )


def kill_job(job: Job, now: float) -> list[tuple[int, Attempt]]:
    """Marks the job KILLED (pending instances with it); returns the tasks to kill."""
    if is_ended(job):
        raise ValueError(
            f"job {job.job_id} has already ended "
            f"({batch_pb2.JobState.Name(job.state).removeprefix('JOB_')})"
        )
    job.state = batch_pb2.JOB_KILLED
    job.ended_at = now
    job.message = "killed by request"
    for instance in job.instances:
        if instance.state == batch_pb2.INSTANCE_PENDING:
            _move(job, instance, batch_pb2.INSTANCE_KILLED)
            instance.not_before = 0
    _settle(job, now)
    return active_attempts(job)


class NotNow(ValueError):
    """The job is not in a state the change makes sense in; the message says why."""


def _state_word(job: Job) -> str:
    return job_state_name(job.state)


def hold(job: Job, held: bool) -> bool:
    """Holds (or releases) a job that has not started; returns whether anything changed (a
    job held again stays held). Releasing a job that is not held is refused: the caller
    meant another job, or one that has run since."""
    if is_ended(job) or not never_launched(job):
        raise NotNow(
            f"job {job.job_id} is {_state_word(job)}: only a job that has not started can be "
            "held or released (kill it, or requeue a running one)"
        )
    if not held and not job.held:
        raise NotNow(
            f"job {job.job_id} is not held, so there is nothing to release: it starts when "
            "offers allow (`agora job status` says what it waits for; `agora job hold` holds it)"
        )
    if job.held == held:
        return False
    job.held = held
    return True


def requeue(job: Job, now: float) -> list[tuple[int, Attempt]]:
    """Sends a running job's instances that have not succeeded back to the queue, their
    retries restored; returns the tasks to kill (their ends then change no instance)."""
    if job.state != batch_pb2.JOB_RUNNING:
        raise NotNow(f"job {job.job_id} is {_state_word(job)}: only a RUNNING job can be requeued")
    to_kill = active_attempts(job)
    for instance in job.instances:
        if instance.state != batch_pb2.INSTANCE_SUCCEEDED:
            _move(job, instance, batch_pb2.INSTANCE_PENDING)
            instance.failures = 0
            instance.not_before = 0
    job.message = "requeued by request"
    _settle(job, now)
    return to_kill


def update(
    job: Job,
    *,
    priority: int | None = None,
    instances: int | None = None,
    time_limit_seconds: float | None = None,
    now: float,
) -> None:
    """Changes a job that has not started (the caller validates the values)."""
    if is_ended(job) or not never_launched(job):
        raise NotNow(
            f"job {job.job_id} is {_state_word(job)}: only a job that has not started can be "
            "updated"
        )
    if priority is not None:
        job.spec.priority = priority
    if time_limit_seconds is not None:
        job.spec.time_limit_seconds = time_limit_seconds
    if instances is not None:
        job.spec.instances = instances
        if instances < len(job.instances):
            del job.instances[instances:]
        for index in range(len(job.instances), instances):
            job.instances.add(index=index, state=batch_pb2.INSTANCE_PENDING)
        refresh(job, now)


def fail_pending(job: Job, message: str, now: float) -> int:
    """The job cannot run (the master refused its tasks): its pending instances fail, so no
    more are launched; those running run on. Returns how many failed."""
    if is_ended(job):
        return 0
    failed = 0
    for instance in job.instances:
        if instance.state == batch_pb2.INSTANCE_PENDING:
            _move(job, instance, batch_pb2.INSTANCE_FAILED)
            instance.not_before = 0
            failed += 1
    job.message = message
    _settle(job, now)
    return failed


# The InstanceCounts field each instance state counts under.
_COUNTED_AS = {
    batch_pb2.INSTANCE_PENDING: "pending",
    batch_pb2.INSTANCE_LAUNCHED: "running",
    batch_pb2.INSTANCE_RUNNING: "running",
    batch_pb2.INSTANCE_SUCCEEDED: "succeeded",
    batch_pb2.INSTANCE_FAILED: "failed",
    batch_pb2.INSTANCE_KILLED: "killed",
}


def _move(job: Job, instance: Instance, state: batch_pb2.InstanceState) -> None:
    """Sets the instance's state and keeps the job's counts with it."""
    before, after = _COUNTED_AS.get(instance.state), _COUNTED_AS.get(state)
    if before != after:
        counts = job.counts
        if before is not None:
            setattr(counts, before, getattr(counts, before) - 1)
        if after is not None:
            setattr(counts, after, getattr(counts, after) + 1)
    instance.state = state


def refresh(job: Job, now: float) -> None:
    """Recomputes the counts from the instances, and the job state from the counts."""
    counts = batch_pb2.InstanceCounts()
    for instance in job.instances:
        field = _COUNTED_AS.get(instance.state)
        if field is not None:
            setattr(counts, field, getattr(counts, field) + 1)
    job.counts.CopyFrom(counts)
    _settle(job, now)


def _settle(job: Job, now: float) -> None:
    """The job state that its counts (kept current) call for."""
    counts = job.counts
    if job.state == batch_pb2.JOB_KILLED:
        return  # final: the kill decided it; instances only catch up
    total = len(job.instances)
    if total and counts.succeeded == total:
        state = batch_pb2.JOB_SUCCEEDED
    elif total and counts.succeeded + counts.failed + counts.killed == total:
        state = batch_pb2.JOB_FAILED
    elif never_launched(job):
        # Nothing of it queued while it waits for other jobs (dependencies.py).
        state = batch_pb2.JOB_WAITING if job.waiting_for else batch_pb2.JOB_QUEUED
    else:
        state = batch_pb2.JOB_RUNNING
    if state != job.state:
        job.state = state
        if state in TERMINAL_JOB_STATES:
            job.ended_at = now
            if state == batch_pb2.JOB_SUCCEEDED:
                job.message = ""
        elif state == batch_pb2.JOB_RUNNING and job.message.startswith("waiting"):
            job.message = ""


def without_instances(job: Job) -> Job:
    """A copy of the job without its instances, made field by field: copying the whole job
    and deleting the instances after cost time in proportion to the job's size."""
    header = Job()
    for field, value in job.ListFields():
        if field.name == "instances":
            continue
        if field.is_repeated or field.message_type is not None:
            getattr(header, field.name).MergeFrom(value)
        else:
            setattr(header, field.name, value)
    return header


def job_state_name(state: int) -> str:
    return batch_pb2.JobState.Name(state).removeprefix("JOB_")


def instance_state_name(state: int) -> str:
    return batch_pb2.InstanceState.Name(state).removeprefix("INSTANCE_")


def is_terminal_task(state: int) -> bool:
    return state in OVER_STATES
