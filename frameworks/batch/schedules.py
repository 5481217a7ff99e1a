"""Cron schedules' decisions: when a schedule fires, what a restart missed, what a collision does.

Pure: nothing here does I/O or reads a clock (cron.py runs the timer and submits the jobs).
Expressions are read by croniter, not a parser of our own: five crontab fields, six with
seconds last, or @hourly and the like, in the schedule's time zone (zoneinfo, so a daily 02:30
in Europe/Paris follows daylight saving: croniter moves a time that does not exist to the next
one that does, and runs a time that exists twice once).

The rule for fire times that passed while the batch daemon was down (or suspended), written
for the README:
- after a restart, a schedule runs at most once at once, for the latest time it missed
  (a "catch-up" run), never a burst; the earlier missed times are counted in `missed`;
- a catch-up later than the schedule's starting deadline (if it has one) is skipped too;
- resuming a suspended schedule catches nothing up: the next run is the next fire time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from agora.v1 import batch_pb2

Schedule = batch_pb2.Schedule

RUNS_KEPT = 20  # a schedule's latest runs, shown by `agora job schedules NAME`
# Counting the fire times a long absence missed stops here (a per-second schedule down a day
# has 86,400): the count then says "at least".
MISSED_COUNTED = 10_000
MAX_NAME = 128
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

CONCURRENCY = {
    "allow": batch_pb2.CONCURRENCY_ALLOW,
    "forbid": batch_pb2.CONCURRENCY_FORBID,
    "replace": batch_pb2.CONCURRENCY_REPLACE,
}


class ScheduleError(ValueError):
    """The schedule is malformed; the message says what to change."""


def zone(spec: batch_pb2.ScheduleSpec):
    """The spec's time zone (UTC when empty); ScheduleError for an unknown name."""
    if not spec.timezone:
        return UTC
    try:
        return ZoneInfo(spec.timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # a directory, a name too long
        raise ScheduleError(
            f"unknown time zone {spec.timezone!r}: give an IANA name such as Europe/Paris, "
            "America/New_York or UTC"
        ) from None


def validate(spec: batch_pb2.ScheduleSpec) -> None:
    """Raises ScheduleError naming the first problem of the schedule (its job is checked by
    validation.validate_spec, as a submission's)."""
    if not spec.name or len(spec.name) > MAX_NAME or not _NAME.match(spec.name):
        raise ScheduleError(
            f"schedule name {spec.name[:40]!r}: use 1-{MAX_NAME} letters, digits, '.', '_' or "
            "'-', starting with a letter or digit"
        )
    fields = spec.cron.split()
    if not (spec.cron.startswith("@") or len(fields) in (5, 6)):
        raise ScheduleError(
            f"cron expression {spec.cron!r}: give five fields (minute hour day-of-month month "
            "day-of-week, e.g. '*/5 * * * *'), six with seconds last, or @hourly, @daily..."
        )
    zone(spec)
    try:
        croniter(spec.cron, 0.0).get_next(float)
    except (CroniterError, ValueError, KeyError) as e:
        raise ScheduleError(f"cron expression {spec.cron!r}: {e}") from None
    deadline = spec.starting_deadline_seconds
    if not math.isfinite(deadline) or deadline < 0:
        raise ScheduleError(f"starting_deadline_seconds must be 0 or more, got {deadline:g}")
    if spec.job.after:
        raise ScheduleError("a schedule's job cannot wait for other jobs (--after)")


def next_fire(spec: batch_pb2.ScheduleSpec, after: float) -> float:
    """The first fire time strictly after `after` (Unix seconds)."""
    start = datetime.fromtimestamp(after, zone(spec))
    return croniter(spec.cron, start).get_next(float)


def latest_fire(spec: batch_pb2.ScheduleSpec, at: float) -> float:
    """The last fire time at or before `at`."""
    tz = zone(spec)
    before = croniter(spec.cron, datetime.fromtimestamp(at, tz)).get_prev(float)  # < at
    then = croniter(spec.cron, datetime.fromtimestamp(before, tz)).get_next(float)
    return then if then <= at else before


@dataclass(frozen=True)
class Due:
    """What the schedule's timer is to do now."""

    fire_time: float | None  # the fire time to act on now; None: nothing is due
    catch_up: bool = False  # it passed while nobody could act on it (the daemon was down)
    # Why it is skipped rather than run ("" runs it): past the starting deadline.
    skipped: str = ""
    missed: int = 0  # earlier fire times passed over, never run


# How late a fire time may be acted on and still count as on time: the timer's own delay
# (a busy event loop, a slow commit) is not a missed run.
ON_TIME_SECONDS = 5.0


def due(schedule: Schedule, now: float) -> Due:
    """The fire time to act on at `now`: the latest one since the last acted on, if any; the
    earlier ones (a daemon that was down) are only counted."""
    spec = schedule.spec
    if schedule.suspended:
        return Due(None)
    first = next_fire(spec, schedule.last_fire_time)
    if first > now:
        return Due(None)
    latest = latest_fire(spec, now)
    missed = _count_between(spec, first, latest)
    late = now - latest
    catch_up = missed > 0 or late > ON_TIME_SECONDS
    deadline = spec.starting_deadline_seconds
    skipped = ""
    if deadline and late > deadline:
        skipped = f"{late:.0f} s late, past its starting deadline of {deadline:g} s"
    return Due(latest, catch_up=catch_up, skipped=skipped, missed=missed)


def _count_between(spec: batch_pb2.ScheduleSpec, first: float, latest: float) -> int:
    """Fire times from `first` up to but not including `latest`, counted up to MISSED_COUNTED."""
    count = 0
    it = croniter(spec.cron, datetime.fromtimestamp(first, zone(spec)))
    t = first
    while t < latest and count < MISSED_COUNTED:
        count += 1
        t = it.get_next(float)
    return count


@dataclass
class Collision:
    """What the concurrency policy makes of a run due while earlier runs are active."""

    run: bool
    kill: list[str] = field(default_factory=list)  # job ids of earlier runs to kill first
    skipped: str = ""  # why not run


def collide(policy: int, active: list[str]) -> Collision:
    """`active`: the ids of this schedule's runs that have not ended, oldest first."""
    if not active:
        return Collision(True)
    if policy == batch_pb2.CONCURRENCY_FORBID:
        return Collision(False, skipped=f"the previous run {active[-1]} has not ended (forbid)")
    if policy == batch_pb2.CONCURRENCY_REPLACE:
        return Collision(True, kill=list(active))
    return Collision(True)


def record(schedule: Schedule, run: batch_pb2.ScheduleRun, missed: int) -> None:
    """Adds the run (and the missed count) to the schedule, keeping the latest RUNS_KEPT."""
    schedule.last_fire_time = max(schedule.last_fire_time, run.scheduled_for)
    schedule.missed += missed + (1 if run.skipped else 0)
    schedule.runs.append(run)
    if len(schedule.runs) > RUNS_KEPT:
        del schedule.runs[: len(schedule.runs) - RUNS_KEPT]


def concurrency_name(policy: int) -> str:
    return batch_pb2.ConcurrencyPolicy.Name(policy).removeprefix("CONCURRENCY_").lower()
