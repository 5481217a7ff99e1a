"""`agora master`: run the master daemon in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from cli.options import add_log_flags, setup_logging


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "master",
        help="run the master: agent registry, offers, framework API",
        description=(
            "Runs the Agora master in the foreground. Agents dial it (`agora agent --master "
            "HOST:PORT`), frameworks subscribe to it, and `agora cluster ...` queries it. With "
            "--state-dir it keeps agents, frameworks, weights and quota in SQLite, so after a "
            "restart agents and frameworks come back with their ids and running tasks."
        ),
    )
    p.add_argument("--port", type=int, default=5050,
                   help="port to serve on (default 5050; 0 picks a free one)")
    p.add_argument("--host", default="0.0.0.0",
                   help="address to bind (default 0.0.0.0: reachable from other machines)")
    p.add_argument("--state-dir", type=Path, default=None,
                   help="directory for the master's SQLite state (default: none, state is "
                   "kept in memory and lost on restart)")
    p.add_argument("--heartbeat-interval", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between heartbeats to and from agents and frameworks "
                   "(default 5)")
    p.add_argument("--agent-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="an agent silent this long is removed and its tasks reported LOST "
                   "(default 30; must exceed --heartbeat-interval)")
    p.add_argument("--allocation-batch", type=float, default=0.002, metavar="SECONDS",
                   help="after a change that frees resources, wait this long to batch further "
                   "changes into one allocation (default 0.002)")
    p.add_argument("--allocation-interval", type=float, default=1.0, metavar="SECONDS",
                   help="periodic allocation sweep, a safety net (default 1)")
    p.add_argument("--offer-timeout", type=float, default=None, metavar="SECONDS",
                   help="rescind offers left unanswered this long (default: never)")
    p.add_argument("--role-sorter", default="drf",
                   help="how roles are ordered for offers: drf or random (default drf)")
    p.add_argument("--framework-sorter", default="drf",
                   help="how frameworks within a role are ordered: drf or random (default drf)")
    add_log_flags(p)
    p.set_defaults(func=_run, parser=p)


def _run(args: argparse.Namespace) -> int:
    from cli.main import CommandError
    from master import Master, MasterConfig

    if args.port < 0 or args.port > 65535:
        args.parser.error(f"--port must be in 0-65535, got {args.port}")

    config = MasterConfig(
        host=args.host, port=args.port, state_dir=args.state_dir,
        heartbeat_interval_seconds=args.heartbeat_interval,
        agent_timeout_seconds=args.agent_timeout,
        allocation_batch_seconds=args.allocation_batch,
        allocation_interval_seconds=args.allocation_interval,
        offer_timeout_seconds=args.offer_timeout,
        role_sorter=args.role_sorter, framework_sorter=args.framework_sorter,
    )
    try:
        master = Master(config)
    except ValueError as e:  # a bad flag value: argparse's exit 2 with the reason
        args.parser.error(str(e).replace("_seconds", "").replace("_", "-"))
    setup_logging(args)
    try:
        return asyncio.run(_serve(master))
    except OSError as e:
        raise CommandError(f"cannot serve on {args.host}:{args.port}: {e}") from None


async def _serve(master) -> int:
    await master.start()
    print(f"master listening on {master.address}", flush=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(master.stop()))
    await master.wait_closed()
    return 0
