"""`agora task logs TASK_ID`: any framework's task, found through the master."""

from __future__ import annotations

import argparse

from agora.cli.options import add_master_flag, credentials_from, master_address


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "task",
        help="read any framework's task output",
        description="Finds a task through the master (running, or ended recently enough to be "
        "remembered) and reads its sandbox from its agent.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    logs = actions.add_parser(
        "logs",
        help="print a task's stdout (or stderr), read from its agent",
        description="Prints a task's stdout (or --stderr). With --follow, keeps printing what "
        "it writes until it ends (Ctrl-C stops following; the task goes on).",
    )
    add_master_flag(logs)
    logs.add_argument("task_id", metavar="TASK_ID")
    logs.add_argument(
        "--framework",
        default="",
        help="the task's framework (id or name), when several frameworks have a task of that id",
    )
    logs.add_argument("--stderr", action="store_true", help="print stderr instead of stdout")
    logs.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the task ends"
    )
    logs.set_defaults(func=_logs)


def _logs(args: argparse.Namespace) -> int:
    from agora.cli.sandbox_read import find_task, print_file

    credentials = credentials_from(args)
    place = find_task(master_address(args), credentials, args.task_id, args.framework)
    return print_file(place, credentials, stderr=args.stderr, follow=args.follow)
