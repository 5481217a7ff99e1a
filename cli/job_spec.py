"""The flags that describe a batch job (`agora job submit`, `agora job schedule`), read into a
JobSpec."""

from __future__ import annotations

import argparse
from pathlib import Path

from agora.cli.errors import CommandError
from agora.cli.options import duration


def add_spec_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=None, help="job name (default: the program's name)")
    parser.add_argument(
        "--instances",
        type=int,
        default=None,
        help="instances (default 1, or one per line of --args-file)",
    )
    parser.add_argument(
        "--args-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="per-instance arguments, one line per instance (blank lines skipped): instance "
        "i gets line i in $AGORA_ARGS, and a command of several words gets its words "
        "appended (e.g. --args-file inputs.txt -- ./process)",
    )
    parser.add_argument("--cpus", type=float, default=0.1, help="cpus per instance (default 0.1)")
    parser.add_argument(
        "--mem", type=float, default=32.0, help="MB of memory per instance (default 32)"
    )
    parser.add_argument("--disk", type=float, default=0.0, help="MB of disk per instance")
    parser.add_argument(
        "--gpus",
        type=float,
        default=0.0,
        help="GPUs per instance (only GPU jobs run on agents with GPUs)",
    )
    parser.add_argument(
        "--image",
        default="",
        metavar="NAME",
        help="run each instance in a container of this image (one the agents imported with "
        "`agora agent image import`, e.g. busybox:latest): its own root filesystem, pid and "
        "mount namespaces, the sandbox at /mnt/mesos/sandbox (default: a plain process)",
    )
    parser.add_argument(
        "--network",
        choices=("host", "none"),
        default="",
        help="with --image: the host's network (default) or none (loopback only)",
    )
    parser.add_argument(
        "--constraint",
        action="append",
        default=[],
        metavar="FIELD:OPERATOR[:VALUE]",
        help="where instances may run, as an app's constraints, over hostname or an agent "
        "attribute: rack:LIKE:r[12], hostname:UNIQUE, rack:MAX_PER:2, zone:CLUSTER:a "
        "(repeatable)",
    )
    parser.add_argument(
        "--ports", type=int, default=0, help="ports per instance (the task sees PORT0...)"
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the tasks (repeatable)",
    )
    parser.add_argument("--role", default="", help="role whose reserved resources to use")
    parser.add_argument(
        "--revocable",
        action="store_true",
        help="may also run on revocable resources (idle reservations and quota headroom, lent "
        "until wanted): an instance there may be stopped at any time, and then runs again "
        "without spending a retry",
    )
    parser.add_argument(
        "--owner",
        default="",
        help="whose job, for the fair share between owners (`agora job owners`); with TLS "
        "the owner is your certificate's or token's name, and this is ignored",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=0,
        help="times a failed instance is retried, with backoff (default 0)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=0,
        help="higher runs first when the daemon uses --queue priority",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="declared run time, for the daemon's --queue sjf",
    )
    parser.add_argument(
        "--gang", action="store_true", help="launch all instances at once or none (gang scheduling)"
    )
    parser.add_argument(
        "--max-running",
        type=int,
        default=0,
        metavar="N",
        help="at most N instances launched or running at once, the others waiting their turn "
        "(Slurm's --array=1-INSTANCES%%N; each sees its index in $AGORA_INSTANCE) "
        "(default: no limit)",
    )
    parser.add_argument(
        "--begin",
        type=begin_time,
        default=0.0,
        metavar="WHEN",
        help="launch nothing before then: a wait (10m, 2h) or a local time (09:30, "
        "2026-12-01T09:30) (Slurm's --begin; default: at once)",
    )
    parser.add_argument(
        "--kill-grace",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="between a kill's SIGTERM and its SIGKILL, e.g. 30s (default: the agent's, 3 s)",
    )
    parser.add_argument(
        "--time-limit",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="how long each instance may run, e.g. 90s, 10m, 2h: past it the agent kills it "
        "and it fails (REASON_MAX_COMPLETION_TIME_REACHED), retried if --retries remain "
        "(default: no limit)",
    )


def begin_time(text: str) -> float:
    """argparse type for --begin: a wait from now (10m, 2h) or a local date and time
    (2026-12-01T09:30, or 09:30 for the next one) -> Unix seconds."""
    import datetime as dt
    import time

    try:
        return time.time() + duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        if "T" in text or "-" in text:
            return dt.datetime.fromisoformat(text).timestamp()
        clock = dt.time.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a wait (10m, 2h) or a local time (09:30, 2026-12-01T09:30)"
        ) from None
    now = dt.datetime.now()
    at = dt.datetime.combine(now.date(), clock)
    if at <= now:
        at += dt.timedelta(days=1)
    return at.timestamp()


def add_command_arg(parser: argparse.ArgumentParser) -> None:
    # dest is not "command": agora.cli.main reads args.command (the subcommand) for its messages.
    parser.add_argument(
        "argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help="the command to run"
    )


def spec_from_args(args: argparse.Namespace):
    """The JobSpec the flags describe (`after` from --after when the command has it)."""
    from agora.v1 import batch_pb2, common_pb2

    command = list(args.argv)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CommandError("no command: put it after `--`, e.g. agora job submit -- echo hello")
    instance_args = _instance_args(args.args_file) if args.args_file else []
    instances = args.instances if args.instances is not None else len(instance_args) or 1
    if instances < 1:
        raise CommandError(f"--instances must be at least 1, got {instances}")
    if args.retries < 0 or args.ports < 0 or args.max_running < 0:
        raise CommandError("--retries, --ports and --max-running must not be negative")
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CommandError(f"--env {item!r}: write KEY=VALUE")
        env[key] = value
    info = (
        common_pb2.CommandInfo(shell=command[0])
        if len(command) == 1
        else common_pb2.CommandInfo(argv=command)
    )
    from agora.frameworks.batch.dependencies import parse_after

    try:
        after = [parse_after(text) for text in getattr(args, "after", ())]
    except ValueError as e:
        raise CommandError(str(e)) from None
    words = command[0].split()
    name = args.name or (words[0].rsplit("/", 1)[-1] if words else "") or "job"
    constraints = [parse_constraint(text, "--constraint") for text in args.constraint]
    task = batch_pb2.TaskTemplate(
        command=info,
        cpus=args.cpus,
        mem=args.mem,
        disk=args.disk,
        gpus=args.gpus,
        ports=args.ports,
        env=env,
        role=args.role,
        kill_grace_period_seconds=getattr(args, "kill_grace", 0.0),
    )
    image = getattr(args, "image", "")
    if getattr(args, "network", "") and not image:
        raise CommandError("--network applies to a job with --image")
    if image:
        task.container.image = image
        task.container.network = getattr(args, "network", "")
    return batch_pb2.JobSpec(
        name=name,
        instances=instances,
        task=task,
        max_retries=args.retries,
        priority=args.priority,
        gang=args.gang,
        duration_seconds=args.duration,
        after=after,
        time_limit_seconds=args.time_limit,
        max_running=args.max_running,
        begin_at=getattr(args, "begin", 0.0),
        instance_args=instance_args,
        constraints=constraints,
        owner=args.owner,
        revocable=args.revocable,
    )


def _instance_args(path: Path) -> list[str]:
    try:
        text = path.read_text()
    except OSError as e:
        raise CommandError(f"--args-file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CommandError(f"--args-file {path}: not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise CommandError(f"--args-file {path}: no lines: give one line per instance")
    return lines


def parse_constraint(text: str, where: str):
    """A Constraint from `FIELD:OPERATOR[:VALUE]` (checked whole by the Batch API)."""
    from agora.v1 import services_pb2

    parts = str(text).split(":", 2)
    if len(parts) < 2 or not all(parts[:2]):
        raise CommandError(f"{where} {text!r}: write FIELD:OPERATOR[:VALUE], e.g. rack:LIKE:r1")
    value = parts[2] if len(parts) > 2 else ""
    return services_pb2.Constraint(field=parts[0], operator=parts[1].upper(), value=value)


def command_text(command) -> str:
    import shlex

    return command.shell if command.shell else shlex.join(command.argv)
