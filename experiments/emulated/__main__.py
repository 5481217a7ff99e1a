"""`python -m agora.experiments.emulated --master HOST:PORT --agents N`: a fleet as a process.

It prints one JSON object per line on stdout: {"event": "ready", ...} once every agent has
registered, {"event": "stats", ...} every --stats-interval seconds, and {"event": "stopped",
...} after SIGTERM/SIGINT. Logs go to stderr.

It exits promptly on SIGTERM or SIGINT whatever it is doing (registering, reconnecting to a
master that is gone): its agents get STOP_GRACE seconds to close their streams, the process
ends at most twice that after the signal, and a second signal ends it at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time

from agora.common import ResourceError, Resources, configure_logging, parse_attributes
from agora.common.credentials import Credentials, CredentialsError
from agora.experiments.emulated.fleet import DEFAULT_RESOURCES, EmulatedFleet, FleetConfig
from agora.experiments.emulated.tasks import constant, exponential


def duration_sampler(text: str):
    """`1.5` or `constant:1.5` (seconds), or `exp:MEAN` (exponential with that mean)."""
    kind, _, value = text.partition(":") if ":" in text else ("constant", "", text)
    try:
        seconds = float(value)
        if kind == "constant":
            return constant(seconds)
        if kind in ("exp", "exponential"):
            return exponential(seconds)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None
    raise argparse.ArgumentTypeError(f"{text!r}: write SECONDS, constant:SECONDS or exp:MEAN")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agora.experiments.emulated",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--master", required=True, help="the master's HOST:PORT")
    p.add_argument("--agents", type=int, default=10, help="how many agents (default 10)")
    p.add_argument(
        "--resources",
        default=DEFAULT_RESOURCES,
        help=f"each agent's resources (default {DEFAULT_RESOURCES!r})",
    )
    p.add_argument("--attributes", default="", help="each agent's attributes, 'rack:r1;zone:z1'")
    p.add_argument(
        "--racks",
        type=int,
        default=0,
        help="give agent i the attribute rack=r{i %% RACKS} (default 0: none)",
    )
    p.add_argument("--hostname-prefix", default="emu", help="agents are PREFIX-0, PREFIX-1 ...")
    p.add_argument(
        "--agents-per-channel",
        type=int,
        default=100,
        help="agent streams per shared gRPC connection (default 100)",
    )
    p.add_argument(
        "--carry",
        action="store_true",
        help="carry every agent to the master on one AgentRelay stream, as `agora relay` "
        "does, instead of a gRPC stream each (the master sees relayed agents)",
    )
    p.add_argument(
        "--register-wave",
        type=int,
        default=500,
        help="agents that dial at once while the fleet starts (default 500)",
    )
    p.add_argument(
        "--duration",
        type=duration_sampler,
        default=constant(1.0),
        help="run time of a task that declares none: SECONDS or exp:MEAN (default 1)",
    )
    p.add_argument(
        "--heartbeat-interval",
        type=float,
        default=5.0,
        help="until the master states its own (default 5 s)",
    )
    p.add_argument(
        "--stats-interval",
        type=float,
        default=1.0,
        help="seconds between stats lines (default 1; 0 for none)",
    )
    p.add_argument("--seed", type=int, default=1, help="random seed (heartbeat phases)")
    p.add_argument("--tls-ca", help="mutual TLS to the master: the CA (with --tls-cert, --tls-key)")
    p.add_argument("--tls-cert", help="this fleet's certificate (an agent's, from agora tls)")
    p.add_argument("--tls-key", help="its key")
    p.add_argument("--log-level", default="warning", help="log level on stderr (default warning)")
    return p


def _emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, "time": time.monotonic(), **fields}), flush=True)


# Seconds the agents get to close their streams after a stop signal.
STOP_GRACE = 5.0


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    os._exit(code)


def _on_stop_signal(stop: asyncio.Event) -> None:
    if stop.is_set():
        _exit_now(1)  # a second signal: now
    stop.set()
    # Whatever the loop is stuck in (thousands of agents dialling a master that is gone), the
    # process ends: a fleet left behind by an experiment heartbeats into the next one.
    watchdog = threading.Timer(2 * STOP_GRACE, _exit_now, args=(1,))
    watchdog.daemon = True  # a fleet that stops in time exits without waiting for it
    watchdog.start()


async def _stop(fleet: EmulatedFleet) -> None:
    try:
        await asyncio.wait_for(fleet.stop(), STOP_GRACE)
    except TimeoutError:
        _emit("stop_timeout", seconds=STOP_GRACE)


async def run(config: FleetConfig, stats_interval: float) -> int:
    fleet = EmulatedFleet(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_stop_signal, stop)
    starting = asyncio.create_task(fleet.start(timeout=600))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():
        starting.cancel()
        await _stop(fleet)
        _emit("stopped", **fleet.totals())
        return 1
    try:
        seconds = starting.result()
    except TimeoutError as e:
        _emit("error", message=str(e), **fleet.totals())
        await _stop(fleet)
        return 1
    _emit("ready", seconds=round(seconds, 3), **fleet.totals())
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), stats_interval if stats_interval > 0 else None)
        if stats_interval > 0 and not stop.is_set():
            _emit("stats", **fleet.totals())
    stopper.cancel()
    totals = fleet.totals()
    await _stop(fleet)
    _emit("stopped", **totals)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        resources = Resources.parse(args.resources)
        attributes = parse_attributes(args.attributes) if args.attributes else {}
    except (ResourceError, ValueError) as e:
        parser.error(str(e))
    if args.agents < 0 or args.agents_per_channel < 1 or args.register_wave < 1:
        parser.error("--agents must be >= 0, --agents-per-channel and --register-wave >= 1")
    try:
        credentials = Credentials.load(args.tls_ca, args.tls_cert, args.tls_key)
    except CredentialsError as e:
        parser.error(str(e))
    configure_logging(args.log_level, final=True)
    config = FleetConfig(
        master=args.master,
        agents=args.agents,
        resources=resources,
        attributes=attributes,
        racks=args.racks,
        hostname_prefix=args.hostname_prefix,
        agents_per_channel=args.agents_per_channel,
        register_wave=args.register_wave,
        default_duration=args.duration,
        heartbeat_interval=args.heartbeat_interval,
        seed=args.seed,
        credentials=credentials,
        carry=args.carry,
    )
    return asyncio.run(run(config, args.stats_interval))


if __name__ == "__main__":
    sys.exit(main())
