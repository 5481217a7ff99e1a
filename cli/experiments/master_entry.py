"""A bare master process for experiments: `python -m cli.experiments.master_entry --port 0`.

Used only while `agora master` lacks the --allocation-mode flag: it builds the same
MasterConfig, prints the same "master listening on HOST:PORT" line, and stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from common import configure_logging
from master import Master, MasterConfig


async def _serve(config: MasterConfig) -> int:
    master = Master(config)
    await master.start()
    print(f"master listening on {master.address}", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await master.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cli.experiments.master_entry")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--state-dir", default=None)
    p.add_argument("--allocation-mode", default="event", choices=["event", "interval"])
    p.add_argument("--allocation-interval", type=float, default=1.0)
    p.add_argument("--allocation-batch", type=float, default=0.002)
    p.add_argument("--log-level", default="warning")
    args = p.parse_args(argv)
    configure_logging(args.log_level)
    config = MasterConfig(
        host=args.host,
        port=args.port,
        state_dir=args.state_dir,
        allocation_mode=args.allocation_mode,
        allocation_interval_seconds=args.allocation_interval,
        allocation_batch_seconds=args.allocation_batch,
    )
    return asyncio.run(_serve(config))


if __name__ == "__main__":
    sys.exit(main())
