"""What `agora cluster ...` does once parsed: calls to the master's Operator API, and the
tables and JSON of their replies. agora.cli.cluster_cmd holds the parser."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time

import grpc

from agora.cli.errors import CommandError, unreachable
from agora.cli.options import credentials_from, master_address
from agora.cli.tables import format_table
from agora.common import ResourceError, Resources, attributes_from_proto
from agora.common.rpc import open_channel
from agora.v1 import common_pb2, operator_pb2, operator_pb2_grpc


def run(args: argparse.Namespace) -> int:
    """Runs `agora cluster WHAT` (args.what) against the leading master."""
    try:
        return asyncio.run(_call(CALLS[args.what], args))
    except grpc.aio.AioRpcError as e:
        if e.code() in _CONNECTION_CODES:
            where = getattr(args, "_leader", args.master)
            raise unreachable(e, where, credentials_from(args), service="Operator") from None
        raise CommandError(f"{e.details()} ({e.code().name})") from None


# Codes that may mean the call never reached an Operator service (common/failures names why).
_CONNECTION_CODES = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNIMPLEMENTED,
)


async def _call(func, args: argparse.Namespace) -> int:
    leader = await asyncio.to_thread(master_address, args)
    async with open_channel(leader, credentials_from(args)) as channel:
        stub = operator_pb2_grpc.OperatorStub(channel)
        await _reach(stub, leader, args)
        return await func(stub, args) or 0


async def _reach(stub, address: str, args) -> None:
    """One cheap call first, so that a master that is down is said at once (a refused
    connection fails fast) and a TLS refusal is named; other refusals (an ACL) are left to
    the command's own call to report."""
    try:
        await stub.ListMasters(operator_pb2.ListMastersRequest(), timeout=args.timeout)
    except grpc.aio.AioRpcError as e:
        if e.code() not in _CONNECTION_CODES:
            return
        raise unreachable(e, address, credentials_from(args), service="Operator") from None


# --- views ----------------------------------------------------------------------------------


def _res(resources) -> str:
    return Resources.from_proto(resources).format() or "-"


def _state_name(state: int) -> str:
    return common_pb2.TaskState.Name(state)


def agent_row(a: operator_pb2.AgentSummary) -> dict:
    return {
        "agent_id": a.info.agent_id,
        "hostname": a.info.hostname,
        "address": a.info.address,
        "state": a.state,
        "drain_deadline": a.drain_deadline,
        "resources": _res(a.info.resources),
        "allocated": _res(a.allocated),
        "offered": _res(a.offered),
        "attributes": attributes_from_proto(a.info.attributes),
        "isolation": list(a.info.isolation),
        "task_count": a.task_count,
        "registered_at": a.registered_at,
        "last_heartbeat_at": a.last_heartbeat_at,
    }


def framework_row(f: operator_pb2.FrameworkSummary) -> dict:
    return {
        "framework_id": f.info.framework_id,
        "name": f.info.name,
        "role": f.info.role or "*",
        "connected": f.connected,
        "suppressed": f.suppressed,
        "dominant_share": round(f.dominant_share, 6),
        "allocated": _res(f.allocated),
        "offered": _res(f.offered),
        "task_count": f.task_count,
        "service_address": f.info.service_address,
        "registered_at": f.registered_at,
    }


def task_row(t: operator_pb2.TaskSummary) -> dict:
    return {
        "task_id": t.task_id,
        "name": t.name,
        "framework_id": t.framework_id,
        "agent_id": t.agent_id,
        "hostname": t.hostname,
        "state": _state_name(t.state),
        "resources": _res(t.resources),
        "message": t.last_status.message,
        "reason": t.last_status.reason,
    }


def role_row(r: operator_pb2.RoleSummary) -> dict:
    return {
        "role": r.role,
        "weight": r.weight,
        "guarantee": _res(r.quota.guarantee),
        "limit": _res(r.quota.limit),
        "allocated": _res(r.allocated),
        "held_back": _res(r.headroom),
        "dominant_share": round(r.dominant_share, 6),
        "frameworks": list(r.framework_ids),
    }


def print_table(rows: list[dict], columns: list[tuple[str, str]]) -> None:
    """Left-aligned columns sized to their widest cell; `columns` is (key, heading)."""
    if not rows:
        print("(none)")
        return
    cells = [[_cell(row[key]) for key, _ in columns] for row in rows]
    print(format_table([heading for _, heading in columns], cells))


def _cell(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, dict):
        return ";".join(f"{k}:{v}" for k, v in sorted(value.items())) or "-"
    if isinstance(value, list):
        return ",".join(value) or "-"
    return str(value) if value != "" else "-"


def _emit(args, rows: list[dict], columns: list[tuple[str, str]]) -> None:
    if args.json:
        print(json.dumps(rows, indent=2))  # full enum names (TASK_RUNNING), as in the protos
    else:
        # For people, as `agora job status` and the dashboard show them: RUNNING, FINISHED.
        shown = [
            {**row, "state": row["state"].removeprefix("TASK_")}
            if isinstance(row.get("state"), str)
            else row
            for row in rows
        ]
        print_table(shown, columns)


# --- commands -------------------------------------------------------------------------------


async def _state(stub, args) -> None:
    s = await stub.GetState(operator_pb2.GetStateRequest())
    running = sum(1 for t in s.tasks if t.state == common_pb2.TASK_RUNNING)
    summary = {
        "master_id": s.master_id,
        "started_at": s.started_at,
        "uptime_seconds": round(time.time() - s.started_at, 1) if s.started_at else 0,
        "total": _res(s.total),
        "agents": len(s.agents),
        "frameworks": len(s.frameworks),
        "tasks": len(s.tasks),
        "running_tasks": running,
        "roles": len(s.roles),
        "leader": s.leader,
        "masters": [master_row(m) for m in s.masters],
        "warnings": list(s.warnings),
    }
    if args.json:
        summary.update(
            agent_list=[agent_row(a) for a in s.agents],
            framework_list=[framework_row(f) for f in s.frameworks],
            task_list=[task_row(t) for t in s.tasks],
            role_list=[role_row(r) for r in s.roles],
        )
        print(json.dumps(summary, indent=2))
        return
    print(
        f"{summary['agents']} agents, {summary['frameworks']} frameworks, "
        f"{summary['tasks']} tasks ({running} running)"
    )
    for key in ("master_id", "leader", "uptime_seconds", "total", "roles"):
        print(f"{key.replace('_', ' ')}: {summary[key]}")
    if len(s.masters) > 1:
        standing_by = ", ".join(m.address for m in s.masters if not m.leading)
        print(f"masters: {len(s.masters)} ({standing_by} standing by)")
    for warning in s.warnings:
        print(f"WARNING: {warning}")


def master_row(m: operator_pb2.MasterSummary) -> dict:
    return {
        "master_id": m.master_id,
        "address": m.address,
        "leading": m.leading,
        "role": "leader" if m.leading else "standby",
        "started_at": m.started_at,
        "elected_at": m.elected_at or None,
        "since": _ago(m.elected_at if m.leading else m.started_at),
    }


def _ago(when: float) -> str:
    """'3m12s ago' for a wall-clock time."""
    if not when:
        return "-"
    seconds = max(0, int(time.time() - when))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )
    return f"{text} ago"


async def _masters(stub, args) -> None:
    masters = (await stub.ListMasters(operator_pb2.ListMastersRequest())).masters
    _emit(
        args,
        [master_row(m) for m in masters],
        [("address", "ADDRESS"), ("role", "ROLE"), ("since", "SINCE"), ("master_id", "ID")],
    )


async def _agents(stub, args) -> None:
    agents = (await stub.ListAgents(operator_pb2.ListAgentsRequest())).agents
    _emit(
        args,
        [agent_row(a) for a in agents],
        [
            ("agent_id", "ID"),
            ("hostname", "HOST"),
            ("address", "ADDRESS"),
            ("state", "STATE"),
            ("task_count", "TASKS"),
            ("resources", "RESOURCES"),
            ("allocated", "ALLOCATED"),
            ("isolation", "ISOLATION"),
        ],
    )


async def _frameworks(stub, args) -> int:
    if args.why:
        reply = await stub.ExplainOffers(operator_pb2.ExplainOffersRequest(framework=args.why))
        if args.json:
            print(
                json.dumps(
                    {"framework_id": reply.framework_id, "reasons": list(reply.reasons)}, indent=2
                )
            )
        else:
            print(f"offers to {reply.framework_id} right now:")
            for reason in reply.reasons or [
                "not blocked: it is offered resources as they become free"
            ]:
                print(f"  - {reason}")
        return 0
    frameworks = (await stub.ListFrameworks(operator_pb2.ListFrameworksRequest())).frameworks
    _emit(
        args,
        [framework_row(f) for f in frameworks],
        [
            ("framework_id", "ID"),
            ("name", "NAME"),
            ("role", "ROLE"),
            ("connected", "CONNECTED"),
            ("suppressed", "SUPPRESSED"),
            ("task_count", "TASKS"),
            ("dominant_share", "DRF SHARE"),
            ("allocated", "ALLOCATED"),
        ],
    )
    return 0


async def _tasks(stub, args) -> None:
    request = operator_pb2.ListTasksRequest(agent_id=args.agent)
    tasks = list((await stub.ListTasks(request)).tasks)
    if args.framework:  # an id or a name (a name may be several frameworks over time)
        frameworks = (await stub.ListFrameworks(operator_pb2.ListFrameworksRequest())).frameworks
        ids = {
            f.info.framework_id
            for f in frameworks
            if args.framework in (f.info.framework_id, f.info.name)
        }
        ids |= {t.framework_id for t in tasks if t.framework_id == args.framework}
        if not ids:
            raise CommandError(
                f"no framework with id or name {args.framework!r} (`agora cluster frameworks`)"
            )
        tasks = [t for t in tasks if t.framework_id in ids]
    rows = [task_row(t) for t in tasks]
    columns = [
        ("task_id", "ID"),
        ("state", "STATE"),
        ("hostname", "HOST"),
        ("framework_id", "FRAMEWORK"),
        ("resources", "RESOURCES"),
        ("message", "MESSAGE"),
    ]
    if args.usage:
        await _add_usage(stub, args, rows)
        columns[4:4] = [("cpu_seconds", "CPU S"), ("mem_mb", "MEM MB"), ("disk_mb", "DISK MB")]
    _emit(args, rows, columns)


async def _add_usage(stub, args, rows: list[dict]) -> None:
    """Each running task's usage, from its agent's GetUsage (one call per agent)."""
    from agora.v1 import agent_pb2, agent_pb2_grpc

    agents = (await stub.ListAgents(operator_pb2.ListAgentsRequest())).agents
    addresses = {a.info.agent_id: a.info.address for a in agents}
    usage: dict[tuple[str, str], agent_pb2.TaskUsage] = {}
    credentials = credentials_from(args)
    for agent_id in sorted({row["agent_id"] for row in rows if row["state"] == "TASK_RUNNING"}):
        if not addresses.get(agent_id):
            continue
        async with open_channel(addresses[agent_id], credentials) as channel:
            try:
                reply = await agent_pb2_grpc.AgentStub(channel).GetUsage(
                    agent_pb2.GetUsageRequest(), timeout=args.timeout
                )
            except grpc.aio.AioRpcError:
                continue  # that agent does not answer: its tasks show no usage
        for u in reply.usage:
            usage[(u.framework_id, u.task_id)] = u
    for row in rows:
        u = usage.get((row["framework_id"], row["task_id"]))
        row["cpu_seconds"] = round(u.cpu_user_seconds + u.cpu_system_seconds, 2) if u else ""
        row["mem_mb"] = round(u.mem_rss_bytes / 2**20, 1) if u else ""
        row["mem_limit_mb"] = round(u.mem_limit_bytes / 2**20, 1) if u else ""
        row["disk_mb"] = round(u.disk_used_bytes / 2**20, 2) if u else ""


async def _roles(stub, args) -> None:
    roles = (await stub.ListRoles(operator_pb2.ListRolesRequest())).roles
    _emit(
        args,
        [role_row(r) for r in roles],
        [
            ("role", "ROLE"),
            ("weight", "WEIGHT"),
            ("guarantee", "GUARANTEE"),
            ("limit", "LIMIT"),
            ("allocated", "ALLOCATED"),
            ("held_back", "HELD BACK FOR IT"),
            ("dominant_share", "DRF SHARE"),
            ("frameworks", "FRAMEWORKS"),
        ],
    )


async def _weight(stub, args) -> None:
    await stub.UpdateWeight(operator_pb2.UpdateWeightRequest(role=args.role, weight=args.weight))
    _done(
        args,
        {"role": args.role, "weight": args.weight},
        f"role {args.role}: weight {args.weight:g}",
    )


async def _quota(stub, args) -> None:
    try:
        guarantee = Resources.parse(args.guarantee)
        limit = Resources.parse(args.limit)
    except ResourceError as e:
        raise CommandError(f"bad quota: {e}") from None
    quota = operator_pb2.Quota(guarantee=guarantee.to_proto(), limit=limit.to_proto())
    await stub.SetQuota(operator_pb2.SetQuotaRequest(role=args.role, quota=quota))
    _done(
        args,
        {"role": args.role, "guarantee": guarantee.format(), "limit": limit.format()},
        f"role {args.role}: guarantee {guarantee.format() or 'none'}, "
        f"limit {limit.format() or 'none'}",
    )


async def _drain(stub, args) -> None:
    reply = await stub.DrainAgent(
        operator_pb2.DrainAgentRequest(agent_id=args.agent_id, deadline_seconds=args.deadline)
    )
    until = (
        f"killed at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(reply.deadline))}"
        if reply.deadline
        else "no deadline"
    )
    _done(
        args,
        {
            "agent_id": args.agent_id,
            "state": "DRAINING",
            "deadline": reply.deadline,
            "tasks": reply.tasks,
        },
        f"agent {args.agent_id}: draining, no new offers; {reply.tasks} task(s) there "
        f"({until if reply.tasks else 'none to wait for'})",
    )
    if args.wait:
        await _wait_drained(stub, args.agent_id, reply.deadline, quiet=args.json)


async def _wait_drained(stub, agent_id: str, deadline: float, quiet: bool) -> None:
    """Polls until no task runs on the agent, saying how many are left when that changes."""
    left = None
    while True:
        agents = (await stub.ListAgents(operator_pb2.ListAgentsRequest())).agents
        agent = next((a for a in agents if a.info.agent_id == agent_id), None)
        if agent is None:
            raise CommandError(f"agent {agent_id} is no longer registered")
        if agent.state == "ACTIVE":  # DISCONNECTED or RECOVERING: the drain goes on
            raise CommandError(f"agent {agent_id} is ACTIVE again: the drain was ended")
        if agent.task_count == 0:
            if not quiet:
                print(f"agent {agent_id}: drained, no task runs there")
            return
        if agent.task_count != left and not quiet:
            due = f", deadline in {max(0.0, deadline - time.time()):.0f}s" if deadline else ""
            print(f"agent {agent_id}: {agent.task_count} task(s) left{due}", flush=True)
        left = agent.task_count
        await asyncio.sleep(1.0)


async def _undrain(stub, args) -> None:
    await stub.UndrainAgent(operator_pb2.UndrainAgentRequest(agent_id=args.agent_id))
    _done(
        args,
        {"agent_id": args.agent_id, "state": "ACTIVE"},
        f"agent {args.agent_id}: active again (its resources are offered)",
    )


async def _teardown(stub, args) -> None:
    reply = await stub.TeardownFramework(
        operator_pb2.TeardownFrameworkRequest(framework=args.framework)
    )
    _done(
        args,
        {"framework_id": reply.framework_id, "state": "TORN_DOWN"},
        f"framework {reply.framework_id}: torn down (its tasks are being killed)",
    )


async def _kill(stub, args) -> None:
    if not (math.isfinite(args.grace) and args.grace >= 0):
        raise CommandError(f"--grace must be 0 or more seconds, got {args.grace}")
    reply = await stub.KillTask(
        operator_pb2.KillTaskRequest(
            framework=args.framework, task_id=args.task_id, grace_period_seconds=args.grace
        )
    )
    _done(
        args,
        {"framework_id": reply.framework_id, "task_id": args.task_id, "state": "KILLING"},
        f"task {args.task_id} of framework {reply.framework_id}: being killed",
    )


async def _preemptions(stub, args) -> None:
    reply = await stub.ListPreemptions(operator_pb2.ListPreemptionsRequest())
    rows = [
        {
            "at": p.at,
            "when": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.at)),
            "framework_id": p.framework_id,
            "task_id": p.task_id,
            "role": p.role,
            "agent_id": p.agent_id,
            "beneficiary": p.beneficiary,
            "reason": p.reason,
            "message": p.message,
        }
        for p in reply.preemptions
    ]
    if not rows and not args.json:
        print("no task has been preempted (since the master started)")
        return
    _emit(
        args,
        rows,
        [
            ("when", "WHEN"),
            ("task_id", "TASK"),
            ("role", "ROLE"),
            ("agent_id", "AGENT"),
            ("beneficiary", "FOR ROLE"),
            ("reason", "OWED"),
        ],
    )


async def _events(stub, args) -> None:
    """Prints events until CAUGHT_UP, or for ever with --follow: after a broken stream (a
    failover) it asks the master set for the leader again and resumes after the last index."""
    since = args.since
    while True:
        request = operator_pb2.WatchEventsRequest(since=since, topics=args.topic)
        try:
            async for event in stub.WatchEvents(request):
                if event.topic == "stream" and event.kind == "CAUGHT_UP":
                    if not args.follow:
                        return
                    continue
                _print_event(args, event)
                if event.topic != "stream":
                    since = event.index
        except grpc.aio.AioRpcError as e:
            if not args.follow or e.code() not in _CONNECTION_CODES + (
                grpc.StatusCode.RESOURCE_EXHAUSTED,
            ):
                raise
            print(f"agora cluster events: {e.details()}; following again", file=sys.stderr)
            await asyncio.sleep(0.5)
            leader = await asyncio.to_thread(master_address, args)
            channel = open_channel(leader, credentials_from(args))
            stub = operator_pb2_grpc.OperatorStub(channel)


def _print_event(args, event: operator_pb2.ClusterEvent) -> None:
    if args.json:
        row = {
            "index": event.index,
            "at": event.at,
            "topic": event.topic,
            "kind": event.kind,
            "subject": event.subject,
            "principal": event.principal,
            "detail": dict(event.detail),
        }
        print(json.dumps(row, sort_keys=True), flush=True)
        return
    when = (
        time.strftime("%H:%M:%S", time.localtime(event.at)) + f".{int(event.at * 1000) % 1000:03d}"
    )
    by = f" by {event.principal}" if event.principal else ""
    detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
    print(f"{when} {event.index} {event.kind} {event.subject}{by} {detail}".rstrip(), flush=True)


def _done(args, payload: dict, text: str) -> None:
    print(json.dumps(payload) if args.json else text)


# `agora cluster WHAT` -> its call.
CALLS = {
    "state": _state,
    "masters": _masters,
    "agents": _agents,
    "frameworks": _frameworks,
    "tasks": _tasks,
    "roles": _roles,
    "weight": _weight,
    "quota": _quota,
    "drain": _drain,
    "undrain": _undrain,
    "teardown": _teardown,
    "kill": _kill,
    "preemptions": _preemptions,
    "events": _events,
}
