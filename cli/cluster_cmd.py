"""`agora cluster state|agents|frameworks|tasks`: what the master knows, for people or scripts."""

from __future__ import annotations

import argparse
import json
import time

from cli.options import add_json_flag, add_master_flag

VIEWS = ("state", "agents", "frameworks", "tasks")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "cluster",
        help="show the live cluster: agents, frameworks, tasks",
        description="Asks the master's Operator API and prints a table (or JSON with --json).",
    )
    p.add_argument("view", choices=VIEWS,
                   help="state: a summary of everything; agents, frameworks or tasks: one table")
    p.add_argument("--framework", default="", help="tasks: only this framework id")
    p.add_argument("--agent", default="", help="tasks: only this agent id")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for the master (default 5)")
    add_master_flag(p)
    add_json_flag(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import grpc
    from agora.v1 import operator_pb2, operator_pb2_grpc
    from google.protobuf.json_format import MessageToDict

    from cli.main import CommandError
    from common.rpc import CHANNEL_OPTIONS

    with grpc.insecure_channel(args.master, options=CHANNEL_OPTIONS) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        try:
            if args.view == "state":
                reply = stub.GetState(operator_pb2.GetStateRequest(), timeout=args.timeout)
            elif args.view == "agents":
                reply = stub.ListAgents(operator_pb2.ListAgentsRequest(), timeout=args.timeout)
            elif args.view == "frameworks":
                reply = stub.ListFrameworks(operator_pb2.ListFrameworksRequest(),
                                            timeout=args.timeout)
            else:
                reply = stub.ListTasks(operator_pb2.ListTasksRequest(
                    framework_id=args.framework, agent_id=args.agent), timeout=args.timeout)
        except grpc.RpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise CommandError(f"cannot reach the master at {args.master} "
                                   f"({e.code().name.lower()}); is it running? "
                                   "Set --master or $AGORA_MASTER") from None
            raise CommandError(f"{e.code().name}: {e.details()}") from None
    if args.json:
        print(json.dumps(MessageToDict(reply, preserving_proto_field_name=True), indent=2))
        return 0
    if args.view == "state":
        _print_state(reply)
    elif args.view == "agents":
        _print_agents(reply.agents)
    elif args.view == "frameworks":
        _print_frameworks(reply.frameworks)
    else:
        _print_tasks(reply.tasks)
    return 0


def _res(resources) -> str:
    from common import Resources

    return str(Resources.from_proto(resources))


def _ago(at: float) -> str:
    if not at:
        return "-"
    seconds = max(0.0, time.time() - at)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _print_agents(agents) -> None:
    if not agents:
        print("no agents registered")
        return
    print(table(["AGENT", "HOSTNAME", "STATE", "TASKS", "RESOURCES", "ALLOCATED", "HEARTBEAT"],
                [[a.info.agent_id, a.info.hostname, a.state, str(a.task_count),
                  _res(a.info.resources), _res(a.allocated), _ago(a.last_heartbeat_at)]
                 for a in agents]))


def _print_frameworks(frameworks) -> None:
    if not frameworks:
        print("no frameworks subscribed")
        return
    print(table(["FRAMEWORK", "NAME", "ROLE", "CONNECTED", "TASKS", "SHARE", "ALLOCATED",
                 "SERVICE"],
                [[f.info.framework_id, f.info.name, f.info.role or "*",
                  ("yes" if f.connected else "no") + (" (suppressed)" if f.suppressed else ""),
                  str(f.task_count), f"{f.dominant_share:.3f}", _res(f.allocated),
                  f.info.service_address or "-"] for f in frameworks]))


def _print_tasks(tasks) -> None:
    from agora.v1 import common_pb2

    if not tasks:
        print("no tasks")
        return
    print(table(["TASK", "FRAMEWORK", "AGENT", "HOST", "STATE", "RESOURCES", "MESSAGE"],
                [[t.task_id, t.framework_id, t.agent_id, t.hostname or "-",
                  common_pb2.TaskState.Name(t.state).removeprefix("TASK_"), _res(t.resources),
                  t.last_status.message or "-"] for t in tasks]))


def _print_state(state) -> None:
    print(f"master {state.master_id}, up since {_ago(state.started_at)}")
    print(f"total resources: {_res(state.total)}")
    print(f"{len(state.agents)} agents, {len(state.frameworks)} frameworks, "
          f"{len(state.tasks)} tasks\n")
    _print_agents(state.agents)
    print()
    _print_frameworks(state.frameworks)
    print()
    _print_tasks(state.tasks)
    if state.roles:
        print()
        print(table(["ROLE", "WEIGHT", "SHARE", "ALLOCATED", "FRAMEWORKS"],
                    [[r.role, f"{r.weight:g}", f"{r.dominant_share:.3f}", _res(r.allocated),
                      str(len(r.framework_ids))] for r in state.roles]))
