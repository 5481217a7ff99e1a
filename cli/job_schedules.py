"""`agora job schedule`, `schedules`, `suspend`, `resume`, `unschedule`: cron schedules of the
batch framework (a job submitted at each time a cron expression names)."""

from __future__ import annotations

import argparse

from agora.cli.batch_client import BatchClient, print_json, to_dict, when
from agora.cli.errors import CommandError
from agora.cli.job_cmd import SCHEDULE_ACTIONS
from agora.cli.job_spec import add_spec_flags, command_text, spec_from_args
from agora.cli.lazy_actions import LazyActions
from agora.cli.options import add_json_flag, add_master_flag, credentials_from, duration
from agora.cli.tables import format_table


def register(commands: LazyActions, add_batch_flag) -> None:
    schedule = commands.add_parser(
        "schedule",
        help=SCHEDULE_ACTIONS["schedule"],
        description="Creates a schedule that submits the job at each time the cron expression "
        "names, e.g. agora job schedule nightly --cron '30 2 * * *' --timezone Europe/Paris "
        "-- ./backup.sh. If the batch daemon was down at fire times, it runs once for the "
        "latest of them when it is back (never a burst), unless that is later than "
        "--starting-deadline. Runs are jobs named after the schedule: `agora job list` and "
        "`agora job logs NAME` show the latest.",
    )
    add_master_flag(schedule)
    add_batch_flag(schedule)
    schedule.add_argument(
        "--cron",
        metavar="EXPR",
        help="when to run: 'minute hour day-of-month month day-of-week' as in crontab (e.g. "
        "'*/5 * * * *'), a sixth field for seconds, or @hourly, @daily, @weekly...",
    )
    schedule.add_argument(
        "--timezone",
        default="",
        metavar="TZ",
        help="IANA time zone the expression is read in, daylight saving followed (default: UTC)",
    )
    schedule.add_argument(
        "--concurrency",
        choices=["allow", "forbid", "replace"],
        default="allow",
        help="when a run is due while the previous one has not ended: start it anyway "
        "(allow), skip it (forbid) or kill the previous one first (replace) "
        "(default: %(default)s)",
    )
    schedule.add_argument(
        "--starting-deadline",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="skip a run that could not start within this long of its time, e.g. 10m "
        "(default: no deadline)",
    )
    schedule.add_argument(
        "--replace",
        action="store_true",
        help="replace the schedule of this name if there is one (its runs are kept)",
    )
    add_spec_flags(schedule)
    add_json_flag(schedule)
    # NAME, then the flags, then `-- CMD`: argparse would give everything after a positional
    # NAME to the command, so the command's arguments take NAME and the rest is read again.
    schedule.add_argument(
        "argv",
        nargs=argparse.REMAINDER,
        metavar="NAME [FLAGS] -- CMD ARGS",
        help="the schedule's name, then the command to run after --",
    )
    schedule.set_defaults(func=_schedule, parser=schedule)

    listing = commands.add_parser("schedules", help=SCHEDULE_ACTIONS["schedules"])
    add_master_flag(listing)
    add_batch_flag(listing)
    listing.add_argument("schedule_name", metavar="NAME", nargs="?", help="show this one")
    add_json_flag(listing)
    listing.set_defaults(func=_schedules)

    for action in ("suspend", "resume", "unschedule"):
        parser = commands.add_parser(action, help=SCHEDULE_ACTIONS[action])
        add_master_flag(parser)
        add_batch_flag(parser)
        parser.add_argument("schedule_name", metavar="NAME")
        add_json_flag(parser)
        parser.set_defaults(func=_change, action=action)


def _name_first(args: argparse.Namespace) -> None:
    """Takes NAME off the front of args.argv and reads the flags that followed it."""
    rest = list(args.argv)
    if not rest or rest[0].startswith("-"):
        raise CommandError(
            "give the schedule's name first: agora job schedule NAME --cron EXPR -- CMD"
        )
    args.schedule_name = rest.pop(0)
    if rest and rest[0] != "--":
        args.argv = []
        args.parser.parse_args(rest, namespace=args)
    else:
        args.argv = rest
    if not args.cron:
        raise CommandError("--cron is required, e.g. --cron '*/5 * * * *'")


def _schedule(args: argparse.Namespace) -> int:
    from agora.frameworks.batch.schedules import CONCURRENCY
    from agora.v1 import batch_pb2

    _name_first(args)
    if not args.name:
        args.name = args.schedule_name  # each run is a job of the schedule's name
    job = spec_from_args(args)
    spec = batch_pb2.ScheduleSpec(
        name=args.schedule_name,
        cron=args.cron,
        timezone=args.timezone,
        concurrency=CONCURRENCY[args.concurrency],
        starting_deadline_seconds=args.starting_deadline,
        job=job,
    )
    request = batch_pb2.PutScheduleRequest(spec=spec, replace=args.replace)
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        reply = batch.call("PutSchedule", request)
    if args.json:
        print_json(to_dict(reply))
    else:
        print(f"schedule {reply.spec.name}: next run {when(reply.next_run_at)}")
    return 0


def _schedules(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        if args.schedule_name:
            one = batch.call("GetSchedule", batch_pb2.GetScheduleRequest(name=args.schedule_name))
            schedules = [one]
        else:
            reply = batch.call("ListSchedules", batch_pb2.ListSchedulesRequest())
            schedules = list(reply.schedules)
    if args.json:
        shown = [to_dict(s) for s in schedules]
        print_json(shown[0] if args.schedule_name else shown)
    elif args.schedule_name:
        print(describe(schedules[0]))
    elif not schedules:
        print("no schedules")
    else:
        print(format_table(_HEADERS, [_row(s) for s in schedules]))
    return 0


def _change(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    name = args.schedule_name
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        if args.action == "unschedule":
            reply = batch.call("DeleteSchedule", batch_pb2.DeleteScheduleRequest(name=name))
            schedule = reply.schedule
        else:
            request = batch_pb2.SuspendScheduleRequest(
                name=name, suspended=args.action == "suspend"
            )
            schedule = batch.call("SuspendSchedule", request)
    if args.json:
        print_json(to_dict(schedule))
    elif args.action == "unschedule":
        print(f"schedule {name} deleted")
    elif schedule.suspended:
        print(f"schedule {name} suspended")
    else:
        print(f"schedule {name} resumed: next run {when(schedule.next_run_at)}")
    return 0


_HEADERS = ["NAME", "CRON", "TIMEZONE", "CONCURRENCY", "STATE", "NEXT RUN", "LAST RUN", "MISSED"]


def _row(schedule) -> list[str]:
    from agora.frameworks.batch.schedules import concurrency_name

    spec = schedule.spec
    return [
        spec.name,
        spec.cron,
        spec.timezone or "UTC",
        concurrency_name(spec.concurrency),
        "suspended" if schedule.suspended else "active",
        when(schedule.next_run_at),
        _outcome(schedule.runs[-1]) if schedule.runs else "-",
        str(schedule.missed),
    ]


def _outcome(run) -> str:
    from agora.frameworks.batch.state import job_state_name

    if run.skipped:
        return "skipped"
    return job_state_name(run.state) if run.state else "forgotten"


def describe(schedule) -> str:
    spec = schedule.spec
    lines = [f"schedule {spec.name}  {'suspended' if schedule.suspended else 'active'}"]
    lines.append(f"  cron        {spec.cron}  ({spec.timezone or 'UTC'})")
    lines.append(f"  command     {command_text(spec.job.task.command)}")
    lines.append(f"  next run    {when(schedule.next_run_at)}")
    lines.append(f"  missed      {schedule.missed}")
    lines.append("")
    rows = [
        [
            when(run.scheduled_for),
            when(run.fired_at),
            run.job_id or "-",
            _outcome(run),
            run.skipped
            or ("catch-up: the daemon was down at its time" if run.catch_up else "")
            or run.message
            or "-",
        ]
        for run in reversed(schedule.runs)
    ]
    lines.append(format_table(["SCHEDULED FOR", "FIRED", "JOB", "RESULT", "NOTE"], rows))
    if not rows:
        lines.append("no runs yet")
    return "\n".join(lines)
