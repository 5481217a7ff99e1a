"""`agora batch`: the batch framework daemon (jobs queued, placed on offers, retried)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from pathlib import Path

from cli.options import add_log_flags, setup_logging


def register(subparsers: argparse._SubParsersAction) -> None:
    from frameworks.batch.queue import POLICIES

    parser = subparsers.add_parser(
        "batch",
        help="run the batch framework daemon (the API behind `agora job`)",
        description=(
            "Subscribes to the master as framework 'batch' and serves the Batch gRPC API, "
            "whose address it publishes to the master so that `agora job` needs only "
            "--master. Jobs are kept in SQLite under --state-dir: restart the daemon with the "
            "same dir and it takes its running jobs back."
        ),
    )
    parser.add_argument(
        "--master", required=True, metavar="HOST:PORT",
        help="address of the master, e.g. 127.0.0.1:5050")
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="interface for the Batch API; 0.0.0.0 for all (default: %(default)s)")
    parser.add_argument(
        "--port", type=_port, default=0,
        help="port for the Batch API; 0 picks a free one (default: %(default)s)")
    parser.add_argument(
        "--advertise-host", default=None, metavar="HOST",
        help="host name or IP published to clients (default: --host)")
    parser.add_argument(
        "--state-dir", type=Path, default=Path("agora-batch"), metavar="DIR",
        help="where jobs and the framework id are stored (default: ./agora-batch)")
    parser.add_argument(
        "--queue", default="fifo", choices=sorted(POLICIES),
        help="queue order: fifo (submission order), priority (highest --priority first) or "
             "sjf (shortest declared duration first) (default: %(default)s)")
    parser.add_argument(
        "--role", default="*", help="role the framework is allocated under (default: *)")
    parser.add_argument(
        "--retry-backoff", type=_seconds, default=1.0, metavar="SECONDS",
        help="wait before the first retry of a failed instance; doubles each time, up to 60 s "
             "(default: %(default)s)")
    add_log_flags(parser)
    parser.set_defaults(func=run)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port in 0-65535")
    return port


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0")
    return value


def run(args: argparse.Namespace) -> int:
    from frameworks.batch import BatchConfig

    setup_logging(args)
    config = BatchConfig(
        master=args.master, host=args.host, port=args.port, state_dir=args.state_dir,
        queue=args.queue, role=args.role, advertise_host=args.advertise_host,
        retry_backoff_seconds=args.retry_backoff,
        retry_backoff_max_seconds=max(60.0, args.retry_backoff))
    return asyncio.run(_serve(config))


async def _serve(config) -> int:
    from cli.main import CommandError
    from frameworks.batch import BatchDaemon

    try:
        daemon = BatchDaemon(config)
        await daemon.start()
    except (OSError, ValueError) as e:
        raise CommandError(f"cannot start the batch daemon: {e}") from None
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(f"batch listening on {daemon.address} (master {config.master}, "
          f"state dir {os.path.abspath(config.state_dir)})", flush=True)
    await stopping.wait()
    await daemon.stop()
    return 0
