"""`agora agent`: run an agent daemon that offers this machine's resources to a master."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from agora.cli.errors import CommandError, UsageError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_join_flags,
    add_log_flags,
    daemon_credentials,
    master_spec,
    one_line_errors,
    port_number,
    setup_logging,
    warn_unnamed_address,
)
from agora.common import AttributeParseError, ResourceError, Resources, parse_attributes


def _resources(text: str) -> Resources:
    try:
        resources = Resources.parse(text)
    except ResourceError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if resources.is_empty():
        raise argparse.ArgumentTypeError(
            "no resources given: write e.g. 'cpus:4;mem:4096;ports:[31000-32000]'"
        )
    return resources


def _attributes(text: str) -> dict[str, str]:
    try:
        return parse_attributes(text)
    except AttributeParseError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _nonnegative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction between 0 and 1")
    return value


def register(subparsers, argv: list[str]) -> None:
    at = argv.index("agent") + 1 if "agent" in argv else len(argv)
    if argv[at : at + 1] == ["image"]:  # `agora agent image ...`: its images, not the daemon
        from agora.cli.image_cmd import register_image

        register_image(subparsers)
        return
    parser = subparsers.add_parser(
        "agent",
        help="run an agent: offer this machine's resources to a master and run its tasks",
        description=(
            "Run an Agora agent. It dials the master (so it works behind NAT), registers this "
            "machine's resources and attributes, runs the tasks the master sends in sandboxes "
            "under --work-dir, and serves their stdout/stderr to clients. Its id, tasks and "
            "unacknowledged status updates survive a restart of the agent: SIGTERM or Ctrl-C "
            "stops the agent and leaves its tasks running for the next agent on the same "
            "--work-dir; SIGUSR1 kills the tasks first."
        ),
    )
    parser.add_argument(
        "--master",
        type=master_spec,
        metavar="HOST:PORT",
        help="the master (required unless --check): HOST:PORT, a set "
        "h1:5050,h2:5050,h3:5050, or zk://h1:2181,h2:2181/agora; the agent finds the leader "
        "and follows it when it changes",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="do not start: report what this host supports for an agent (cgroups v1 or v2 "
        "and their controllers, namespaces, the work dir's disk, the ports offered, the "
        "clock, the certificates' expiry, the hostname), as a table or with --json; exits 1 "
        "when something would stop the agent",
    )
    parser.add_argument("--json", action="store_true", help="with --check: print JSON")
    parser.add_argument(
        "--host",
        default=None,
        help="address for this agent's own gRPC service (task logs, sandboxes), which it "
        "advertises to the master; 0.0.0.0 for all (default: the address this machine reaches "
        "the master from: 127.0.0.1 for a master on this machine; off loopback that needs TLS "
        "or --insecure)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=5051,
        help="port for this agent's gRPC service; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--resources",
        type=_resources,
        default=None,
        metavar="SPEC",
        help="resources to offer, in Mesos syntax: 'cpus:4;mem:4096;disk:8192;"
        "ports:[31000-32000]' (mem and disk in MB; 'cpus(role):2' reserves for a role). "
        "Default: detected: all CPUs, memory minus 1 GB (half if under 2 GB), disk of "
        "--work-dir minus 5 GB (half if under 10 GB), ports 31000-32000",
    )
    parser.add_argument(
        "--attributes",
        type=_attributes,
        default={},
        metavar="SPEC",
        help="attributes for placement constraints, e.g. 'rack:r1;zone:z1'",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where sandboxes and checkpoints live; reuse it across restarts so the agent "
        "keeps its id and its running tasks (default: ./agora-agent-PORT)",
    )
    parser.add_argument(
        "--advertise-ip",
        default=None,
        metavar="IP",
        help="IP address the master gives to clients for reaching this agent (default: --host, "
        "or with --host 0.0.0.0 the address this machine reaches the master from); the master "
        "refuses a loopback address from an agent on another machine",
    )
    parser.add_argument(
        "--hostname",
        default=None,
        help="hostname reported to the master (default: this machine's hostname)",
    )
    parser.add_argument(
        "--isolation",
        default="cgroups",
        choices=["cgroups", "none"],
        help="cgroups: put each task in cgroups (v2 or v1, whichever the host has) that limit "
        "its memory to its mem and weight its CPU by its cpus, where the agent may "
        "create them; none: process groups only (default: %(default)s)",
    )
    parser.add_argument(
        "--cpu-hard-limit",
        action="store_true",
        help="also cap each task's CPU at its cpus with a CFS quota (needs --isolation cgroups)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics, on --host (default: off; "
        "0 picks a free port)",
    )
    parser.add_argument(
        "--max-log-mb",
        type=float,
        default=10.0,
        metavar="MB",
        help="rotate a task's stdout and stderr past this size: copied to stdout.1 and emptied "
        "(default 10)",
    )
    parser.add_argument(
        "--no-disk-limit",
        action="store_true",
        help="do not kill tasks whose sandbox outgrows their disk resource (checked every "
        "15 s, like Mesos' disk/du isolator; on by default)",
    )
    parser.add_argument(
        "--gc-delay",
        type=_nonnegative,
        default=7 * 24 * 3600.0,
        metavar="SECONDS",
        help="remove a finished task's sandbox this long after its final status is "
        "acknowledged, sooner as the disk fills (default one week, like Mesos' --gc_delay)",
    )
    parser.add_argument(
        "--gc-disk-headroom",
        type=_fraction,
        default=0.1,
        metavar="FRACTION",
        help="sandboxes are kept for gc-delay x (1 - headroom - disk used): with 0.1, they go "
        "at once once the disk is 90%% full (default 0.1)",
    )
    parser.add_argument(
        "--max-completed-tasks",
        type=int,
        default=1000,
        metavar="N",
        help="completed tasks remembered (ListTasks, their files until garbage-collected), the "
        "oldest forgotten first (default 1000)",
    )
    parser.add_argument(
        "--task-pids-max",
        type=int,
        default=1024,
        metavar="N",
        help="processes and threads each task may have at once (the pids cgroup): a fork bomb "
        "stops there; 0 = no bound (default %(default)s)",
    )
    parser.add_argument(
        "--task-namespaces",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every task in pid, mount, ipc and uts namespaces of its own: /proc shows its "
        "own processes only, /tmp and /dev/shm are private (/tmp sized by its disk, else 64 MB) "
        "and other tasks' sandboxes are hidden. Default: on where the host allows it (root "
        "with CAP_SYS_ADMIN, and a C compiler for the task wrapper), else off with a warning; "
        "--task-namespaces refuses to start without them, --no-task-namespaces turns them off "
        "(tasks from images always get them)",
    )
    parser.add_argument(
        "--gpus",
        default=None,
        metavar="INDICES",
        help="the NVIDIA GPUs to offer, as device indices, e.g. 0,1 (default: those nvidia-smi "
        "or /proc/driver/nvidia finds); each is given to one task at a time, which sees it as "
        "CUDA_VISIBLE_DEVICES",
    )
    parser.add_argument(
        "--container-runtime",
        default=None,
        metavar="PATH",
        help="the OCI runtime that runs tasks from images, taking runc's command line "
        "(default: runc on PATH; crun works where the host's cgroups let it start)",
    )
    parser.add_argument(
        "--task-env",
        action="append",
        default=[],
        metavar="NAME",
        help="a variable of this agent's environment that tasks get too (repeat for more; e.g. "
        "--task-env http_proxy --task-env TZ); nothing else of the agent's environment reaches "
        "a task: it starts from PATH=" + "/usr/local/sbin:...:/bin" + " and Agora's variables",
    )
    parser.add_argument(
        "--acls",
        type=Path,
        default=None,
        metavar="FILE",
        help="the master's ACL file (YAML or JSON); its read_sandboxes rules say who besides a "
        "task's own framework and the master may read the task's sandbox here and see its "
        "environment; re-read on SIGHUP (default: every caller may)",
    )
    add_daemon_tls_flags(parser)
    add_join_flags(parser, "WORK_DIR/tls")
    add_log_flags(parser)
    parser.set_defaults(func=run)

    one_line_errors(parser, "agent")


register.builds_chosen_action = True  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    from agora.agent import AgentConfig
    from agora.common.acls import AclError, load_acls

    if args.check:
        return _check(args)
    if args.master is None:
        raise UsageError("--master is required: the master's HOST:PORT (or --check)")
    if args.max_completed_tasks < 1:
        raise UsageError(
            f"--max-completed-tasks must be at least 1, got {args.max_completed_tasks}"
        )
    if args.acls is not None:
        try:
            load_acls(args.acls)  # a bad file: one line, exit 2, before anything starts
        except AclError as e:
            raise UsageError(str(e)) from None
    setup_logging(args)
    work_dir = args.work_dir or Path(f"agora-agent-{args.port}")
    config = AgentConfig(
        master=args.master,
        host=args.host,
        port=args.port,
        resources=args.resources,
        attributes=args.attributes,
        work_dir=work_dir,
        advertise_ip=args.advertise_ip,
        hostname=args.hostname,
        cgroups=args.isolation == "cgroups",
        cpu_hard_limit=args.cpu_hard_limit,
        metrics_port=args.metrics_port,
        max_log_bytes=int(args.max_log_mb * 1024 * 1024),
        enforce_disk=not args.no_disk_limit,
        gc_delay=args.gc_delay,
        gc_disk_headroom=args.gc_disk_headroom,
        credentials=daemon_credentials(args, work_dir / "tls"),
        insecure=args.insecure,
        acls_path=args.acls,
        max_completed_tasks=args.max_completed_tasks,
        task_env=tuple(args.task_env),
        task_pids_max=args.task_pids_max,
        container_runtime=args.container_runtime,
        gpus=args.gpus,
        task_namespaces=args.task_namespaces,
    )
    return asyncio.run(_serve(config))


def _check(args: argparse.Namespace) -> int:
    """`agora agent --check`: the host's report, and 1 when a check fails."""
    import json

    from agora.agent.host_check import FAIL, run_checks
    from agora.agent.resources_detect import detect_resources
    from agora.cli.tables import format_table

    work_dir = args.work_dir or Path(f"agora-agent-{args.port}")
    resources = args.resources or detect_resources(work_dir)
    checks = run_checks(
        work_dir,
        resources,
        Path(args.tls_cert) if args.tls_cert else None,
        Path(args.tls_ca) if args.tls_ca else None,
    )
    if args.json:
        print(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        print(f"resources: {resources.format()}")
        print(
            format_table(
                ["CHECK", "STATUS", "DETAIL"], [[c.name, c.status, c.detail] for c in checks]
            )
        )
    return 1 if any(c.status == FAIL for c in checks) else 0


async def _serve(config) -> int:
    from agora.agent import AgentDaemon

    try:
        daemon = AgentDaemon(config)
        await daemon.start()
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot start the agent: {e}") from None
    if config.credentials.secure:
        from agora.common import handshakes

        handshakes.watch(daemon.tls_handshake_refused)
        warn_unnamed_address(config.credentials.cert, daemon.advertised_address, "agora agent")
    renewing = None
    if config.credentials.renewable is not None and config.credentials.renewable.addresses:
        from agora.common.renewal import renew_forever

        renewing = asyncio.create_task(renew_forever(config.credentials), name="renewal")
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    kill_tasks = False

    def stop(kill: bool) -> None:
        nonlocal kill_tasks
        kill_tasks = kill_tasks or kill
        stopping.set()

    # As with Mesos' agent: SIGTERM/SIGINT leave the tasks running for the next agent on this
    # work dir to re-attach to; SIGUSR1 kills them first (the machine leaves the cluster).
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop, False)
    loop.add_signal_handler(signal.SIGUSR1, stop, True)
    loop.add_signal_handler(signal.SIGHUP, daemon.on_hangup)
    print(
        f"agent listening on {daemon.address} (master {config.master}, "
        f"work dir {os.path.abspath(config.work_dir)})",
        flush=True,
    )
    if daemon.metrics_url is not None:
        print(f"agent metrics on {daemon.metrics_url}/metrics", flush=True)
    await stopping.wait()
    if renewing is not None:
        renewing.cancel()
    await daemon.stop(kill_tasks=kill_tasks)
    return 0
