"""`agora cluster ...`: the live cluster as the master sees it, and the operator's knobs.

This module is the parser only; the calls live in agora.cli.cluster_calls, imported once a
command runs, so that `agora cluster --help` loads neither grpc nor the Operator API.
"""

from __future__ import annotations

import argparse
import math

from agora.cli.options import add_json_flag, add_master_flag, duration


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="show the live cluster; set role weights and quota",
        description="Reads the cluster from the master's Operator API. Tables for people, "
        "--json for scripts.",
    )
    sub = p.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True

    def command(name: str, help: str) -> argparse.ArgumentParser:
        q = sub.add_parser(name, help=help, description=help)
        add_master_flag(q)
        add_json_flag(q)
        q.add_argument(
            "--timeout",
            type=float,
            default=10.0,
            metavar="SECONDS",
            help="give up on the master after this long (default 10)",
        )
        q.set_defaults(func=_run)
        return q

    command("state", "a summary of agents, frameworks, tasks and roles")
    command("masters", "every master of the set, which one leads, and since when")
    command("agents", "agents with their resources, allocation and state")
    frameworks = command("frameworks", "frameworks with their role, allocation and DRF share")
    frameworks.add_argument(
        "--why",
        metavar="FRAMEWORK",
        help="say why FRAMEWORK (id or name) is getting no offers right now",
    )
    tasks = command("tasks", "tasks with their state and agent")
    tasks.add_argument(
        "--framework", default="", help="only this framework's tasks (its id or name)"
    )
    tasks.add_argument("--agent", default="", help="only tasks on this agent (id)")
    tasks.add_argument(
        "--usage",
        action="store_true",
        help="also what each running task uses now (CPU seconds, memory, disk), asked of its agent",
    )
    command("roles", "roles with weight, quota, allocation and dominant share")
    weight = command(
        "weight",
        "set a role's weight (default 1): a role with weight 2 is "
        "entitled to twice the share of a role with weight 1",
    )
    weight.add_argument("role")
    weight.add_argument("weight", type=_positive_number)
    quota = command(
        "quota",
        "set a role's quota: a guarantee held back for it while it is "
        "below it, and a limit it is never offered beyond",
    )
    quota.add_argument("role")
    quota.add_argument(
        "--guarantee", default="", metavar="RESOURCES", help="e.g. 'cpus:4;mem:4096' (default none)"
    )
    quota.add_argument(
        "--limit", default="", metavar="RESOURCES", help="e.g. 'cpus:8;mem:8192' (default no limit)"
    )
    drain = command(
        "drain",
        "drain an agent for maintenance: nothing more of it is offered and the frameworks "
        "with tasks there are told (the services framework moves its instances first); with "
        "--deadline, what still runs there then is killed and the batch framework runs it "
        "again elsewhere",
    )
    drain.add_argument("agent_id")
    drain.add_argument(
        "--deadline",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="how long its tasks may run on, e.g. 10m, 1h30m (default: no deadline, they "
        "run until they end)",
    )
    drain.add_argument(
        "--wait",
        action="store_true",
        help="wait until no task runs on the agent, printing progress",
    )
    undrain = command("undrain", "offer a drained agent's resources again")
    undrain.add_argument("agent_id")
    teardown = command(
        "teardown",
        "tear a framework down as an operator: its tasks are killed and its id refused "
        "(needs the teardown_frameworks ACL unless it is your own)",
    )
    teardown.add_argument("framework", help="framework id, or a name only one framework has")
    kill = command(
        "kill",
        "kill one running task of any framework as an operator (needs the kill_tasks ACL "
        "unless the framework is your own); the framework hears TASK_KILLED",
    )
    kill.add_argument("framework", help="framework id, or a name only one framework has")
    kill.add_argument("task_id")
    kill.add_argument(
        "--grace",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="SIGTERM, then SIGKILL after this long (default: the task's own grace period)",
    )
    command(
        "preemptions",
        "the latest tasks stopped for another role, with why (needs a preemption timeout on "
        "the master: --guarantee-preemption-timeout, --fair-share-preemption-timeout)",
    )
    events = command(
        "events",
        "what happened in the cluster (agents, frameworks, tasks, roles, ACLs, masters, "
        "operators' changes), oldest first, from the master's recent history; --follow keeps "
        "printing as it happens, and resumes where it was after a failover",
    )
    events.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    events.add_argument(
        "--since",
        type=int,
        default=0,
        metavar="INDEX",
        help="only events after this index (the last one you saw; default: all kept)",
    )
    events.add_argument(
        "--topic",
        action="append",
        default=[],
        choices=["agent", "framework", "task", "role", "acl", "master", "audit"],
        help="only this topic (repeat for several; default: all)",
    )


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    from agora.cli import cluster_calls

    return cluster_calls.run(args)
