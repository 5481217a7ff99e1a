"""`agora relay`: run a relay (link shard) that carries many agents' links to the master."""

from __future__ import annotations

import argparse
import asyncio
import signal

from agora.cli.errors import CommandError
from agora.cli.options import (
    add_daemon_tls_flags,
    add_log_flags,
    daemon_credentials,
    master_spec,
    one_line_errors,
    port_number,
    setup_logging,
)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "relay",
        help="run a relay: agents dial it as a master, and it carries them all on one stream",
        description=(
            "Run an Agora relay (a link shard, as in Borg). Agents give the relay's address as "
            "their --master; the relay authenticates them (the same TLS or tokens as a master), "
            "follows the leading master and carries every agent's link on one stream to it, "
            "batching what they say. The master then holds one stream per relay instead of one "
            "per agent (about 23 KB each). With credentials, the master's --acls must allow the "
            "relay's principal in a relay_agents rule. If the relay loses the master, or stops, "
            "its agents' streams end and they register again, as after a master failover."
        ),
    )
    parser.add_argument(
        "--master",
        required=True,
        type=master_spec,
        metavar="HOST:PORT",
        help="the master: HOST:PORT, a set h1:5050,h2:5050,h3:5050, or "
        "zk://h1:2181,h2:2181/agora; the relay follows the leader",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface agents dial; 0.0.0.0 for all (needs TLS or --insecure) "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--port",
        type=port_number,
        default=5053,  # after the master (5050), the agent (5051) and `agora local --masters 3`
        help="port agents dial; 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics (agents carried, messages and batches each way, the "
        "master link) at http://HOST:PORT/metrics, on --host (default: off; 0 picks a free port)",
    )
    add_daemon_tls_flags(parser)
    add_log_flags(parser)
    parser.set_defaults(func=run)

    one_line_errors(parser, "relay")


def run(args: argparse.Namespace) -> int:
    from agora.agent.relay import RelayConfig

    setup_logging(args)
    config = RelayConfig(
        master=args.master,
        host=args.host,
        port=args.port,
        credentials=daemon_credentials(args),
        insecure=args.insecure,
        metrics_port=args.metrics_port,
    )
    return asyncio.run(_serve(config))


async def _serve(config) -> int:
    from agora.agent.relay import Relay

    relay = Relay(config)
    try:
        await relay.start()
    except (OSError, ValueError) as e:
        await relay.stop()
        raise CommandError(f"cannot start the relay: {e}") from None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    print(f"relay listening on {relay.address} (master {config.master})", flush=True)
    if relay.metrics_url is not None:
        print(f"relay metrics on {relay.metrics_url}/metrics", flush=True)

    async def linked() -> None:
        await relay.connected.wait()  # agents are taken from now on
        print(f"relay linked to the master at {relay.tracker.current()}", flush=True)

    announce = asyncio.create_task(linked())
    await stopping.wait()
    announce.cancel()
    await relay.stop()
    return 0
