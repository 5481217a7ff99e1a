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
    setup_logging,
    warn_unnamed_address,
)
from agora.common.settings import add_flags, flag_settings, in_flag_words


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
    from agora.agent.config import AgentConfig

    add_flags(parser, AgentConfig)  # each declared once, in AgentConfig's field metadata
    add_daemon_tls_flags(parser)
    add_join_flags(parser, "WORK_DIR/tls")
    add_log_flags(parser)
    parser.set_defaults(func=run)

    one_line_errors(parser, "agent")


register.builds_chosen_action = True  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    from agora.agent.config import AgentConfig
    from agora.common.acls import AclError, load_acls

    if args.check:
        return _check(args)
    if args.master is None:
        raise UsageError("--master is required: the master's HOST:PORT (or --check)")
    if args.acls is not None:
        try:
            load_acls(args.acls)  # a bad file: one line, exit 2, before anything starts
        except AclError as e:
            raise UsageError(str(e)) from None
    setup_logging(args)
    settings = flag_settings(args, AgentConfig)
    settings["work_dir"] = work_dir = args.work_dir or Path(f"agora-agent-{args.port}")
    config = AgentConfig(
        master=args.master,
        **settings,
        credentials=daemon_credentials(args, work_dir / "tls"),
        insecure=args.insecure,
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
    from agora.agent import AgentConfig, AgentDaemon

    try:
        daemon = AgentDaemon(config)
        await daemon.start()
    except (OSError, ValueError) as e:
        words = in_flag_words(str(e), AgentConfig)
        raise CommandError(f"cannot start the agent: {words}") from None
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
