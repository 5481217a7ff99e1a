"""`agora app`: put, list, get, scale, delete long-running apps and read their endpoints."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agora.cli.errors import CommandError, unreachable
from agora.cli.options import add_json_flag, add_master_flag, credentials_from
from agora.cli.tables import format_table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "app",
        help="manage long-running apps on the service framework",
        description=(
            "Talks to the service framework (`agora services`), found through the master. "
            "An app file (JSON or YAML) has at least id, cmd, instances, cpus and mem; see "
            "protos/agora/v1/services.proto for every field."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text, description=help_text)
        add_master_flag(p)
        p.add_argument(
            "--services",
            metavar="HOST:PORT",
            default=None,
            help="the Services API address (default: ask the master)",
        )
        add_json_flag(p)
        return p

    p = action("put", "create or update an app from a JSON or YAML file")
    p.add_argument("file", type=Path, help="the app file (.json, .yaml or .yml)")
    p.add_argument(
        "--create", action="store_true", help="only create: fail if an app with this id exists"
    )
    p.set_defaults(func=_put)
    p = action("list", "list the apps")
    p.set_defaults(func=_list)
    p = action("get", "show an app: its instances, deployments, and why instances wait")
    p.add_argument("id")
    p.set_defaults(func=_get)
    p = action("scale", "change an app's number of instances")
    p.add_argument("id")
    p.add_argument("instances", type=int)
    p.set_defaults(func=_scale)
    p = action("delete", "kill an app's instances and remove it")
    p.add_argument("id")
    p.set_defaults(func=_delete)
    p = action("logs", "print the stdout (or stderr) of one of an app's instances")
    p.add_argument("id")
    p.add_argument(
        "--instance",
        type=int,
        default=0,
        help="which instance, by its place in `agora app get` (default 0, the first)",
    )
    p.add_argument("--stderr", action="store_true", help="print stderr instead of stdout")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing until it ends")
    p.set_defaults(func=_logs)
    p = action("endpoints", "print the host:port of each healthy instance")
    p.add_argument("id")
    p.add_argument(
        "--watch",
        action="store_true",
        help="keep printing the endpoints whenever they change (Ctrl-C to stop)",
    )
    p.set_defaults(func=_endpoints)


# --- plumbing ------------------------------------------------------------------------------


def _stub(args: argparse.Namespace, at: str | None = None):
    """A Services stub: at `at`, at --services, or where the master says the API is."""
    from agora.common.credentials import sync_channel
    from agora.common.rpc import CHANNEL_OPTIONS
    from agora.frameworks.sdk.discovery import SET_LABEL
    from agora.frameworks.service.client import ServicesNotFound, find_services
    from agora.v1 import services_pb2_grpc

    credentials = credentials_from(args)
    address = at or args.services
    if not hasattr(args, "_in_set"):
        args._in_set = False
    if not address:
        try:
            found = find_services(args.master, credentials=credentials)
        except ServicesNotFound as e:
            raise CommandError(str(e)) from None
        address = found.info.service_address
        args._in_set = SET_LABEL in found.info.labels  # a set's failover is waited out
    channel = sync_channel(address, credentials, CHANNEL_OPTIONS)
    args._services_at = address  # for a failure's message (_failed)
    return channel, services_pb2_grpc.ServicesStub(channel)


def _failed(args: argparse.Namespace, error) -> CommandError:
    """A failed call to the services daemon: a refusal or bad request in the daemon's words;
    a call that did not get through, with its cause named (agora.common.failures)."""
    import grpc

    if error.code() in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAUTHENTICATED,
    ):
        where = getattr(args, "_services_at", "") or "?"
        if not args.services and error.code() == grpc.StatusCode.UNAVAILABLE:
            from agora.common.addresses import loopback_published

            if why := loopback_published(where, args.master, "agora services"):
                return CommandError(why)
        return unreachable(
            error,
            where,
            credentials_from(args),
            what="the services daemon",
            service="Services",
        )
    return CommandError(error.details() or error.code().name)


def _call(args: argparse.Namespace, method: str, request):
    """One call; a standby of a set sends it to the leader, and a set's failover is waited
    out (cli/set_follow.py)."""
    import time

    import grpc

    from agora.cli.set_follow import FAILOVER_WAIT, next_try

    deadline = time.monotonic() + FAILOVER_WAIT
    at = None
    while True:
        channel, stub = _stub(args, at)
        with channel:
            try:
                return getattr(stub, method)(request, timeout=30)
            except grpc.RpcError as e:
                at = next_try(
                    e,
                    args._services_at,
                    given=bool(args.services),
                    in_set=args._in_set,
                    deadline=deadline,
                    method=method,
                )
                if at is None:
                    raise _failed(args, e) from None
                at = at or None


def _to_dict(message) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _print_json(message) -> None:
    print(json.dumps(_to_dict(message), indent=2, sort_keys=True))


# --- actions -------------------------------------------------------------------------------


def _put(args: argparse.Namespace) -> int:
    from agora.frameworks.service.apps import AppError, parse_app_text
    from agora.v1 import services_pb2

    try:
        text = args.file.read_text()
    except OSError as e:
        raise CommandError(f"cannot read {args.file}: {e.strerror}") from None
    try:
        app = parse_app_text(text, str(args.file))
    except AppError as e:
        raise CommandError(str(e)) from None
    reply = _call(args, "PutApp", services_pb2.PutAppRequest(app=app, create_only=args.create))
    if args.json:
        _print_json(reply)
        return 0
    verb = "created" if reply.created else "updated"
    extra = "; rolling out the new version" if reply.deploying else ""
    print(
        f"app {reply.app.id} {verb} (version {reply.app.version}, "
        f"{reply.app.instances} instance(s)){extra}"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    from agora.v1 import services_pb2

    reply = _call(args, "ListApps", services_pb2.ListAppsRequest())
    if args.json:
        print(json.dumps([_to_dict(a) for a in reply.apps], indent=2, sort_keys=True))
        return 0
    rows = [("ID", "INSTANCES", "HEALTHY", "STATE", "WAITING")]
    for status in reply.apps:
        rows.append(
            (
                status.app.id,
                str(status.app.instances),
                str(status.healthy),
                status.state,
                _short(status.waiting_reason),
            )
        )
    print(format_table(rows[0], rows[1:]))
    return 0


def _get(args: argparse.Namespace) -> int:
    from agora.frameworks.sdk import state_name
    from agora.v1 import services_pb2

    status = _call(args, "GetApp", services_pb2.GetAppRequest(id=args.id))
    if args.json:
        _print_json(status)
        return 0
    app = status.app
    command = app.cmd or " ".join(app.args)
    print(f"app:        {app.id}")
    print(f"state:      {status.state}")
    print(f"version:    {app.version}")
    print(f"command:    {command}")
    print(f"resources:  cpus:{app.cpus:g} mem:{app.mem:g} disk:{app.disk:g} ports:{app.ports}")
    print(
        f"instances:  {app.instances} wanted, {status.running} running, "
        f"{status.healthy} healthy, {status.staged} staged, {status.unhealthy} unhealthy"
    )
    if app.constraints:
        text = ", ".join(
            f"[{c.field}, {c.operator}{', ' + c.value if c.value else ''}]" for c in app.constraints
        )
        print(f"constraints: {text}")
    if status.waiting_reason:
        print(f"waiting:    {status.waiting_reason}")
    for label, text, at in (
        ("last failure", status.last_failure, status.last_failure_at),
        ("last failed health check", status.last_health_failure, status.last_health_failure_at),
        ("last preemption", status.last_preemption, status.last_preemption_at),
    ):
        if text:
            ago = max(0.0, time.time() - at)
            print(f"{label}: {text} ({ago:.0f} s ago)")
    for d in status.deployments:
        print(
            f"deployment: {d.from_versions} -> {d.to_version}: {d.old_instances} old, "
            f"{d.new_instances} new ({d.new_healthy} healthy)"
        )
    if status.tasks:
        rows = [("TASK", "HOST", "PORTS", "STATE", "HEALTH", "VERSION")]
        for t in status.tasks:
            health = "-" if not t.HasField("healthy") else ("healthy" if t.healthy else "UNHEALTHY")
            state = state_name(t.state) + (" (killing)" if t.killing else "")
            rows.append(
                (
                    t.task_id,
                    f"{t.hostname} ({t.host})",
                    ",".join(str(p) for p in t.ports) or "-",
                    state,
                    health,
                    t.version,
                )
            )
        print()
        print(format_table(rows[0], rows[1:]))
    return 0


def _scale(args: argparse.Namespace) -> int:
    from agora.v1 import services_pb2

    reply = _call(
        args, "ScaleApp", services_pb2.ScaleAppRequest(id=args.id, instances=args.instances)
    )
    if args.json:
        _print_json(reply)
        return 0
    print(f"app {reply.app.id} scaled to {reply.app.instances} instance(s)")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from agora.v1 import services_pb2

    _call(args, "DeleteApp", services_pb2.DeleteAppRequest(id=args.id))
    if args.json:
        print(json.dumps({"deleted": args.id}))
    else:
        print(f"app {args.id} deleted; its instances are being killed")
    return 0


def _endpoints(args: argparse.Namespace) -> int:
    from agora.v1 import services_pb2

    if args.watch:
        return _watch_endpoints(args)
    reply = _call(args, "GetEndpoints", services_pb2.GetEndpointsRequest(app_id=args.id))
    if args.json:
        _print_json(reply)
        return 0
    for e in reply.endpoints:
        print(" ".join(f"{e.host}:{port}" for port in e.ports) or e.host)
    if not reply.endpoints:
        print(f"app {args.id} has no healthy instances ({reply.instances} wanted)", file=sys.stderr)
    return 0


def _watch_endpoints(args: argparse.Namespace) -> int:
    import grpc

    from agora.v1 import services_pb2

    channel, stub = _stub(args)
    with channel:
        try:
            for reply in stub.WatchEndpoints(services_pb2.WatchEndpointsRequest(app_id=args.id)):
                if args.json:
                    print(json.dumps(_to_dict(reply), sort_keys=True), flush=True)
                    continue
                print(f"# {len(reply.endpoints)} healthy of {reply.instances} wanted", flush=True)
                for e in reply.endpoints:
                    print(" ".join(f"{e.host}:{port}" for port in e.ports) or e.host, flush=True)
        except grpc.RpcError as e:
            raise _failed(args, e) from None
    print(f"app {args.id} was deleted", file=sys.stderr)
    return 0


def _logs(args: argparse.Namespace) -> int:
    from agora.cli.options import master_address
    from agora.cli.sandbox_read import find_task, print_file
    from agora.v1 import services_pb2

    status = _call(args, "GetApp", services_pb2.GetAppRequest(id=args.id))
    tasks = [t for t in status.tasks if not t.killing] or list(status.tasks)
    if not tasks:
        raise CommandError(f"app {args.id} has no instances running (`agora app get {args.id}`)")
    if not 0 <= args.instance < len(tasks):
        raise CommandError(f"app {args.id} has instances 0-{len(tasks) - 1}, not {args.instance}")
    credentials = credentials_from(args)
    place = find_task(master_address(args), credentials, tasks[args.instance].task_id)
    return print_file(place, credentials, stderr=args.stderr, follow=args.follow)


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
