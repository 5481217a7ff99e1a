"""Why a job's instances wait: one reason of a documented set (Slurm's pending reasons). Pure.

The reason is decided from the job and what the scheduler knows of the moment, the first that
applies in this order: a held job waits for its release whatever else; a job waiting for others
for them; then what stops every instance (no master, the begin time, the running limit, all in
a retry's backoff); last what the latest round of offers found (no room, room taken by jobs
ahead, a gang's room, constraints, the owner's share).
"""

from __future__ import annotations

from typing import cast

from agora.v1 import batch_pb2

# Short names, for the CLI's REASON column and --json readers; the README lists them.
NAMES: dict[int, str] = {
    batch_pb2.PENDING_REASON_NONE: "",
    batch_pb2.PENDING_DEPENDENCY: "dependency",
    batch_pb2.PENDING_PRIORITY: "priority",
    batch_pb2.PENDING_OWNER_SHARE: "owner-share",
    batch_pb2.PENDING_RESOURCES: "resources",
    batch_pb2.PENDING_CONSTRAINT: "constraint",
    batch_pb2.PENDING_GANG: "gang",
    batch_pb2.PENDING_HOLD: "hold",
    batch_pb2.PENDING_BEGIN_TIME: "begin-time",
    batch_pb2.PENDING_RUNNING_LIMIT: "running-limit",
    batch_pb2.PENDING_RETRY_BACKOFF: "retry-backoff",
    batch_pb2.PENDING_MASTER: "master",
}


def reason(
    job: batch_pb2.Job,
    now: float,
    *,
    connected: bool,
    room: int | None,
    ready: bool,
    last_round: int | None,
) -> batch_pb2.PendingReason:
    """The PendingReason of `job`. `room`: how many more it may launch under max_running
    (None: no limit); `ready`: whether an instance is past its backoff; `last_round`: what the
    latest offer round said of it (None: it has not been in one since it last changed)."""
    if job.state in (batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED):
        return batch_pb2.PENDING_REASON_NONE
    if job.held:
        return batch_pb2.PENDING_HOLD
    if job.waiting_for:
        return batch_pb2.PENDING_DEPENDENCY
    if not job.counts.pending:
        return batch_pb2.PENDING_REASON_NONE
    if not connected:
        return batch_pb2.PENDING_MASTER
    if job.spec.begin_at > now:
        return batch_pb2.PENDING_BEGIN_TIME
    if room == 0:
        return batch_pb2.PENDING_RUNNING_LIMIT
    if not ready:
        return batch_pb2.PENDING_RETRY_BACKOFF
    if last_round is not None:
        return cast("batch_pb2.PendingReason", last_round)
    if job.spec.gang and not job.started_at:
        return batch_pb2.PENDING_GANG
    return batch_pb2.PENDING_RESOURCES


def name(value: int) -> str:
    return NAMES.get(value, "")
