"""`agora services`: the service framework daemon (the API behind `agora app`)."""

from __future__ import annotations

import argparse
import asyncio

from agora.cli.framework_daemon import add_daemon_flags, serve
from agora.cli.options import add_log_flags, daemon_credentials, setup_logging


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "services",
        help="run the service framework daemon (the API behind `agora app`)",
        description=(
            "Subscribes to the master as framework 'services' and serves the Services gRPC "
            "API, whose address it publishes to the master so that `agora app` needs only "
            "--master. Keeps each app at its wanted number of healthy instances, replaces "
            "failed ones with restart backoff, and rolls out new definitions. Apps are kept "
            "in SQLite under --state-dir: restart the daemon with the same dir and it takes "
            "its running tasks back."
        ),
    )
    add_daemon_flags(
        parser,
        api="Services",
        state_dir="agora-services",
        state_help="apps, instances and the framework id",
    )
    add_log_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agora.frameworks.service import ServicesConfig, ServicesDaemon

    setup_logging(args)
    config = ServicesConfig(
        master=args.master,
        host=args.host,
        port=args.port,
        state_dir=args.state_dir,
        role=args.role,
        advertise_host=args.advertise_host,
        credentials=daemon_credentials(args, args.state_dir / "tls"),
        insecure=args.insecure,
        metrics_port=args.metrics_port,
        acls_path=args.acls,
        user=args.user,
    )
    return asyncio.run(serve("services", ServicesDaemon, config, args.zk, args.zk_session_timeout))
