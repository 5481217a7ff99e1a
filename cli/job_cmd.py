"""`agora job`: submit, watch, list, kill batch jobs and read their logs (via the master)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agora.cli.batch_client import BatchClient, call_error, print_json, to_dict, when
from agora.cli.errors import CommandError
from agora.cli.job_spec import (
    add_command_arg,
    add_spec_flags,
    command_text,
    parse_constraint,
    spec_from_args,
)
from agora.cli.lazy_actions import LazyActions, chosen_action
from agora.cli.options import add_json_flag, add_master_flag, credentials_from, duration
from agora.cli.tables import format_table

_JOB_REF_HELP = "the job's id, or its name for the latest job of that name"


def _add_batch_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch",
        metavar="HOST:PORT",
        default=os.environ.get("AGORA_BATCH") or None,
        help="the Batch API's address, to reach it while the master is down (default: ask the "
        "master; $AGORA_BATCH)",
    )


# The cron schedule actions (cli/job_schedules.py) and their summaries.
SCHEDULE_ACTIONS = {
    "schedule": "run a job on a cron schedule",
    "schedules": "list cron schedules, or show one with its latest runs",
    "suspend": "stop a schedule from firing (its running jobs run on)",
    "resume": "fire a suspended schedule again, from its next time (no catch-up)",
    "unschedule": "delete a schedule (its running jobs run on: `agora job kill` them)",
}


def register(subparsers: argparse._SubParsersAction, argv: list[str] | None = None) -> None:
    """`argv` (the command line, when known) names the action to build in full."""
    job = subparsers.add_parser(
        "job",
        help="submit and manage batch jobs (needs `agora batch` running)",
        description="Client of the batch framework. It finds the Batch API through the master "
        "(--master), so only the master's address is needed.",
    )
    actions = job.add_subparsers(dest="job_command", metavar="ACTION")
    actions.required = True
    commands = LazyActions(actions, chosen_action(argv, "job"), known=argv is not None)

    submit = commands.add_parser(
        "submit",
        help="submit a job of N instances of one command",
        description="Queues a job and prints its id. The command follows `--`: one argument is "
        "run by /bin/sh -c (so 'echo $AGORA_INSTANCE; exit 1' works), several are "
        "exec'd as argv. Each task gets AGORA_JOB_ID, AGORA_INSTANCE, AGORA_ATTEMPT "
        "and AGORA_SANDBOX in its environment.",
    )
    add_master_flag(submit)
    _add_batch_flag(submit)
    add_spec_flags(submit)
    submit.add_argument(
        "-f",
        "--file",
        type=Path,
        default=None,
        metavar="GRAPH.yaml",
        help="submit the jobs of a file instead, which may wait for each other by name: "
        "jobs: [{name, command (a shell line) or args, instances, cpus, mem, disk, ports, "
        "retries, priority, gang, duration, time_limit, max_running, env, role, gpus, "
        "constraints: [FIELD:OP[:VALUE]], revocable, owner, begin, image, network, "
        "kill_grace, instance_args: [...] or args_file (a path from the file's folder), "
        "after: [NAME[:ok|any|notok]]}]; checked as a whole and stored all together: if "
        "any job is refused, none is submitted",
    )
    submit.add_argument(
        "--after",
        action="append",
        default=[],
        metavar="JOB[:ok|any|notok]",
        help="wait until JOB (an id, or a name: its latest job) has succeeded (ok, the "
        "default), ended however (any), or failed or been killed (notok); cancelled if it "
        "ends otherwise. Repeat for several (Slurm's --dependency afterok/afterany/afternotok)",
    )
    submit.add_argument(
        "--wait",
        action="store_true",
        help="show progress until the job ends; exit 0 only if it SUCCEEDED",
    )
    add_json_flag(submit)
    add_command_arg(submit)
    submit.set_defaults(func=_submit)

    status = commands.add_parser("status", help="show a job and its instances")
    add_master_flag(status)
    _add_batch_flag(status)
    status.add_argument("job_id", metavar="ID", help=_JOB_REF_HELP)
    add_json_flag(status)
    status.set_defaults(func=_status)

    listing = commands.add_parser("list", help="list jobs")
    add_master_flag(listing)
    _add_batch_flag(listing)
    listing.add_argument(
        "--state",
        action="append",
        default=[],
        choices=["waiting", "queued", "running", "succeeded", "failed", "killed"],
        help="only jobs in this state (repeatable)",
    )
    add_json_flag(listing)
    listing.set_defaults(func=_list)

    kill = commands.add_parser("kill", help="kill a job's tasks and launch no more")
    add_master_flag(kill)
    _add_batch_flag(kill)
    kill.add_argument("job_id", metavar="ID")
    add_json_flag(kill)
    kill.set_defaults(func=_kill)

    for action, help_text in (
        ("hold", "keep a job that has not started from starting, until released"),
        ("release", "let a held job start"),
        ("requeue", "run a running job's unfinished instances again (running ones are killed)"),
    ):
        parser = commands.add_parser(action, help=help_text)
        add_master_flag(parser)
        _add_batch_flag(parser)
        parser.add_argument("job_id", metavar="ID", help=_JOB_REF_HELP)
        add_json_flag(parser)
        parser.set_defaults(func=_control, action=action)

    update = commands.add_parser(
        "update", help="change a job that has not started: priority, instances, time limit"
    )
    add_master_flag(update)
    _add_batch_flag(update)
    update.add_argument("job_id", metavar="ID", help=_JOB_REF_HELP)
    update.add_argument("--priority", type=int, default=None)
    update.add_argument("--instances", type=int, default=None)
    update.add_argument("--time-limit", type=duration, default=None, metavar="DURATION")
    add_json_flag(update)
    update.set_defaults(func=_update)

    history = commands.add_parser(
        "history",
        help="finished jobs, instance by instance: exit code, times, agent, CPU, peak memory",
        description="Lists the jobs that ended (as Slurm's sacct): for each instance's last "
        "attempt its state, exit code, start and end, agent, CPU seconds and peak memory "
        "(what its agent measured). The batch daemon keeps finished jobs for "
        "--keep-finished-for (30 days by default) and at most --max-finished-jobs of them.",
    )
    add_master_flag(history)
    _add_batch_flag(history)
    history.add_argument(
        "--since",
        type=duration,
        default=None,
        metavar="DURATION",
        help="only jobs that ended within this long, e.g. 1d, 2h (default: all kept)",
    )
    history.add_argument("--owner", default=None, help="only this owner's jobs")
    history.add_argument(
        "--limit",
        type=_job_count,
        default=0,
        metavar="N",
        help="only the N newest jobs (default: all kept)",
    )
    add_json_flag(history)
    history.set_defaults(func=_history)

    owners = commands.add_parser(
        "owners",
        help="the owners of jobs: weight, what each runs and its share (weighted DRF)",
    )
    add_master_flag(owners)
    _add_batch_flag(owners)
    add_json_flag(owners)
    owners.set_defaults(func=_owners)

    weight = commands.add_parser(
        "owner-weight",
        help="set an owner's weight: owners' shares of the batch framework converge to it",
    )
    add_master_flag(weight)
    _add_batch_flag(weight)
    weight.add_argument("owner", metavar="OWNER", help='the owner ("" for anonymous jobs)')
    weight.add_argument("weight", type=float, metavar="WEIGHT", help="above 0 (default 1)")
    add_json_flag(weight)
    weight.set_defaults(func=_owner_weight)

    logs = commands.add_parser(
        "logs", help="print an instance's stdout (or stderr), read from its agent"
    )
    add_master_flag(logs)
    _add_batch_flag(logs)
    logs.add_argument("job_id", metavar="ID", help=_JOB_REF_HELP)
    logs.add_argument("--instance", type=int, default=0, help="instance index (default 0)")
    logs.add_argument("--attempt", type=int, default=0, help="attempt number (default: the latest)")
    logs.add_argument("--stderr", action="store_true", help="print stderr instead of stdout")
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing as the task writes, until it ends",
    )
    logs.set_defaults(func=_logs)

    if any(commands.builds(name) for name in SCHEDULE_ACTIONS):
        from agora.cli import job_schedules  # only when one of its actions is chosen

        job_schedules.register(commands, _add_batch_flag)
    else:
        for name, summary in SCHEDULE_ACTIONS.items():
            commands.add_parser(name, help=summary)


register.builds_chosen_action = True  # type: ignore[attr-defined]


# --- plumbing ---------------------------------------------------------------------------------


def _find_job(batch: BatchClient, ref: str):
    """The job whose id is `ref`, else the latest job named `ref` (as a person remembers it:
    `agora job logs hello`); NOT_FOUND naming both when there is neither."""
    from agora.v1 import batch_pb2

    job = batch.call("GetJob", batch_pb2.GetJobRequest(job_id=ref), missing_ok=True)
    if job is not None:
        return job
    listed = batch.call("ListJobs", batch_pb2.ListJobsRequest(include_instances=True))
    named = [job for job in listed.jobs if job.spec.name == ref]
    if not named:
        raise CommandError(f"no job has the id or the name {ref!r} (see `agora job list`)")
    return max(named, key=lambda job: job.sequence)


# --- submit -------------------------------------------------------------------------------------


# What a job of a graph file may say, and the JobSpec/TaskTemplate field each sets.
_GRAPH_JOB_FIELDS = {
    "name", "command", "args", "instances", "cpus", "mem", "disk", "ports", "retries",
    "priority", "gang", "duration", "env", "role", "after", "time_limit", "max_running",
    "gpus", "constraints", "revocable", "owner", "args_file", "instance_args", "begin",
    "image", "network", "kill_grace",
}  # fmt: skip


def _graph(path: Path) -> list[Any]:
    """The JobSpecs of a graph file, in its order, their `after` naming jobs as written (the
    Batch API reads a name of the file as that job); CommandError saying what to change."""
    import yaml

    from agora.frameworks.batch.dependencies import parse_after

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise CommandError(f"--file {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise CommandError(f"--file {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise CommandError(f"--file {path}: give a list of jobs: `jobs: [{{name: ..., ...}}]`")
    specs: dict[str, Any] = {}
    for i, job in enumerate(jobs):
        where = f"--file {path}: jobs[{i}]"
        if not isinstance(job, dict) or not isinstance(job.get("name"), str) or not job["name"]:
            raise CommandError(f"{where}: each job is a mapping with a name")
        name = job["name"]
        unknown = set(job) - _GRAPH_JOB_FIELDS
        if unknown:
            raise CommandError(f"{where} ({name}): unknown field(s) {', '.join(sorted(unknown))}")
        if name in specs:
            raise CommandError(f"{where}: two jobs are named {name!r}")
        after = job.get("after") or []
        if isinstance(after, str):
            after = [after]
        try:
            spec = _graph_job(job, path, f"{where} ({name})")
            spec.after.extend(parse_after(str(text)) for text in after)
        except (TypeError, ValueError, AttributeError, argparse.ArgumentTypeError) as e:
            raise CommandError(f"{where} ({name}): {e}") from None
        specs[name] = spec
    return list(specs.values())


def _graph_job(job: dict, path: Path, where: str) -> Any:
    """One job of a graph file as a JobSpec (without its `after`); the fields mean what the
    flags of `agora job submit` of the same names mean."""
    from agora.cli.job_spec import begin_time
    from agora.v1 import batch_pb2, common_pb2

    command, argv = job.get("command"), job.get("args")
    if bool(command) == bool(argv):
        raise CommandError(f"{where}: give command (a shell line) or args, one")
    instance_args = _graph_instance_args(job, path, where)
    instances = job.get("instances")
    instances = int(instances) if instances is not None else len(instance_args) or 1
    task = batch_pb2.TaskTemplate(
        command=common_pb2.CommandInfo(shell=command)
        if command
        else common_pb2.CommandInfo(argv=[str(a) for a in argv or []]),
        cpus=float(job.get("cpus", 0.1)),
        mem=float(job.get("mem", 32)),
        disk=float(job.get("disk", 0)),
        ports=int(job.get("ports", 0)),
        env={str(k): str(v) for k, v in (job.get("env") or {}).items()},
        role=str(job.get("role", "")),
        gpus=float(job.get("gpus", 0)),
        kill_grace_period_seconds=duration(str(job.get("kill_grace", 0))),
    )
    image, network = str(job.get("image", "")), str(job.get("network", ""))
    if network and not image:
        raise CommandError(f"{where}: network applies to a job with an image")
    if network not in ("", "host", "none"):
        raise CommandError(f"{where}: network is host or none, not {network!r}")
    if image:
        task.container.image = image
        task.container.network = network
    begin = job.get("begin")
    return batch_pb2.JobSpec(
        name=job["name"],
        instances=instances,
        task=task,
        max_retries=int(job.get("retries", 0)),
        priority=int(job.get("priority", 0)),
        gang=bool(job.get("gang", False)),
        duration_seconds=float(job.get("duration", 0)),
        time_limit_seconds=duration(str(job.get("time_limit", 0))),
        max_running=int(job.get("max_running", 0)),
        begin_at=begin_time(str(begin)) if begin not in (None, "", 0) else 0.0,
        instance_args=instance_args,
        constraints=[
            parse_constraint(text, f"{where}: constraint") for text in job.get("constraints") or []
        ],
        revocable=bool(job.get("revocable", False)),
        owner=str(job.get("owner", "")),
    )


def _graph_instance_args(job: dict, path: Path, where: str) -> list[str]:
    """A graph job's per-instance arguments: `instance_args` (a list, one per instance) or
    `args_file` (one line per instance, blank lines skipped; relative to the graph file)."""
    if "instance_args" in job and "args_file" in job:
        raise CommandError(f"{where}: give instance_args or args_file, not both")
    if "instance_args" in job:
        given = job["instance_args"]
        if not isinstance(given, list) or not given:
            raise CommandError(f"{where}: instance_args is a list, one entry per instance")
        return [str(a) for a in given]
    if "args_file" not in job:
        return []
    file = path.parent / str(job["args_file"])
    try:
        lines = [line.strip() for line in file.read_text().splitlines() if line.strip()]
    except OSError as e:
        raise CommandError(f"{where}: args_file {file}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CommandError(f"{where}: args_file {file}: not UTF-8 text") from None
    if not lines:
        raise CommandError(f"{where}: args_file {file}: no lines: give one per instance")
    return lines


def _submit_graph(args: argparse.Namespace) -> int:
    """Submits a graph file's jobs in one call (SubmitJobs): checked as a whole and stored all
    together, so a refusal of any leaves none submitted."""
    from agora.v1 import batch_pb2

    if args.argv or args.wait or args.after:
        raise CommandError("--file takes its jobs from the file: no command, --after or --wait")
    specs = _graph(args.file)
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        try:
            reply = batch.call("SubmitJobs", batch_pb2.SubmitJobsRequest(specs=specs))
        except CommandError as e:  # a refusal says that no job of the file was submitted
            raise CommandError(f"--file {args.file}: {e}") from None
    if args.json:
        print_json([{"name": j.spec.name, "job_id": j.job_id} for j in reply.jobs])
    else:
        for job in reply.jobs:
            print(f"{job.spec.name} {job.job_id} {batch_pb2.JobState.Name(job.state)}")
    return 0


def _submit(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    if args.file is not None:
        return _submit_graph(args)
    spec = spec_from_args(args)
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        reply = batch.call("SubmitJob", batch_pb2.SubmitJobRequest(spec=spec))
        if not args.wait:
            if args.json:
                print_json(to_dict(reply.job))
            else:
                print(reply.job_id, flush=True)
            return 0
        if not args.json:
            print(reply.job_id, flush=True)
        try:
            job = _wait(batch, reply.job_id, quiet=args.json)
        except KeyboardInterrupt:
            job_id = reply.job_id
            print(
                f"\nstopped waiting; job {job_id} keeps running. Follow it with `agora job "
                f"status {job_id}` or `agora job logs {job_id} --follow`; stop it with "
                f"`agora job kill {job_id}`",
                file=sys.stderr,
                flush=True,
            )
            return 130
        if args.json:  # watch events carry counts; print the whole job, instances and all
            job = batch.call("GetJob", batch_pb2.GetJobRequest(job_id=reply.job_id))
    if args.json:
        print_json(to_dict(job))
    return 0 if job.state == batch_pb2.JOB_SUCCEEDED else 1


def _events(batch: BatchClient, job_id: str, patience: float = 60.0) -> Iterator:
    """The job's events; if the batch daemon goes away meanwhile (a restart), finds it again
    through the master and watches on, for up to `patience` seconds without it."""
    import grpc

    from agora.v1 import batch_pb2

    gone_since = None
    while True:
        try:
            for event in batch.stub.WatchJob(batch_pb2.WatchJobRequest(job_id=job_id)):
                gone_since = None
                yield event
            return
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                raise call_error(e) from None
            error = e.details() or e.code().name
        now = time.monotonic()
        gone_since = gone_since or now
        if now - gone_since > patience:
            raise CommandError(f"lost the batch daemon for {patience:g} s: {error}")
        time.sleep(1.0)
        try:
            batch.connect()
        except CommandError:
            pass  # not back yet


def _wait(batch: BatchClient, job_id: str, quiet: bool = False):
    """Follows the job to its end, drawing progress; returns the final Job."""
    from agora.frameworks.batch.state import job_state_name

    tty = sys.stdout.isatty() and not quiet
    last_line = ""
    job = None
    for event in _events(batch, job_id):
        job = event.job
        line = _progress(job, bar=tty)
        if quiet:
            continue
        if line == last_line:
            continue
        if tty:
            sys.stdout.write("\r\x1b[K" + line)
            sys.stdout.flush()
        else:
            print(line, flush=True)
        last_line = line
    if job is None:
        raise CommandError(f"the batch daemon ended the watch of {job_id} early")
    if tty:
        sys.stdout.write("\n")
    if not quiet:
        state = job_state_name(job.state)
        detail = f": {job.message}" if job.message and state != "SUCCEEDED" else ""
        stream = sys.stdout if state == "SUCCEEDED" else sys.stderr
        print(f"job {job.job_id} {state}{detail}", file=stream, flush=True)
    return job


def _progress(job, bar: bool) -> str:
    from agora.frameworks.batch.state import job_state_name

    total = job.spec.instances or 1
    c = job.counts
    done, failed = c.succeeded, c.failed + c.killed
    text = (
        f"{done}/{total} done, {c.running} running, {failed} failed, {c.pending} pending "
        f"[{job_state_name(job.state)}]"
    )
    if c.pending and job.message:  # why instances wait (a gang that cannot fit, ...)
        text += f": {job.message}"
    if not bar:
        return f"{job.job_id}: {text}"
    width = 30
    filled = int(width * done / total)
    failed_cells = min(width - filled, int(round(width * failed / total)))
    running_cells = min(width - filled - failed_cells, int(round(width * c.running / total)))
    cells = "#" * filled + "x" * failed_cells + ">" * running_cells
    return f"[{cells.ljust(width, '.')}] {text}"


# --- status, list, kill -------------------------------------------------------------------------


def _status(args: argparse.Namespace) -> int:

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        job = _find_job(batch, args.job_id)
    if args.json:
        print_json(to_dict(job))
        return 0
    print(_describe(job))
    return 0


def _describe(job) -> str:
    from agora.frameworks.batch.pending import name as pending_name
    from agora.frameworks.batch.state import job_state_name
    from agora.frameworks.batch.validation import describe_needs

    spec, c = job.spec, job.counts
    lines = [
        f"job {job.job_id}  {spec.name}  {job_state_name(job.state)}",
        f"  instances  {len(job.instances)}: {c.succeeded} succeeded, {c.running} running, "
        f"{c.pending} pending, {c.failed} failed, {c.killed} killed",
        f"  command    {command_text(spec.task.command)}",
        f"  each       {describe_needs(spec)}   retries {spec.max_retries}   "
        f"priority {spec.priority}   gang {'yes' if spec.gang else 'no'}",
        f"  submitted  {when(job.submitted_at)}   started {when(job.started_at)}   "
        f"ended {when(job.ended_at)}",
    ]
    if job.pending_reason:
        lines.append(f"  waiting    {pending_name(job.pending_reason)}")
    if job.message:
        lines.append(f"  message    {job.message}")
    lines.append("")
    lines.append(
        format_table(
            ["INSTANCE", "STATE", "ATTEMPTS", "HOST", "TASK", "EXIT", "MESSAGE"],
            _instance_rows(job),
        )
    )
    return "\n".join(lines)


def _instance_rows(job) -> list[list[str]]:
    from agora.frameworks.batch.state import instance_state_name
    from agora.frameworks.sdk import state_name

    rows = []
    for instance in job.instances:
        last = instance.attempts[-1] if instance.attempts else None
        rows.append(
            [
                str(instance.index),
                instance_state_name(instance.state),
                str(len(instance.attempts)),
                (last.hostname or last.agent_id) if last else "-",
                state_name(last.state) if last else "-",
                str(last.exit_code) if last is not None and last.HasField("exit_code") else "-",
                (last.message if last else "") or "-",
            ]
        )
    return rows


def _list(args: argparse.Namespace) -> int:
    from agora.frameworks.batch.pending import name as pending_name
    from agora.frameworks.batch.state import job_state_name
    from agora.v1 import batch_pb2

    states = [batch_pb2.JobState.Value(f"JOB_{s.upper()}") for s in args.state]
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        reply = batch.call("ListJobs", batch_pb2.ListJobsRequest(states=states))
    if args.json:
        print_json([to_dict(job) for job in reply.jobs])
        return 0
    if not reply.jobs:
        print("no jobs")
        return 0
    rows = [
        [
            job.job_id,
            job.spec.name,
            job_state_name(job.state),
            f"{job.counts.succeeded}/{job.spec.instances}",
            str(job.counts.running),
            str(job.counts.failed),
            str(job.spec.priority),
            when(job.submitted_at),
            pending_name(job.pending_reason) or "-",
        ]
        for job in reply.jobs
    ]
    headers = ["ID", "NAME", "STATE", "DONE", "RUNNING", "FAILED", "PRIORITY", "SUBMITTED"]
    print(format_table([*headers, "REASON"], rows))
    return 0


def _control(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        job_id = _find_job(batch, args.job_id).job_id
        if args.action == "requeue":
            job = batch.call("RequeueJob", batch_pb2.RequeueJobRequest(job_id=job_id))
        else:
            request = batch_pb2.HoldJobRequest(job_id=job_id, hold=args.action == "hold")
            job = batch.call("HoldJob", request)
    if args.json:
        print_json(to_dict(job))
        return 0
    from agora.frameworks.batch.pending import name as pending_name

    past = {"hold": "held", "release": "released", "requeue": "requeued"}[args.action]
    waiting = pending_name(job.pending_reason)
    print(f"job {job_id} {past}" + (f": {job.message}" if job.message else "")
          + (f" (waiting: {waiting})" if waiting else ""))  # fmt: skip
    return 0


def _update(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    request = batch_pb2.UpdateJobRequest()
    if args.priority is not None:
        request.priority = args.priority
    if args.instances is not None:
        if args.instances < 1:
            raise CommandError(f"--instances must be at least 1, got {args.instances}")
        request.instances = args.instances
    if args.time_limit is not None:
        request.time_limit_seconds = args.time_limit
    if not request.ListFields():
        raise CommandError("nothing to change: give --priority, --instances or --time-limit")
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        request.job_id = _find_job(batch, args.job_id).job_id
        job = batch.call("UpdateJob", request)
    if args.json:
        print_json(to_dict(job))
    else:
        spec = job.spec
        limit = f"{spec.time_limit_seconds:g} s" if spec.time_limit_seconds else "none"
        print(
            f"job {job.job_id} updated: priority {spec.priority}, {spec.instances} "
            f"instance(s), time limit {limit}"
        )
    return 0


def _job_count(text: str) -> int:
    """argparse type for --limit: a whole number of jobs, at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 2**32 - 1:  # ListJobsRequest.limit is a uint32
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1 to {2**32 - 1}")
    return value


def _history(args: argparse.Namespace) -> int:
    from agora.frameworks.batch.state import instance_state_name
    from agora.v1 import batch_pb2

    request = batch_pb2.ListJobsRequest(
        states=[batch_pb2.JOB_SUCCEEDED, batch_pb2.JOB_FAILED, batch_pb2.JOB_KILLED],
        include_instances=True,
        ended_after=time.time() - args.since if args.since is not None else 0.0,
        limit=args.limit,
    )
    if args.owner is not None:
        request.owner = args.owner
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        jobs = batch.call("ListJobs", request).jobs
    if args.limit:
        jobs = jobs[-args.limit :]  # a batch daemon older than `limit` sends them all
    if args.json:
        print_json([to_dict(job) for job in jobs])
        return 0
    if not jobs:
        print("no finished jobs")
        return 0
    rows = []
    for job in jobs:
        for instance in job.instances:
            last = instance.attempts[-1] if instance.attempts else None
            usage = last.usage if last is not None and last.HasField("usage") else None
            cpu = usage.cpu_user_seconds + usage.cpu_system_seconds if usage else None
            rows.append(
                [
                    job.job_id,
                    job.spec.name,
                    job.spec.owner or "-",
                    str(instance.index),
                    instance_state_name(instance.state),
                    str(last.exit_code) if last is not None and last.HasField("exit_code") else "-",
                    when(last.started_at or last.launched_at) if last else "-",
                    when(last.ended_at) if last else "-",
                    (last.hostname or last.agent_id) if last else "-",
                    f"{cpu:.2f}" if cpu is not None else "-",
                    f"{usage.mem_peak_bytes / 2**20:.1f}" if usage else "-",
                    str(len(instance.attempts)),
                ]
            )
    headers = ["JOB", "NAME", "OWNER", "INSTANCE", "STATE", "EXIT", "START", "END", "AGENT"]
    print(format_table([*headers, "CPU S", "PEAK MB", "ATTEMPTS"], rows))
    return 0


def _owners(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        owners = batch.call("ListOwners", batch_pb2.ListOwnersRequest()).owners
    if args.json:
        print_json([to_dict(o) for o in owners])
        return 0
    if not owners:
        print("no owners: no job waits or runs")
        return 0
    rows = [
        [
            o.name or "(anonymous)",
            f"{o.weight:g}",
            str(o.running),
            str(o.pending),
            f"{o.cpus:g}",
            f"{o.mem:g}",
            f"{o.share:.3f}",
        ]
        for o in owners
    ]
    print(format_table(["OWNER", "WEIGHT", "RUNNING", "PENDING", "CPUS", "MEM", "SHARE"], rows))
    return 0


def _owner_weight(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    request = batch_pb2.SetOwnerWeightRequest(owner=args.owner, weight=args.weight)
    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        owner = batch.call("SetOwnerWeight", request)
    if args.json:
        print_json(to_dict(owner))
    else:
        print(f"owner {args.owner or '(anonymous)'} weight {owner.weight:g}")
    return 0


def _kill(args: argparse.Namespace) -> int:
    from agora.v1 import batch_pb2

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        reply = batch.call("KillJob", batch_pb2.KillJobRequest(job_id=args.job_id))
    if args.json:
        print_json(to_dict(reply.job))
    else:
        running = reply.job.counts.running
        print(f"job {args.job_id} KILLED ({running} running task(s) being killed)")
    return 0


# --- logs ---------------------------------------------------------------------------------------


def _logs(args: argparse.Namespace) -> int:
    from agora.cli.sandbox_read import TaskPlace, current_agent, print_file

    with BatchClient(args.master, credentials_from(args), args.batch) as batch:
        job = _find_job(batch, args.job_id)
    if not 0 <= args.instance < len(job.instances):
        raise CommandError(
            f"job {job.job_id} has instances 0-{len(job.instances) - 1}, not {args.instance}"
        )
    attempts = job.instances[args.instance].attempts
    if not attempts:
        raise CommandError(
            f"instance {args.instance} of job {job.job_id} has not been launched yet"
        )
    if args.attempt:
        if not 1 <= args.attempt <= len(attempts):
            raise CommandError(f"instance {args.instance} has attempts 1-{len(attempts)}")
        attempt = attempts[args.attempt - 1]
    else:
        attempt = attempts[-1]
    credentials = credentials_from(args)
    # The agent's address as the master knows it now: the batch daemon records the address
    # of the offer it launched on, which an agent restarted with another --host has left.
    address, name = current_agent(args, credentials, attempt.agent_id) or (
        attempt.agent_address,
        attempt.hostname or attempt.agent_id,
    )
    if not address:
        raise CommandError(f"the agent of task {attempt.task_id} did not publish an address")
    place = TaskPlace(attempt.framework_id, attempt.task_id, address, name)
    return print_file(place, credentials, stderr=args.stderr, follow=args.follow)
