"""`agora services`: the service framework daemon (the API behind `agora app`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from cli.options import add_log_flags, setup_logging


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
    parser.add_argument(
        "--master", required=True, metavar="HOST:PORT",
        help="address of the master, e.g. 127.0.0.1:5050")
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="interface for the Services API; 0.0.0.0 for all (default: %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=0,
        help="port for the Services API; 0 picks a free one (default: %(default)s)")
    parser.add_argument(
        "--advertise-host", default=None, metavar="HOST",
        help="host name or IP published to clients (default: --host)")
    parser.add_argument(
        "--state-dir", type=Path, default=Path("agora-services"), metavar="DIR",
        help="where apps, instances and the framework id are stored "
             "(default: ./agora-services)")
    parser.add_argument(
        "--role", default="*", help="role the framework is allocated under (default: *)")
    add_log_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from frameworks.service import ServicesConfig

    setup_logging(args)
    config = ServicesConfig(master=args.master, host=args.host, port=args.port,
                            state_dir=args.state_dir, role=args.role,
                            advertise_host=args.advertise_host)
    return asyncio.run(_serve(config))


def _port(text: str) -> int:
    """A bad --port is a usage error (exit 2), caught before anything starts."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0-65535, got {port}")
    return port


async def _serve(config) -> int:
    from cli.main import CommandError
    from frameworks.service import ServicesDaemon

    try:
        daemon = ServicesDaemon(config)
        await daemon.start()
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot start the services daemon: {e}") from None
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(f"services listening on {daemon.address} (master {config.master}, "
          f"state dir {os.path.abspath(config.state_dir)})", flush=True)
    await stopping.wait()
    await daemon.stop()
    return 0
